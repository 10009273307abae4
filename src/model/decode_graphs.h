// Decode steps replayed from graphs (CUDA or HIP), one per batch size (padded up to a power
// of two) and context bucket (the longest context padded up to a power of two, at least 256;
// attention's launch is sized by it). The step that first meets a bucket runs eagerly (the
// GEMM path choice and the allocator's first uses happen there) and is then captured; later
// steps of the bucket copy their inputs into the graph's buffers and replay it. Padding rows
// write no K/V (slot -1) and their logits are dropped. A step whose first eager run copies to
// or from the host (Context::host_transfers: a mixture-of-experts layer whose experts' path
// reads the expert offsets there at that many rows) is not captured: its bucket runs eagerly
// (unpadded) from then on, as does one whose capture fails.
//
// Every block the captures allocate or free lives in the graphs' private pool of the caching
// allocator (core/allocator.h) until the graphs are dropped: a replay writes them, so nothing
// else may be given them. The graphs replay one at a time on the context's stream, so their
// temporaries share the pool, and the graphs of one batch size write their logits to one tensor
// (valid until the next step). reserve_bytes() is what the engine keeps free for them when it
// sizes the KV cache. A bucket whose capture fails (out of memory inside it, say) runs eagerly
// from then on, with a warning.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/context.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "model/batch_layout.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace lw::model {

class DecodeGraphs {
 public:
  static constexpr int64_t kMaxBatch = 256;
  // attention_group: the model's query heads per key/value head (the matrix attention's tiles).
  // reserve: what the engine kept free for the graphs (reserve_bytes), for the pool's warning.
  DecodeGraphs(int attention_group, size_t reserve) : group_(attention_group), reserve_(reserve) {}
  // Computes the logits of a batch laid out on the device (the model's layers).
  using Compute = std::function<Tensor(const BatchLayout&)>;

  // Whether `batch` is a decode step graphs can replay: one token and its logits per
  // sequence, a target with graphs.
  static bool applies(const std::vector<SequenceChunk>& batch);

  // The step's logits ([tokens, vocab]), from the bucket's graph (captured on first use), or
  // undefined where the bucket runs eagerly (the caller computes the step itself).
  Tensor run(Context& ctx, const KvCache& cache, const HostLayout& h, int64_t max_position, const Compute& compute);

  // Device memory the graphs of a model may hold (an estimate from its shape: `shard` is a
  // rank's config, `vocab` the whole vocabulary every rank's logits hold, `ranks` the group's
  // size): one logits tensor per batch size, and twice the temporaries of a step of kMaxBatch
  // rows (the pool's blocks of smaller batches beside them). run() warns once where the pool
  // grows past it.
  static size_t reserve_bytes(const ModelConfig& shard, int64_t vocab, int64_t ranks, DType dtype);
  // Bytes the graphs' pool holds now.
  size_t pool_bytes() const { return pool_ ? pool_->bytes() : 0; }
  // Graphs captured (buckets that replay one).
  size_t captured() const;

 private:
  struct Entry {
    BatchLayout layout;
    Graph graph;
    Tensor logits;
  };
  std::unique_ptr<Entry> make_entry(Context& ctx, int64_t rows, int64_t bucket, int64_t width) const;

  std::unique_ptr<PrivatePool> pool_;  // declared before what it holds: released after them
  std::map<int64_t, Tensor> logits_;   // by rows
  // By (rows, context bucket, deterministic mode: the attention tables differ).
  std::map<std::tuple<int64_t, int64_t, bool>, std::unique_ptr<Entry>> entries_;
  int group_ = 1;
  size_t reserve_ = 0;
  bool warned_ = false;
  struct CacheId {
    const void* data = nullptr;
    const void* scales = nullptr;
    int64_t blocks = 0;
    int block_size = 0;
    int format = 0;
    bool operator==(const CacheId&) const = default;
  };
  CacheId cache_;
};

}  // namespace lw::model
