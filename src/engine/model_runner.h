// Where the engine's forward passes run: one model on one device, or a tensor-parallel group
// whose ranks are threads of this process, each with its own device, model shard and KV
// cache shard. The scheduler runs once, above; every rank runs the same batch.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace lw::engine {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const model::ModelConfig& config() const = 0;
  virtual DType dtype() const = 0;
  virtual int ranks() const = 0;
  // Bytes the weights take, over every rank, and of them the routed experts' matrices.
  virtual size_t weight_bytes() const = 0;
  virtual size_t routed_expert_bytes() const = 0;
  // Rank 0's context: the logits of forward() live there, and the engine samples there.
  virtual Context& context() = 0;
  // KV blocks of block_size tokens in `format` that fit in `fraction` of the free memory of
  // every rank.
  virtual int64_t blocks_that_fit(double fraction, int block_size, ops::KvCacheFormat format) = 0;
  // (Re)allocates the KV cache of every rank.
  virtual void allocate_cache(int64_t blocks, int block_size, ops::KvCacheFormat format) = 0;
  virtual int64_t cache_blocks() const = 0;
  // Model::forward on every rank; rank 0's logits.
  virtual Tensor forward(const std::vector<model::SequenceChunk>& batch) = 0;
  // Batch-invariant execution on every rank (Context::deterministic).
  virtual void set_deterministic(bool on) = 0;
  // False on the nodes of a multi-node group other than node 0: they run follow() instead
  // of a scheduler.
  virtual bool leader() const { return true; }
  // Runs what node 0 asks of this node's ranks until node 0 ends the group.
  virtual void follow();
};

// Where the ranks of a group are: `size` ranks in all, over `nnodes` processes (hosts), each
// with size / nnodes ranks on its GPUs 0.. ; node 0 listens on `address` (host:port) for the
// others and runs the scheduler.
struct Placement {
  int size = 1;
  int nnodes = 1, node_rank = 0;
  std::string address;
};

// One model on the caller's device (the caller keeps the context and the model alive).
class SingleDeviceRunner final : public ModelRunner {
 public:
  SingleDeviceRunner(Context& ctx, model::Model& model) : ctx_(ctx), model_(model) {}
  // Owning the model.
  SingleDeviceRunner(Context& ctx, std::unique_ptr<model::Model> model) : ctx_(ctx), owned_(std::move(model)), model_(*owned_) {}
  const model::ModelConfig& config() const override { return model_.config(); }
  DType dtype() const override { return model_.dtype(); }
  int ranks() const override { return 1; }
  size_t weight_bytes() const override { return model_.weight_bytes(); }
  size_t routed_expert_bytes() const override { return model_.routed_expert_bytes(); }
  Context& context() override { return ctx_; }
  int64_t blocks_that_fit(double fraction, int block_size, ops::KvCacheFormat format) override;
  void allocate_cache(int64_t blocks, int block_size, ops::KvCacheFormat format) override;
  int64_t cache_blocks() const override { return cache_ ? cache_->num_blocks() : 0; }
  Tensor forward(const std::vector<model::SequenceChunk>& batch) override;
  void set_deterministic(bool on) override { ctx_.set_deterministic(on); }

 private:
  Context& ctx_;
  std::unique_ptr<model::Model> owned_;
  model::Model& model_;
  std::unique_ptr<model::KvCache> cache_;
};

// KV blocks that fit in `fraction` of ctx's free memory for `model`'s shard.
int64_t kv_blocks_that_fit(Context& ctx, const model::Model& model, double fraction, int block_size,
                           ops::KvCacheFormat format = ops::KvCacheFormat::model);

// A tensor-parallel group: this process's ranks are threads, local rank i on device i (every
// rank on the one emulated device of the host target), talking through NCCL / RCCL on GPUs
// and the in-process group on the host. Over several nodes, node 0 sends each step to the
// others through the rendezvous channel and gathers their status. A rank that fails stops the
// group (the others' pending collectives are aborted) and the error names the rank; the group
// then refuses further work.
class TensorParallelRunner final : public ModelRunner {
 public:
  // Builds rank r's model shard, on rank r's thread and context.
  using BuildShard = std::function<std::unique_ptr<model::Model>(Context& ctx, const model::Shard& shard)>;
  TensorParallelRunner(int size, const BuildShard& build) : TensorParallelRunner(Placement{size}, build) {}
  TensorParallelRunner(const Placement& placement, const BuildShard& build);
  ~TensorParallelRunner() override;

  const model::ModelConfig& config() const override;
  DType dtype() const override;
  int ranks() const override;
  size_t weight_bytes() const override;
  size_t routed_expert_bytes() const override;
  Context& context() override;
  int64_t blocks_that_fit(double fraction, int block_size, ops::KvCacheFormat format) override;
  void allocate_cache(int64_t blocks, int block_size, ops::KvCacheFormat format) override;
  int64_t cache_blocks() const override;
  Tensor forward(const std::vector<model::SequenceChunk>& batch) override;
  void set_deterministic(bool on) override;
  bool leader() const override;
  void follow() override;

 private:
  struct Rank;
  struct Group;
  // Runs job on every local rank's thread and waits for all; the first failure is rethrown.
  void run(const std::function<void(Rank&)>& job);
  // Node 0: sends the encoded command to the other nodes, executes it here, and gathers
  // every node's reply (its own first); throws when any node failed.
  std::vector<std::string> command(const std::string& command);
  // What a command (parallel/command_codec.h) asks of this node's ranks: the one decoder
  // node 0 and the other nodes run. Returns this node's reply (a blocks_that_fit's count).
  std::string execute(const std::string& command);
  void stop();

  std::unique_ptr<Group> group_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// The runner of `placement.size` ranks: the model on ctx's device when it is 1, a
// TensorParallelRunner otherwise.
std::unique_ptr<ModelRunner> make_runner(Context& ctx, const Placement& placement,
                                         const TensorParallelRunner::BuildShard& build);
inline std::unique_ptr<ModelRunner> make_runner(Context& ctx, int tensor_parallel,
                                                const TensorParallelRunner::BuildShard& build) {
  return make_runner(ctx, Placement{tensor_parallel}, build);
}

}  // namespace lw::engine
