// The serving engine: many requests at once over one model. Each step batches every running
// sequence's next token with chunks of waiting prompts (chunked prefill, under a token
// budget), samples each sequence with its own parameters, streams what it produced, and
// retires finished and cancelled requests. KV blocks come from a BlockManager with prefix
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
  // Batch-invariant execution (Context::deterministic): a request's logits, hence its greedy and
  // seeded tokens, do not depend on the other requests of a step, prefix-cache hits or chunking.
  bool deterministic = false;
};

struct Request {
  std::vector<int32_t> prompt;
  int max_tokens = 128;
  ops::SamplingOptions sampling;
  std::vector<int32_t> stop_token_ids;  // besides the model's end-of-sequence ids
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  int top_logprobs = 0;  // 0..20 most likely tokens per position, with their log-probabilities
};

// What one step produced for one request.
struct RequestOutput {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // new tokens
  std::vector<float> logprobs;  // of each new token
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  std::string text;             // new text (whole UTF-8 characters, stop strings held back)
  bool finished = false;
  std::string finish_reason;  // "stop", "length" or "abort"
};

struct EngineStats {
  int64_t steps = 0, prompt_tokens = 0, computed_prompt_tokens = 0, generated_tokens = 0;
  int64_t prefix_hit_tokens = 0, preemptions = 0;
};

class Engine {
 public:
  using Callback = std::function<void(const RequestOutput&)>;

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
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  // One scheduling step; false when there was nothing to do.
  bool step();
  // Steps until every request has finished.
  void run();
  bool idle() const { return sequences_.empty(); }

  const EngineStats& stats() const { return stats_; }
  const BlockManager& blocks() const { return *blocks_; }
  int64_t num_blocks() const { return runner_.cache_blocks(); }

 private:
  struct Sequence;
  void init();
  bool schedule_decode(Sequence& s, std::vector<Sequence*>& batch, int64_t& budget);
  bool grow(Sequence& s, int64_t tokens);
  void reuse_prefix(Sequence& s);
  void preempt(Sequence& s);
  void publish_full_blocks(Sequence& s);
  void append_token(Sequence& s, int32_t token, float logprob, std::vector<std::pair<int32_t, float>> top);
  // flush: send the text held back for stop strings (not when a stop string ended it).
  void finish(Sequence& s, const std::string& reason, bool flush = true);

  std::unique_ptr<ModelRunner> own_runner_;  // the runner of the (ctx, model) constructor
  ModelRunner& runner_;
  const text::Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  EngineOptions options_;
  std::unique_ptr<BlockManager> blocks_;
  std::map<int64_t, std::unique_ptr<Sequence>> sequences_;  // by id: arrival order
  std::deque<int64_t> waiting_;
  int64_t next_id_ = 1;
  EngineStats stats_;
};

}  // namespace lw::engine
