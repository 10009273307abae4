#include "model/decode_graphs.h"

#include <algorithm>
#include <numeric>

#include "core/logging.h"
#include "gpu/runtime.h"

namespace lw::model {

namespace {

int64_t pow2_at_least(int64_t v, int64_t floor) {
  int64_t p = floor;
  while (p < v) p *= 2;
  return p;
}

template <class T>
void upload(Context& ctx, const std::vector<T>& v, const Tensor& dst) {
  LW_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, ctx.stream().get()));
}

}  // namespace

bool DecodeGraphs::applies(const std::vector<SequenceChunk>& batch) {
  if (!Graph::graphs_supported() || static_cast<int64_t>(batch.size()) > kMaxBatch) return false;
  for (const SequenceChunk& s : batch)
    if (s.tokens.size() != 1 || s.logits != SequenceChunk::Logits::last) return false;
  return true;
}

Tensor DecodeGraphs::run(Context& ctx, const KvCache& cache, const HostLayout& h, int64_t max_position, const Compute& compute) {
  // A cache is its first layer's addresses (values and scales), block count and size, format.
  const CacheId cache_id{cache.k(0).data_ptr(), cache.layer(0).k_scale.defined() ? cache.layer(0).k_scale.data_ptr() : nullptr,
                         cache.num_blocks(), cache.block_size(), static_cast<int>(cache.format())};
  if (!(cache_id == cache_)) {
    entries_.clear();  // the graphs hold the old cache's addresses
    logits_.clear();
    pool_.reset();
    cache_ = cache_id;
  }
  if (!pool_) pool_ = std::make_unique<PrivatePool>(ctx.allocator());
  const int64_t n = h.tokens, rows = pow2_at_least(n, 1);
  int64_t longest = 0;
  for (int32_t c : h.context_lens) longest = std::max<int64_t>(longest, c);
  const int64_t bucket = std::min(pow2_at_least(longest, 256), std::max(longest, max_position));
  const int bs = cache.block_size();
  const int64_t width = KvCache::blocks_for(bucket, bs);
  std::unique_ptr<Entry>& e = entries_[{rows, bucket, ctx.deterministic()}];
  if (e && !e->graph.ready()) return Tensor();  // a bucket that runs eagerly
  const bool fresh = !e;
  if (fresh) e = make_entry(ctx, rows, bucket, width);

  // This step's inputs, padded, into the graph's buffers.
  std::vector<int32_t> ids(static_cast<size_t>(rows), 0), lens(static_cast<size_t>(rows), 1),
      tables(static_cast<size_t>(rows * width), 0);
  std::vector<int64_t> positions(static_cast<size_t>(rows), 0), slots(static_cast<size_t>(rows), -1);
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(i);
    ids[r] = h.ids[r];
    positions[r] = h.positions[r];
    slots[r] = h.slots[r];
    lens[r] = h.context_lens[r];
    const size_t used = std::min(h.max_blocks, static_cast<size_t>(width));
    std::copy_n(h.tables.begin() + static_cast<int64_t>(r * h.max_blocks), used, tables.begin() + static_cast<int64_t>(r) * width);
  }
  upload(ctx, ids, e->layout.ids);
  upload(ctx, positions, e->layout.positions);
  upload(ctx, slots, e->layout.slots);
  upload(ctx, tables, e->layout.block_tables);
  upload(ctx, lens, e->layout.attention.token_lens);
  // The matrix attention path's per-sequence table (kernels/attention_prefill.h): row i, one new
  // token, its context.
  std::vector<int32_t> seq_info(static_cast<size_t>(3 * rows));
  for (int64_t i = 0; i < rows; ++i) {
    const auto r = static_cast<size_t>(i);
    seq_info[3 * r] = static_cast<int32_t>(i);
    seq_info[3 * r + 1] = 1;
    seq_info[3 * r + 2] = lens[r];
  }
  upload(ctx, seq_info, e->layout.attention.seq_info);

  if (fresh) {
    Tensor eager;
    const uint64_t transfers = ctx.host_transfers();
    try {
      eager = compute(e->layout);
    } catch (...) {
      entries_.erase({rows, bucket, ctx.deterministic()});
      throw;
    }
    if (ctx.host_transfers() != transfers) {
      // The step copied to or from the host (a mixture-of-experts layer whose experts' path
      // reads the expert offsets there, at this many rows): the bucket runs eagerly.
      log().debug("the decode step of {} rows copies to or from the host: its bucket runs eagerly", rows);
      return eager.slice(0, 0, n);
    }
    try {
      Tensor& out = logits_[rows];
      if (!out.defined()) pool_->use([&] { out = ctx.empty(eager.shape(), eager.dtype()); });
      e->layout.logits_out = out;
      pool_->use([&] { e->graph.capture(ctx.stream(), [&] { e->logits = compute(e->layout); }); });
    } catch (const std::exception& ex) {
      e->layout.logits_out = Tensor();
      log().warn("the decode graph of {} rows and context bucket {} could not be captured; that bucket runs eagerly ({})",
                 rows, bucket, ex.what());
    }
    if (!warned_ && reserve_ > 0 && pool_->bytes() > reserve_) {
      warned_ = true;
      log().warn("the decode graphs hold {:.1f} MiB, past the {:.1f} MiB the KV cache left them", pool_->bytes() / 1048576.0,
                 reserve_ / 1048576.0);
    }
    return eager.slice(0, 0, n);
  }
  e->graph.launch(ctx.stream());
  return e->logits.slice(0, 0, n);
}

