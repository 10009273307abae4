#include "engine/model_runner.h"

#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/logging.h"
#include "parallel/command_codec.h"
#include "parallel/communicator.h"
#include "parallel/local_group.h"
#include "parallel/nccl_communicator.h"
#include "parallel/rendezvous.h"
#include "gpu/runtime.h"

namespace lw::engine {

int64_t kv_blocks_that_fit(Context& ctx, const model::Model& model, double fraction, int block_size,
                           ops::KvCacheFormat format) {
  LW_CHECK(fraction > 0 && fraction <= 1, "engine: memory fraction " << fraction << " must be in (0, 1]");
  LW_CHECK(block_size > 0, "engine: block size " << block_size << " must be positive");
  LW_CUDA_CHECK(cudaSetDevice(ctx.device()));
  size_t free_bytes = 0, total_bytes = 0;
  LW_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t per_block = model::KvCache::block_bytes(model.shard_config(), model.dtype(), block_size, format);
  // The expansion of the largest quantised projection stays free for the forward passes, and
  // what the decode graphs may hold (their private pool).
  const size_t reserve = model.expansion_bytes() + model.graph_bytes();
  const size_t usable = free_bytes > reserve ? free_bytes - reserve : 0;
  const auto blocks = static_cast<int64_t>(static_cast<double>(usable) * fraction / static_cast<double>(per_block));
  LW_CHECK(blocks > 0, "engine: no memory left on device " << ctx.device() << " for the KV cache ("
                                                           << free_bytes / (1 << 20) << " MiB free, "
                                                           << reserve / (1 << 20)
                                                           << " MiB of it kept for expanding quantised weights and "
                                                              "for decode graphs, "
                                                           << per_block << " bytes per block)");
  return blocks;
}

int64_t SingleDeviceRunner::blocks_that_fit(double fraction, int block_size, ops::KvCacheFormat format) {
  return kv_blocks_that_fit(ctx_, model_, fraction, block_size, format);
}

void SingleDeviceRunner::allocate_cache(int64_t blocks, int block_size, ops::KvCacheFormat format) {
  cache_.reset();
  cache_ = std::make_unique<model::KvCache>(ctx_, model_.shard_config(), model_.dtype(), blocks, block_size, format,
                                            model_.kv_head_scales());
}

Tensor SingleDeviceRunner::forward(const std::vector<model::SequenceChunk>& batch) {
  LW_CHECK(cache_, "forward before the KV cache was allocated");
  return model_.forward(ctx_, *cache_, batch);
}

void ModelRunner::follow() { LW_FAIL("only a node other than node 0 of a multi-node group follows node 0"); }

// ---- the tensor-parallel group ----

namespace {

using parallel::command::kAllocate;
using parallel::command::kDeterministic;
using parallel::command::kFit;
using parallel::command::kForward;
using parallel::command::kQuit;

// A forward command: the batch's chunks, each its tokens, start, blocks and logits choice.
std::string encode_batch(const std::vector<model::SequenceChunk>& batch) {
  parallel::CommandWriter w(kForward);
  w.put(static_cast<uint64_t>(batch.size()));
  for (const model::SequenceChunk& c : batch)
    w.put_ids(c.tokens).put(c.start).put_ids(c.blocks).put(static_cast<uint8_t>(c.logits));
  return w.str();
}

// The chunks of a forward command; they point into `tokens` and `blocks`.
struct DecodedBatch {
  std::vector<std::vector<int32_t>> tokens, blocks;
  std::vector<model::SequenceChunk> chunks;
};

void decode_batch(parallel::CommandReader& in, DecodedBatch& out) {
  const auto n = in.get<uint64_t>();
  out.tokens.resize(n);
  out.blocks.resize(n);
  out.chunks.resize(n);
  for (size_t i = 0; i < n; ++i) {
    out.tokens[i] = in.get_ids();
    out.chunks[i].start = in.get<int64_t>();
    out.blocks[i] = in.get_ids();
    out.chunks[i].logits = static_cast<model::SequenceChunk::Logits>(in.get<uint8_t>());
    out.chunks[i].tokens = out.tokens[i];
    out.chunks[i].blocks = out.blocks[i];
  }
}

}  // namespace

struct TensorParallelRunner::Rank {
  int index = 0;  // the rank in the whole group
  int device = 0;
  std::thread thread;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<parallel::Communicator> comm;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::KvCache> cache;
  Tensor logits;   // rank 0's result of the last forward
  int64_t fit = 0; // the result of the last blocks_that_fit
};

struct TensorParallelRunner::Group {
  Placement placement;
  int local = 0;  // ranks in this process
  std::optional<parallel::LocalGroup> local_group;  // the host target's communicators
  std::unique_ptr<parallel::Rendezvous> rendezvous; // more than one node
  parallel::GroupId nccl_id;                        // the GPUs'
  std::mutex mu;
  std::condition_variable cv;
  const std::function<void(Rank&)>* job = nullptr;
  uint64_t generation = 0;
  int pending = 0;
  bool stopping = false;
  std::string failure;  // the first rank's error of the current job
  std::string broken;   // set once a job failed: the group refuses further work
};

TensorParallelRunner::TensorParallelRunner(const Placement& placement, const BuildShard& build)
    : group_(std::make_unique<Group>()) {
  const int size = placement.size, nnodes = placement.nnodes;
  LW_CHECK(size >= 2, "tensor parallelism needs at least 2 ranks, not " << size);
  LW_CHECK(nnodes >= 1 && size % nnodes == 0 && placement.node_rank >= 0 && placement.node_rank < nnodes,
           "tensor parallelism over " << size << " ranks on " << nnodes << " nodes (this is node " << placement.node_rank
                                      << "): the ranks must divide evenly among the nodes");
  Group& g = *group_;
  g.placement = placement;
  g.local = size / nnodes;
  const int devices = gpu::device_count();
  if (gpu::kEmulator) {
    LW_CHECK(nnodes == 1, "a group over several nodes needs NCCL / RCCL: the host target runs every rank in one process");
    g.local_group.emplace(size);
  } else {
    LW_CHECK(devices >= g.local, "tensor parallelism over " << g.local << " ranks on this node needs " << g.local
                                                            << " GPUs; it has " << devices);
    LW_CHECK(parallel::nccl_available(), "tensor parallelism on GPUs needs NCCL / RCCL, and this build has neither");
    if (nnodes > 1) {
      g.rendezvous = std::make_unique<parallel::Rendezvous>(placement.address, nnodes, placement.node_rank);
      std::string id;
      if (placement.node_rank == 0) {
        g.nccl_id = parallel::nccl_group_id();
        id.assign(g.nccl_id.bytes.data(), g.nccl_id.bytes.size());
      }
      g.rendezvous->broadcast(id);
      LW_CHECK(id.size() == g.nccl_id.bytes.size(), "rendezvous: node 0 sent a group id of " << id.size() << " bytes");
      std::memcpy(g.nccl_id.bytes.data(), id.data(), id.size());
    } else {
      g.nccl_id = parallel::nccl_group_id();
    }
  }
  for (int i = 0; i < g.local; ++i) {
    auto rank = std::make_unique<Rank>();
    rank->index = placement.node_rank * g.local + i;
    rank->device = devices >= g.local ? i : 0;
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
      auto comm = group_->local_group ? group_->local_group->communicator(r.index)
                                      : parallel::nccl_communicator(*r.ctx, group_->nccl_id, r.index, size);
      {
        std::lock_guard<std::mutex> lock(group_->mu);  // run() reads it to abort the group
        r.comm = std::move(comm);
      }
      r.model = build(*r.ctx, model::Shard{r.index, size, r.comm.get()});
    });
  } catch (...) {
    stop();
    throw;
  }
  log().info("tensor parallelism: ranks {}..{} of {} on this node's devices 0..{}, {} MiB of weights each",
             ranks_[0]->index, ranks_.back()->index, size, ranks_.back()->device, ranks_[0]->model->weight_bytes() >> 20);
}

