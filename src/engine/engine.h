// The serving engine: many requests at once over one model. Each step the Scheduler batches
// every running sequence's next token with chunks of waiting prompts (chunked prefill, under a
// token budget), the runner computes the batch, each sequence is sampled with its own
// parameters, the OutputProcessor turns the tokens into outputs, and the engine streams them
// and retires finished and cancelled requests. KV blocks come from a BlockManager with prefix
// caching; when they run out, the youngest running sequences are preempted (their blocks
// freed, their tokens recomputed later) rather than failing.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/context.h"
#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_timer.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/sampling.h"
#include "text/stream_decoder.h"
#include "text/tokenizer.h"

namespace lw::engine {

struct EngineOptions {
  int block_size = 16;
  int64_t num_blocks = 0;         // 0: from the device memory left after the weights
  double memory_fraction = 0.90;  // of the free device memory the KV cache may take
  int64_t max_batch_tokens = 512; // tokens per step (decode tokens + prefill chunks)
  int64_t max_sequences = 256;    // running sequences per step
  bool prefix_caching = true;
  // How the KV cache stores keys and values (--kv-cache-dtype): the model's dtype, or 8-bit
  // codes with scales, which hold twice the tokens in the same memory (ops::KvCacheFormat).
  ops::KvCacheFormat kv_cache_format = ops::KvCacheFormat::model;
  // Batch-invariant execution (Context::deterministic): a request's logits, hence its greedy and
  // seeded tokens, do not depend on the other requests of a step, prefix-cache hits or chunking.
  bool deterministic = false;
  // Time each step's phases (StepTimer: device events around the forward pass and sampling,
  // host clocks around the rest), read by step_times(). For benchmarks; a few events a step.
  bool time_steps = false;
};

struct EngineStats {
  int64_t steps = 0, prompt_tokens = 0, computed_prompt_tokens = 0, generated_tokens = 0;
  int64_t prefix_hit_tokens = 0, preemptions = 0;
};

class Engine {
 public:
  using Callback = OutputCallback;

  // tokenizer may be null: then outputs carry no text and stop strings are refused.
  Engine(Context& ctx, model::Model& model, const text::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
         const EngineOptions& options = {});
  // Over a runner (a tensor-parallel group, say), which must outlive the engine; the engine
  // (re)allocates the runner's KV cache.
  Engine(ModelRunner& runner, const text::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
         const EngineOptions& options = {});
  ~Engine();

  // Queues a request; returns its id. A prompt that cannot fit in the whole KV cache, or bad
  // parameters, throw lw::Error.
  int64_t add(Request request, Callback on_output);
  // The checks of add() alone; reads only what never changes, so any thread may call it.
  void validate(const Request& request) const;
  // Ends a request at once (its callback gets finish_reason "abort") and frees its blocks.
  void cancel(int64_t id);
  void cancel_all();
  int64_t running() const;
  int64_t waiting() const { return scheduler_->waiting(); }
  // One scheduling step; false when there was nothing to do.
  bool step();
  // Steps until every request has finished.
  void run();
  bool idle() const { return sequences_.empty(); }

  const EngineStats& stats() const { return stats_; }
  // The steps' times since the engine began or reset_step_times(), waiting for the device where
  // the last steps' are pending; EngineOptions::time_steps must be on.
  StepTimes step_times();
  void reset_step_times();
  const BlockManager& blocks() const { return *blocks_; }
  int64_t num_blocks() const { return runner_.cache_blocks(); }

 private:
  void init();
  // Runs a scheduled batch: the forward pass, then sampling and outputs for the sequences
  // whose last chunk it was.
  void execute(const ScheduledStep& step);
  // Calls back every sequence with something to say and drops the finished ones.
  void deliver_and_retire();

  std::unique_ptr<ModelRunner> own_runner_;  // the runner of the (ctx, model) constructor
  ModelRunner& runner_;
  OutputProcessor outputs_;
  EngineOptions options_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  SequenceTable sequences_;  // by id: arrival order
  int64_t next_id_ = 1;
  EngineStats stats_;
  std::unique_ptr<StepTimer> timer_;  // with EngineOptions::time_steps
};

}  // namespace lw::engine
