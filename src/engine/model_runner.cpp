#include "engine/model_runner.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/logging.h"
#include "dist/communicator.h"
#include "dist/local_group.h"
#include "dist/nccl_communicator.h"
#include "gpu/runtime.h"

namespace lw::engine {

int64_t kv_blocks_that_fit(Context& ctx, const model::Model& model, double fraction, int block_size) {
  LW_CHECK(fraction > 0 && fraction <= 1, "engine: memory fraction " << fraction << " must be in (0, 1]");
  LW_CHECK(block_size > 0, "engine: block size " << block_size << " must be positive");
  LW_CUDA_CHECK(cudaSetDevice(ctx.device()));
  size_t free_bytes = 0, total_bytes = 0;
  LW_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t per_block = model::KvCache::block_bytes(model.shard_config(), model.dtype(), block_size);
  const auto blocks = static_cast<int64_t>(static_cast<double>(free_bytes) * fraction / static_cast<double>(per_block));
  LW_CHECK(blocks > 0, "engine: no memory left on device " << ctx.device() << " for the KV cache ("
                                                           << free_bytes / (1 << 20) << " MiB free, " << per_block
                                                           << " bytes per block)");
  return blocks;
}

int64_t SingleDeviceRunner::blocks_that_fit(double fraction, int block_size) {
  return kv_blocks_that_fit(ctx_, model_, fraction, block_size);
}

void SingleDeviceRunner::allocate_cache(int64_t blocks, int block_size) {
  cache_.reset();
  cache_ = std::make_unique<model::KvCache>(ctx_, model_.shard_config(), model_.dtype(), blocks, block_size);
}

Tensor SingleDeviceRunner::forward(const std::vector<model::SequenceChunk>& batch) {
  LW_CHECK(cache_, "forward before the KV cache was allocated");
  return model_.forward(ctx_, *cache_, batch);
}

// ---- the tensor-parallel group ----

struct TensorParallelRunner::Rank {
  int index = 0, device = 0;
  std::thread thread;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<dist::Communicator> comm;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::KvCache> cache;
  Tensor logits;   // rank 0's result of the last forward
  int64_t fit = 0; // the result of the last blocks_that_fit
};

struct TensorParallelRunner::Group {
  int size = 0;
  std::optional<dist::LocalGroup> local;  // the host target's communicators
  dist::GroupId nccl_id;                  // the GPUs'
  std::mutex mu;
  std::condition_variable cv;
  const std::function<void(Rank&)>* job = nullptr;
  uint64_t generation = 0;
  int pending = 0;
  bool stopping = false;
  std::string failure;  // the first rank's error of the current job
  std::string broken;   // set once a job failed: the group refuses further work
};

TensorParallelRunner::TensorParallelRunner(int size, const BuildShard& build) : group_(std::make_unique<Group>()) {
  LW_CHECK(size >= 2, "tensor parallelism needs at least 2 ranks, not " << size);
  Group& g = *group_;
  g.size = size;
  const int devices = gpu::device_count();
#if defined(LW_TARGET_HOST)
  g.local.emplace(size);
#else
  LW_CHECK(devices >= size, "tensor parallelism over " << size << " ranks needs " << size << " GPUs; this machine has "
                                                        << devices);
  LW_CHECK(dist::nccl_available(), "tensor parallelism on GPUs needs NCCL / RCCL, and this build has neither");
  g.nccl_id = dist::nccl_group_id();
#endif
  for (int r = 0; r < size; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    rank->device = devices >= size ? r : 0;
    ranks_.push_back(std::move(rank));
  }
  for (auto& rank : ranks_) {
    Rank* me = rank.get();
    me->thread = std::thread([this, me] {
      Group& grp = *group_;
      uint64_t seen = 0;
      for (;;) {
        const std::function<void(Rank&)>* job = nullptr;
        {
          std::unique_lock<std::mutex> lock(grp.mu);
          grp.cv.wait(lock, [&] { return grp.stopping || grp.generation != seen; });
          if (grp.stopping) break;
          seen = grp.generation;
          job = grp.job;
        }
        std::string error;
        try {
          if (me->ctx) LW_CUDA_CHECK(cudaSetDevice(me->device));
          (*job)(*me);
        } catch (const std::exception& e) {
          error = e.what();
        }
        std::lock_guard<std::mutex> lock(grp.mu);
        if (!error.empty() && grp.failure.empty()) grp.failure = "rank " + std::to_string(me->index) + ": " + error;
        --grp.pending;
        grp.cv.notify_all();
      }
      // Torn down on the rank's own thread and device, newest first.
      me->logits = Tensor();
      me->cache.reset();
      me->model.reset();
      me->comm.reset();
      me->ctx.reset();
    });
  }
  try {
    run([&](Rank& r) {
      r.ctx = std::make_unique<Context>(r.device);
      r.comm = group_->local ? group_->local->communicator(r.index)
                             : dist::nccl_communicator(*r.ctx, group_->nccl_id, r.index, size);
      r.model = build(*r.ctx, model::Shard{r.index, size, r.comm.get()});
    });
  } catch (...) {
    stop();
    throw;
  }
  log().info("tensor parallelism: {} ranks on devices 0..{}, {} MiB of weights each", size,
             ranks_.back()->device, ranks_[0]->model->weight_bytes() >> 20);
}

TensorParallelRunner::~TensorParallelRunner() { stop(); }

void TensorParallelRunner::stop() {
  {
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->stopping = true;
  }
  group_->cv.notify_all();
  for (auto& r : ranks_)
    if (r->thread.joinable()) r->thread.join();
}

void TensorParallelRunner::run(const std::function<void(Rank&)>& job) {
  Group& g = *group_;
  std::unique_lock<std::mutex> lock(g.mu);
  LW_CHECK(g.broken.empty(), "the tensor-parallel group stopped after an error: " << g.broken);
  g.job = &job;
  g.failure.clear();
  g.pending = g.size;
  ++g.generation;
  g.cv.notify_all();
  bool aborted = false;
  for (;;) {
    g.cv.wait(lock, [&] { return g.pending == 0 || (!g.failure.empty() && !aborted); });
    if (!g.failure.empty() && !aborted) {
      // The other ranks may wait in a collective for the failed one: stop their communicators.
      aborted = true;
      const std::string why = g.failure;
      lock.unlock();
      for (auto& r : ranks_)
        if (r->comm) r->comm->abort(why);
      lock.lock();
      continue;
    }
    if (g.pending == 0) break;
  }
  g.job = nullptr;
  if (!g.failure.empty()) {
    g.broken = g.failure;
    LW_FAIL("tensor-parallel " << g.failure);
  }
}

const model::ModelConfig& TensorParallelRunner::config() const { return ranks_[0]->model->config(); }
DType TensorParallelRunner::dtype() const { return ranks_[0]->model->dtype(); }
int TensorParallelRunner::ranks() const { return group_->size; }
Context& TensorParallelRunner::context() { return *ranks_[0]->ctx; }
model::Model& TensorParallelRunner::shard(int r) { return *ranks_.at(static_cast<size_t>(r))->model; }

size_t TensorParallelRunner::weight_bytes() const {
  size_t total = 0;
  for (const auto& r : ranks_) total += r->model->weight_bytes();
  return total;
}

int64_t TensorParallelRunner::blocks_that_fit(double fraction, int block_size) {
  // Ranks sharing a device (the host target) share its memory.
  run([&](Rank& r) { r.fit = kv_blocks_that_fit(*r.ctx, *r.model, fraction, block_size); });
  int64_t fit = ranks_[0]->fit;
  for (const auto& r : ranks_) fit = std::min(fit, r->fit);
  if (ranks_.back()->device == ranks_[0]->device) fit /= group_->size;
  LW_CHECK(fit > 0, "engine: no memory left for the KV cache on the tensor-parallel ranks");
  return fit;
}

void TensorParallelRunner::allocate_cache(int64_t blocks, int block_size) {
  run([&](Rank& r) {
    r.cache.reset();
    r.cache = std::make_unique<model::KvCache>(*r.ctx, r.model->shard_config(), r.model->dtype(), blocks, block_size);
  });
}

int64_t TensorParallelRunner::cache_blocks() const { return ranks_[0]->cache ? ranks_[0]->cache->num_blocks() : 0; }

Tensor TensorParallelRunner::forward(const std::vector<model::SequenceChunk>& batch) {
  run([&](Rank& r) {
    LW_CHECK(r.cache, "forward before the KV cache was allocated");
    Tensor logits = r.model->forward(*r.ctx, *r.cache, batch);
    r.comm->synchronize(*r.ctx);
    if (r.index == 0) r.logits = logits;
  });
  Tensor logits = ranks_[0]->logits;
  ranks_[0]->logits = Tensor();
  LW_CUDA_CHECK(cudaSetDevice(ranks_[0]->device));
  return logits;
}

std::unique_ptr<ModelRunner> make_runner(Context& ctx, int tensor_parallel, const TensorParallelRunner::BuildShard& build) {
  LW_CHECK(tensor_parallel >= 1, "tensor parallel size " << tensor_parallel << " must be at least 1");
  if (tensor_parallel == 1) return std::make_unique<SingleDeviceRunner>(ctx, build(ctx, model::Shard{}));
  return std::make_unique<TensorParallelRunner>(tensor_parallel, build);
}

}  // namespace lw::engine