TensorParallelRunner::~TensorParallelRunner() {
  if (group_->rendezvous && leader() && group_->broken.empty()) {
    try {
      std::string quit = parallel::CommandWriter(kQuit).str();
      group_->rendezvous->broadcast(quit);
    } catch (const std::exception& e) {
      log().warn("ending the multi-node group: {}", e.what());
    }
  }
  stop();
}

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
  g.pending = g.local;
  ++g.generation;
  g.cv.notify_all();
  bool aborted = false;
  for (;;) {
    g.cv.wait(lock, [&] { return g.pending == 0 || (!g.failure.empty() && !aborted); });
    if (!g.failure.empty() && !aborted) {
      // The other ranks may wait in a collective for the failed one: stop their communicators.
      aborted = true;
      const std::string why = g.failure;
      std::vector<parallel::Communicator*> comms;  // set by the rank threads under g.mu
      for (auto& r : ranks_)
        if (r->comm) comms.push_back(r->comm.get());
      lock.unlock();
      for (parallel::Communicator* c : comms) c->abort(why);
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

std::vector<std::string> TensorParallelRunner::command(const std::string& cmd) {
  Group& g = *group_;
  LW_CHECK(leader(), "node " << g.placement.node_rank << " follows node 0 and takes no commands of its own");
  LW_CHECK(g.broken.empty(), "the tensor-parallel group stopped after an error: " << g.broken);
  if (!g.rendezvous) return {execute(cmd)};
  std::string message = cmd;
  g.rendezvous->broadcast(message);
  std::vector<std::string> replies = g.rendezvous->gather(execute(cmd));
  for (size_t n = 1; n < replies.size(); ++n)
    if (parallel::is_error_reply(replies[n])) {
      g.broken = "node " + std::to_string(n) + ": " + replies[n].substr(parallel::kErrorReply.size());
      LW_FAIL("tensor-parallel " << g.broken);
    }
  return replies;
}

const model::ModelConfig& TensorParallelRunner::config() const { return ranks_[0]->model->config(); }
DType TensorParallelRunner::dtype() const { return ranks_[0]->model->dtype(); }
int TensorParallelRunner::ranks() const { return group_->placement.size; }
Context& TensorParallelRunner::context() { return *ranks_[0]->ctx; }
bool TensorParallelRunner::leader() const { return group_->placement.node_rank == 0; }

size_t TensorParallelRunner::weight_bytes() const {
  size_t local = 0;
  for (const auto& r : ranks_) local += r->model->weight_bytes();
  return local * static_cast<size_t>(group_->placement.nnodes);  // the other nodes hold as much
}

size_t TensorParallelRunner::routed_expert_bytes() const {
  size_t local = 0;
  for (const auto& r : ranks_) local += r->model->routed_expert_bytes();
  return local * static_cast<size_t>(group_->placement.nnodes);
}

namespace {

// Ranks sharing a device (the host target) share its memory.
int64_t fit_of(const std::vector<int64_t>& fits, bool shared_device, int ranks) {
  int64_t fit = fits.at(0);
  for (int64_t f : fits) fit = std::min(fit, f);
  return shared_device ? fit / ranks : fit;
}

}  // namespace

int64_t TensorParallelRunner::blocks_that_fit(double fraction, int block_size, ops::KvCacheFormat format) {
  const std::vector<std::string> replies = command(
      parallel::CommandWriter(kFit).put(fraction).put(block_size).put(static_cast<uint8_t>(format)).str());
  int64_t fit = std::stoll(replies.at(0));
  for (size_t n = 1; n < replies.size(); ++n) fit = std::min<int64_t>(fit, std::stoll(replies[n]));
  LW_CHECK(fit > 0, "engine: no memory left for the KV cache on the tensor-parallel ranks");
  return fit;
}

void TensorParallelRunner::allocate_cache(int64_t blocks, int block_size, ops::KvCacheFormat format) {
  command(parallel::CommandWriter(kAllocate).put(blocks).put(block_size).put(static_cast<uint8_t>(format)).str());
}

void TensorParallelRunner::set_deterministic(bool on) {
  command(parallel::CommandWriter(kDeterministic).put(static_cast<uint8_t>(on)).str());
}

int64_t TensorParallelRunner::cache_blocks() const { return ranks_[0]->cache ? ranks_[0]->cache->num_blocks() : 0; }

Tensor TensorParallelRunner::forward(const std::vector<model::SequenceChunk>& batch) {
  command(encode_batch(batch));
  Tensor logits = ranks_[0]->logits;
  ranks_[0]->logits = Tensor();
  LW_CUDA_CHECK(cudaSetDevice(ranks_[0]->device));
  return logits;
}

std::string TensorParallelRunner::execute(const std::string& cmd) {
  parallel::CommandReader in(cmd);
  switch (in.op()) {
    case kFit: {
      const auto fraction = in.get<double>();
      const auto block_size = in.get<int>();
      const auto format = ops::kv_cache_format_from_code(in.get<uint8_t>());
      run([&](Rank& r) { r.fit = kv_blocks_that_fit(*r.ctx, *r.model, fraction, block_size, format); });
      std::vector<int64_t> fits;
      for (const auto& r : ranks_) fits.push_back(r->fit);
      return std::to_string(fit_of(fits, ranks_.back()->device == ranks_[0]->device, group_->local));
    }
    case kAllocate: {
      const auto blocks = in.get<int64_t>();
      const auto block_size = in.get<int>();
      const auto format = ops::kv_cache_format_from_code(in.get<uint8_t>());
      run([&](Rank& r) {
        r.cache.reset();
        r.cache = std::make_unique<model::KvCache>(*r.ctx, r.model->shard_config(), r.model->dtype(), blocks, block_size,
                                                   format, r.model->kv_head_scales());
      });
      return "";
    }
    case kDeterministic: {
      const bool on = in.get<uint8_t>() != 0;
      run([&](Rank& r) { r.ctx->set_deterministic(on); });
      return "";
    }
    case kForward: {
      DecodedBatch batch;
      decode_batch(in, batch);
      run([&](Rank& r) {
        LW_CHECK(r.cache, "forward before the KV cache was allocated");
        Tensor logits = r.model->forward(*r.ctx, *r.cache, batch.chunks);
        r.comm->synchronize(*r.ctx);
        if (r.index == 0) r.logits = logits;  // node 0's first rank: the engine samples there
      });
      return "";
    }
    default: LW_FAIL("a node got an unknown command '" << in.op() << "'");
  }
}

void TensorParallelRunner::follow() {
  Group& g = *group_;
  LW_CHECK(g.rendezvous && !leader(), "only a node other than node 0 of a multi-node group follows node 0");
  log().info("node {} of {}: following node 0", g.placement.node_rank, g.placement.nnodes);
  for (;;) {
    std::string cmd;
    g.rendezvous->broadcast(cmd);
    if (!cmd.empty() && cmd[0] == kQuit) return;
    std::string reply;
    try {
      reply = execute(cmd);
    } catch (const std::exception& e) {
      g.rendezvous->gather(std::string(parallel::kErrorReply) + e.what());
      throw;
    }
    g.rendezvous->gather(reply);
  }
}

std::unique_ptr<ModelRunner> make_runner(Context& ctx, const Placement& placement,
                                         const TensorParallelRunner::BuildShard& build) {
  LW_CHECK(placement.size >= 1, "tensor parallel size " << placement.size << " must be at least 1");
  LW_CHECK(placement.size > 1 || placement.nnodes == 1, "one rank cannot span " << placement.nnodes << " nodes");
  if (placement.size == 1) return std::make_unique<SingleDeviceRunner>(ctx, build(ctx, model::Shard{}));
  return std::make_unique<TensorParallelRunner>(placement, build);
}

}  // namespace lw::engine
