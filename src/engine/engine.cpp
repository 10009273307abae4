#include "engine/engine.h"

#include <algorithm>

#include "gpu/runtime.h"

namespace lw::engine {

Engine::Engine(Context& ctx, model::Model& model, const text::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
               const EngineOptions& options)
    : own_runner_(std::make_unique<SingleDeviceRunner>(ctx, model)),
      runner_(*own_runner_),
      outputs_(tokenizer, std::move(eos_ids)),
      options_(options) {
  init();
}

Engine::Engine(ModelRunner& runner, const text::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
               const EngineOptions& options)
    : runner_(runner), outputs_(tokenizer, std::move(eos_ids)), options_(options) {
  init();
}

void Engine::init() {
  const EngineOptions& options = options_;
  LW_CHECK(options.block_size > 0 && options.max_batch_tokens > 0 && options.max_sequences > 0,
           "engine: block size " << options.block_size << ", tokens per step " << options.max_batch_tokens
                                 << " and sequences per step " << options.max_sequences << " must be positive");
  runner_.set_deterministic(options.deterministic);
  const int64_t blocks =
      options.num_blocks > 0 ? options.num_blocks
                             : runner_.blocks_that_fit(options.memory_fraction, options.block_size, options.kv_cache_format);
  runner_.allocate_cache(blocks, options.block_size, options.kv_cache_format);
  blocks_ = std::make_unique<BlockManager>(blocks, options.block_size, options.prefix_caching);
  scheduler_ = std::make_unique<Scheduler>(*blocks_, SchedulerLimits{options.max_batch_tokens, options.max_sequences});
  if (options.time_steps) timer_ = std::make_unique<StepTimer>(runner_.context());
}

StepTimes Engine::step_times() {
  LW_CHECK(timer_, "engine: step times are kept only with EngineOptions::time_steps");
  return timer_->totals();
}

void Engine::reset_step_times() {
  LW_CHECK(timer_, "engine: step times are kept only with EngineOptions::time_steps");
  timer_->reset();
}

Engine::~Engine() = default;

void Engine::validate(const Request& request) const {
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  LW_CHECK(n > 0, "request: the prompt has no tokens");
  LW_CHECK(request.max_tokens >= 1, "request: max_tokens " << request.max_tokens << " must be at least 1");
  LW_CHECK(request.top_logprobs >= 0 && request.top_logprobs <= 20,
           "request: top_logprobs " << request.top_logprobs << " must be in 0..20");
  const int64_t context = runner_.config().max_position;
  LW_CHECK(n + request.max_tokens <= context, "request: " << n << " prompt tokens + " << request.max_tokens
                                                          << " new tokens exceed the model's context of " << context);
  const int64_t need = model::KvCache::blocks_for(n, options_.block_size);
  LW_CHECK(need <= blocks_->total_blocks(), "request: a prompt of " << n << " tokens needs " << need
                                                                    << " KV blocks; the whole cache has "
                                                                    << blocks_->total_blocks());
  for (int32_t t : request.prompt)
    LW_CHECK(t >= 0 && t < runner_.config().vocab, "request: prompt token " << t << " is outside the vocabulary of "
                                                                            << runner_.config().vocab);
  ops::check_sampling_options(request.sampling, runner_.config().vocab, "request");
  LW_CHECK(request.stop_strings.empty() || outputs_.tokenizer(), "request: stop strings need a tokenizer");
  for (const std::string& stop : request.stop_strings) LW_CHECK(!stop.empty(), "request: an empty stop string");
}

int64_t Engine::add(Request request, Callback on_output) {
  validate(request);
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->tokens = request.prompt;
  stats_.prompt_tokens += static_cast<int64_t>(request.prompt.size());
  s->req = std::move(request);
  s->callback = std::move(on_output);
  outputs_.start(*s);
  scheduler_->add(*s);
  const int64_t id = s->id;
  sequences_.emplace(id, std::move(s));
  return id;
}

void Engine::cancel(int64_t id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence& s = *it->second;
  outputs_.finish(s, "abort");
  blocks_->free(s.blocks);
  if (s.callback) s.callback(s.out);
  scheduler_->remove(id);
  sequences_.erase(it);
}

void Engine::cancel_all() {
  std::vector<int64_t> ids;
  for (const auto& e : sequences_) ids.push_back(e.first);
  for (int64_t id : ids) cancel(id);
}

int64_t Engine::running() const {
  int64_t n = 0;
  for (const auto& e : sequences_) n += e.second->running;
  return n;
}

bool Engine::step() {
  if (sequences_.empty()) return false;
  if (timer_) timer_->begin_step();
  const ScheduledStep step = scheduler_->schedule(sequences_);
  if (timer_) timer_->scheduled();
  stats_.preemptions += step.preemptions;
  stats_.prefix_hit_tokens += step.prefix_hit_tokens;
  if (step.outgrown) outputs_.finish(*step.outgrown, "length");
  if (!step.chunks.empty()) execute(step);
  deliver_and_retire();
  if (timer_) timer_->end_step();
  return true;
}

void Engine::execute(const ScheduledStep& step) {
  std::vector<model::SequenceChunk> chunks;
  std::vector<Sequence*> sampled;  // the sequences whose last token this step computes
  int64_t decode_rows = 0, other_tokens = 0;  // generated tokens alone; prompt chunks and recomputation
  for (const ScheduledChunk& c : step.chunks) {
    Sequence& s = *c.seq;
    const bool last = s.computed + c.tokens == static_cast<int64_t>(s.tokens.size());
    chunks.push_back({std::span<const int32_t>(s.tokens.data() + s.computed, static_cast<size_t>(c.tokens)), s.computed,
                      s.blocks.ids, last ? model::SequenceChunk::Logits::last : model::SequenceChunk::Logits::none});
    if (last) sampled.push_back(&s);
    const bool decode = c.tokens == 1 && last && s.computed >= static_cast<int64_t>(s.req.prompt.size());
    if (decode) ++decode_rows;
    else other_tokens += c.tokens;
  }
  if (timer_) timer_->begin_forward(decode_rows, other_tokens);
  const Tensor logits = runner_.forward(chunks);
  if (timer_) timer_->end_forward();
  ++stats_.steps;
  for (const ScheduledChunk& c : step.chunks) {
    Sequence& s = *c.seq;
    const auto prompt = static_cast<int64_t>(s.req.prompt.size());
    if (s.computed < prompt) stats_.computed_prompt_tokens += std::min<int64_t>(c.tokens, prompt - s.computed);
    s.computed += c.tokens;
    blocks_->publish_full(s.blocks, std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.computed)));
  }
  if (sampled.empty()) return;

  std::vector<ops::SamplingOptions> options;
  std::vector<std::vector<int32_t>> history;  // copied only where a penalty reads it
  int top = 0;
  bool penalties = false;
  for (Sequence* s : sampled) {
    ops::SamplingOptions o = s->req.sampling;
    o.step = static_cast<uint64_t>(s->generated);
    penalties = penalties || ops::uses_history(o);
    options.push_back(o);
    top = std::max(top, s->req.top_logprobs);
  }
  if (penalties)
    for (Sequence* s : sampled) history.push_back(s->tokens);
  const ops::SampleResult r = ops::sample(runner_.context(), logits, options, history, top);
  if (timer_) timer_->end_sampling();
  for (size_t i = 0; i < sampled.size(); ++i) {
    std::vector<std::pair<int32_t, float>> tl;
    for (int j = 0; j < sampled[i]->req.top_logprobs; ++j) tl.emplace_back(r.top_ids[i][j], r.top_logprobs[i][j]);
    outputs_.append(*sampled[i], r.tokens[i], r.logprobs[i], std::move(tl));
    ++stats_.generated_tokens;
  }
}

void Engine::deliver_and_retire() {
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    Sequence& s = *it->second;
    if (s.callback && (s.done || !s.out.tokens.empty() || !s.out.text.empty())) s.callback(s.out);
    s.out = RequestOutput{};
    s.out.id = s.id;
    if (s.done) {
      blocks_->free(s.blocks);
      scheduler_->remove(s.id);
      it = sequences_.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::run() {
  while (step()) {
  }
}

}  // namespace lw::engine
