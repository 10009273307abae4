#include "engine/engine.h"

#include <algorithm>

#include "gpu/runtime.h"

namespace lw::engine {

struct Engine::Sequence {
  int64_t id = 0;
  Request req;
  Callback callback;
  std::vector<int32_t> tokens;  // prompt, then generated
  int64_t computed = 0;         // leading tokens whose K/V are in the cache
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;  // chain hash of each leading full block, once published or reused
  int generated = 0;
  bool running = false;  // holds blocks: scheduled since it arrived or was last preempted
  bool done = false;
  std::optional<text::StreamDecoder> decoder;
  std::string pending;  // decoded text not yet sent: the tail a stop string may still start in
  size_t hold = 0;      // bytes held back: the longest stop string less one
  RequestOutput out;    // what this step produced

  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - computed; }
};

Engine::Engine(Context& ctx, model::Model& model, const text::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
               const EngineOptions& options)
    : own_runner_(std::make_unique<SingleDeviceRunner>(ctx, model)),
      runner_(*own_runner_),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)),
      options_(options) {
  init();
}

Engine::Engine(ModelRunner& runner, const text::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
               const EngineOptions& options)
    : runner_(runner), tokenizer_(tokenizer), eos_ids_(std::move(eos_ids)), options_(options) {
  init();
}

void Engine::init() {
  const EngineOptions& options = options_;
  LW_CHECK(options.block_size > 0 && options.max_batch_tokens > 0 && options.max_sequences > 0,
           "engine: block size " << options.block_size << ", tokens per step " << options.max_batch_tokens
                                 << " and sequences per step " << options.max_sequences << " must be positive");
  runner_.set_deterministic(options.deterministic);
  const int64_t blocks =
      options.num_blocks > 0 ? options.num_blocks : runner_.blocks_that_fit(options.memory_fraction, options.block_size);
  runner_.allocate_cache(blocks, options.block_size);
  blocks_ = std::make_unique<BlockManager>(blocks, options.block_size, options.prefix_caching);
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
  LW_CHECK(request.stop_strings.empty() || tokenizer_, "request: stop strings need a tokenizer");
  for (const std::string& stop : request.stop_strings) LW_CHECK(!stop.empty(), "request: an empty stop string");
}

int64_t Engine::add(Request request, Callback on_output) {
  validate(request);
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->tokens = request.prompt;
  for (const std::string& stop : request.stop_strings) s->hold = std::max(s->hold, stop.size() - 1);
  if (tokenizer_) s->decoder.emplace(*tokenizer_);
  s->req = std::move(request);
  s->callback = std::move(on_output);
  s->out.id = s->id;
  stats_.prompt_tokens += n;
  waiting_.push_back(s->id);
  const int64_t id = s->id;
  sequences_.emplace(id, std::move(s));
  return id;
}