size_t DecodeGraphs::captured() const {
  size_t count = 0;
  for (const auto& [key, e] : entries_) count += e && e->graph.ready();
  return count;
}

size_t DecodeGraphs::reserve_bytes(const ModelConfig& c, int64_t vocab, int64_t ranks, DType dtype) {
  const auto d = static_cast<int64_t>(dtype_size(dtype));
  // Logits: one tensor per batch size (1, 2, 4, ... kMaxBatch rows), of the whole vocabulary.
  const int64_t logits = (2 * kMaxBatch - 1) * vocab * d;
  // A step's temporaries per row: the residual stream and its norm, q/k/v and the rotated q,
  // the attention output, gate/up and their product, the logits (a rank's share, and with
  // several ranks the gathered rows twice over); the decode attention's partial rows (up to 16
  // partitions of fp32 rows with their max and sum).
  const int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  // A mixture-of-experts layer: the router's logits, and per routed row x, gate/up, their
  // product and the expert's output.
  const int64_t moe = c.experts > 0 ? c.experts + c.experts_per_token * (2 * c.hidden + 3 * c.moe_intermediate) : 0;
  const int64_t per_row = (4 * c.hidden + 3 * q + 2 * kv + 3 * c.intermediate + moe + c.vocab + (ranks > 1 ? 2 * vocab : 0)) * d +
                          16 * c.heads * (c.head_dim + 2) * 4;
  // The int4 GEMM's k-split sums: up to 16 splits of its widest output (gate/up) for up to 64 rows.
  const int64_t int4_splits = 16 * 64 * 2 * std::max(c.intermediate, c.hidden) * 4;
  return static_cast<size_t>(logits + 2 * kMaxBatch * per_row + int4_splits);
}

std::unique_ptr<DecodeGraphs::Entry> DecodeGraphs::make_entry(Context& ctx, int64_t rows, int64_t bucket,
                                                            int64_t width) const {
  auto e = std::make_unique<Entry>();
  BatchLayout& b = e->layout;
  b.ids = ctx.empty({rows}, DType::i32);
  b.positions = ctx.empty({rows}, DType::i64);
  b.slots = ctx.empty({rows}, DType::i64);
  b.block_tables = ctx.empty({rows, width}, DType::i32);
  b.tokens = b.logits = rows;
  b.attention.sequences = b.attention.tokens = rows;
  b.attention.max_context = static_cast<int>(bucket);
  b.attention.token_lens = ctx.empty({rows}, DType::i32);
  std::vector<int32_t> identity(static_cast<size_t>(rows));
  std::iota(identity.begin(), identity.end(), 0);
  b.attention.token_rows = ctx.to_device(host_vector(identity));
  // The matrix path's tables, as plan_prefill makes them for one token per sequence: every row
  // on the decode kernel, or (deterministic mode) one query tile per sequence. seq_info is
  // filled per step.
  if (ops::matrix_decode_max_tokens(ctx, group_) >= 1) {
    b.attention.decode_seqs = ctx.to_device(host_vector(identity));
    b.attention.decode_count = static_cast<int>(rows);
    b.attention.decode_max_context = static_cast<int>(bucket);
  } else {
    std::vector<int32_t> tiles(static_cast<size_t>(2 * rows), 0);
    for (int64_t i = 0; i < rows; ++i) tiles[static_cast<size_t>(2 * i)] = static_cast<int32_t>(i);
    b.attention.tile_info = ctx.to_device(host_vector(tiles));
    b.attention.tiles = static_cast<int>(rows);
  }
  b.attention.seq_info = ctx.empty({3 * rows}, DType::i32);
  b.attention.group = group_;
  b.attention.tile_tokens = ops::matrix_tile_tokens(group_);
  return e;
}

}  // namespace lw::model