void Engine::cancel(int64_t id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence& s = *it->second;
  finish(s, "abort");
  if (s.callback) s.callback(s.out);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
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

bool Engine::grow(Sequence& s, int64_t tokens) {
  const int64_t need = model::KvCache::blocks_for(tokens, options_.block_size);
  while (static_cast<int64_t>(s.blocks.size()) < need) {
    const int32_t b = blocks_->allocate();
    if (b < 0) return false;
    s.blocks.push_back(b);
  }
  return true;
}

void Engine::reuse_prefix(Sequence& s) {
  const int bs = options_.block_size;
  // At least the last token is computed: its logits are needed.
  const int64_t usable = (static_cast<int64_t>(s.tokens.size()) - 1) / bs;
  uint64_t parent = 0;
  for (int64_t i = 0; i < usable; ++i) {
    const std::span<const int32_t> content(s.tokens.data() + i * bs, static_cast<size_t>(bs));
    const uint64_t h = BlockManager::chain_hash(parent, content);
    const int32_t b = blocks_->lookup(h, content);
    if (b < 0) break;
    s.blocks.push_back(b);
    s.hashes.push_back(h);
    s.computed += bs;
    stats_.prefix_hit_tokens += bs;
    parent = h;
  }
}

void Engine::preempt(Sequence& s) {
  for (int32_t b : s.blocks) blocks_->release(b);
  s.blocks.clear();
  s.hashes.clear();
  s.computed = 0;
  s.running = false;
  waiting_.push_front(s.id);
  ++stats_.preemptions;
}

void Engine::publish_full_blocks(Sequence& s) {
  const int bs = options_.block_size;
  const int64_t full = s.computed / bs;
  for (int64_t i = static_cast<int64_t>(s.hashes.size()); i < full; ++i) {
    const std::span<const int32_t> content(s.tokens.data() + i * bs, static_cast<size_t>(bs));
    const uint64_t h = BlockManager::chain_hash(i ? s.hashes[static_cast<size_t>(i - 1)] : 0, content);
    blocks_->publish(s.blocks[static_cast<size_t>(i)], h, content);
    s.hashes.push_back(h);
  }
}

void Engine::finish(Sequence& s, const std::string& reason, bool flush) {
  if (s.done) return;
  if (flush) {
    // Nothing can complete a stop string any more: the held-back text goes out.
    if (s.decoder) s.pending += s.decoder->finish();
    s.out.text += s.pending;
    s.pending.clear();
  }
  for (int32_t b : s.blocks) blocks_->release(b);
  s.blocks.clear();
  s.done = true;
  s.out.finished = true;
  s.out.finish_reason = reason;
}

void Engine::append_token(Sequence& s, int32_t token, float logprob, std::vector<std::pair<int32_t, float>> top) {
  ++s.generated;
  ++stats_.generated_tokens;
  const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  const bool stop_id = std::find(s.req.stop_token_ids.begin(), s.req.stop_token_ids.end(), token) != s.req.stop_token_ids.end();
  if ((eos && !s.req.ignore_eos) || stop_id) {
    finish(s, "stop");
    return;
  }
  s.tokens.push_back(token);
  s.out.tokens.push_back(token);
  s.out.logprobs.push_back(logprob);
  if (s.req.top_logprobs > 0) s.out.top_logprobs.push_back(std::move(top));
  if (s.decoder && token < tokenizer_->vocab_size()) {
    s.pending += s.decoder->push(token);
    // The earliest stop string in the unsent text ends the request there.
    size_t cut = std::string::npos;
    for (const std::string& stop : s.req.stop_strings) cut = std::min(cut, s.pending.find(stop));
    if (cut != std::string::npos) {
      s.out.text += s.pending.substr(0, cut);
      s.pending.clear();
      finish(s, "stop", false);
      return;
    }
    // Send all but the tail a stop string could still start in, on a character boundary.
    size_t send = s.pending.size() > s.hold ? s.pending.size() - s.hold : 0;
    while (send > 0 && send < s.pending.size() && (static_cast<unsigned char>(s.pending[send]) & 0xC0) == 0x80) --send;
    s.out.text += s.pending.substr(0, send);
    s.pending.erase(0, send);
  }
  if (s.generated >= s.req.max_tokens) finish(s, "length");
}

bool Engine::step() {
  if (sequences_.empty()) return false;
  int64_t budget = options_.max_batch_tokens;
  std::vector<Sequence*> batch;
  std::vector<int64_t> lens;

  // Decode: one token for every running sequence that has generated, oldest first; when the
  // cache is full the youngest running sequence gives its blocks back.
  for (auto& [id, sp] : sequences_) {
    Sequence& s = *sp;
    if (!s.running || s.remaining() != 1 || budget <= 0 || static_cast<int64_t>(batch.size()) >= options_.max_sequences)
      continue;
    bool ok = grow(s, s.computed + 1);
    while (!ok) {
      Sequence* victim = nullptr;
      for (auto it = sequences_.rbegin(); it != sequences_.rend(); ++it)
        if (it->second->running && std::find(batch.begin(), batch.end(), it->second.get()) == batch.end()) {
          victim = it->second.get();
          break;
        }
      if (!victim) break;
      preempt(*victim);
      if (victim == &s) break;
      ok = grow(s, s.computed + 1);
    }
    if (!ok) {
      // Every other holder of blocks is in this step: s waits for them.
      if (s.running) preempt(s);
      continue;
    }
    batch.push_back(&s);
    lens.push_back(1);
    budget -= 1;
  }

  // Prefill: chunks of partly computed prompts, then of waiting requests in arrival order,
  // within what is left of the token budget.
  for (auto& [id, sp] : sequences_) {
    Sequence& s = *sp;
    if (!s.running || s.done || s.remaining() <= 1 || budget <= 0) continue;
    if (static_cast<int64_t>(batch.size()) >= options_.max_sequences) break;
    const int64_t n = std::min(s.remaining(), budget);
    if (!grow(s, s.computed + n)) continue;
    batch.push_back(&s);
    lens.push_back(n);
    budget -= n;
  }
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(batch.size()) < options_.max_sequences) {
    Sequence& s = *sequences_.at(waiting_.front());
    reuse_prefix(s);
    const int64_t n = std::min(s.remaining(), budget);
    if (!grow(s, s.computed + n)) {
      for (int32_t b : s.blocks) blocks_->release(b);
      s.blocks.clear();
      s.hashes.clear();
      s.computed = 0;
      break;  // waits for blocks to come free
    }
    waiting_.pop_front();
    s.running = true;
    batch.push_back(&s);
    lens.push_back(n);
    budget -= n;
  }

  if (batch.empty() && !waiting_.empty() &&
      std::none_of(sequences_.begin(), sequences_.end(), [](const auto& e) { return e.second->running; })) {
    // Nothing holds a block and the oldest waiting sequence still does not fit: its prompt
    // and generated tokens together outgrew the whole cache.
    finish(*sequences_.at(waiting_.front()), "length");
  }

  if (!batch.empty()) {
    std::vector<model::SequenceChunk> chunks;
    std::vector<Sequence*> sampled;
    for (size_t i = 0; i < batch.size(); ++i) {
      Sequence& s = *batch[i];
      const bool last = s.computed + lens[i] == static_cast<int64_t>(s.tokens.size());
      chunks.push_back({std::span<const int32_t>(s.tokens.data() + s.computed, static_cast<size_t>(lens[i])), s.computed,
                        s.blocks, last ? model::SequenceChunk::Logits::last : model::SequenceChunk::Logits::none});
      if (last) sampled.push_back(&s);
    }
    const Tensor logits = runner_.forward(chunks);
    ++stats_.steps;
    for (size_t i = 0; i < batch.size(); ++i) {
      Sequence& s = *batch[i];
      if (s.computed < static_cast<int64_t>(s.req.prompt.size()))
        stats_.computed_prompt_tokens += std::min<int64_t>(lens[i], static_cast<int64_t>(s.req.prompt.size()) - s.computed);
      s.computed += lens[i];
      publish_full_blocks(s);
    }
    if (!sampled.empty()) {
      std::vector<ops::SamplingOptions> options;
      std::vector<std::vector<int32_t>> history;
      int top = 0;
      for (Sequence* s : sampled) {
        ops::SamplingOptions o = s->req.sampling;
        o.step = static_cast<uint64_t>(s->generated);
        options.push_back(o);
        history.push_back(s->tokens);
        top = std::max(top, s->req.top_logprobs);
      }
      const ops::SampleResult r = ops::sample(runner_.context(), logits, options, history, top);
      for (size_t i = 0; i < sampled.size(); ++i) {
        std::vector<std::pair<int32_t, float>> tl;
        for (int j = 0; j < sampled[i]->req.top_logprobs; ++j) tl.emplace_back(r.top_ids[i][j], r.top_logprobs[i][j]);
        append_token(*sampled[i], r.tokens[i], r.logprobs[i], std::move(tl));
      }
    }
  }

  // Deliver and retire.
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    Sequence& s = *it->second;
    if (s.callback && (s.done || !s.out.tokens.empty() || !s.out.text.empty())) s.callback(s.out);
    s.out = RequestOutput{};
    s.out.id = s.id;
    if (s.done) {
      waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s.id), waiting_.end());
      it = sequences_.erase(it);
    } else {
      ++it;
    }
  }
  return true;
}

void Engine::run() {
  while (step()) {
  }
}

}  // namespace lw::engine
