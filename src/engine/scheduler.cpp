#include "engine/scheduler.h"

#include <algorithm>

#include "base/error.h"

namespace lw::engine {

namespace {

bool in_step(const ScheduledStep& step, const Sequence* s) {
  return std::any_of(step.chunks.begin(), step.chunks.end(), [&](const ScheduledChunk& c) { return c.seq == s; });
}

}  // namespace

Scheduler::Scheduler(BlockManager& blocks, const SchedulerLimits& limits) : blocks_(blocks), limits_(limits) {
  LW_CHECK(limits.max_batch_tokens > 0 && limits.max_sequences > 0,
           "scheduler: tokens per step " << limits.max_batch_tokens << " and sequences per step "
                                         << limits.max_sequences << " must be positive");
}

void Scheduler::remove(int64_t id) { waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end()); }

void Scheduler::preempt(Sequence& s, ScheduledStep& step) {
  blocks_.free(s.blocks);
  s.computed = 0;
  s.running = false;
  waiting_.push_front(s.id);
  ++step.preemptions;
}

bool Scheduler::schedule_decode(SequenceTable& sequences, Sequence& s, ScheduledStep& step) {
  while (!blocks_.can_append(s.blocks, s.computed + 1)) {
    Sequence* victim = nullptr;
    for (auto it = sequences.rbegin(); it != sequences.rend(); ++it)
      if (it->second->running && !in_step(step, it->second.get())) {
        victim = it->second.get();
        break;
      }
    if (!victim) {
      // Every other holder of blocks is in this step: s waits for them.
      if (s.running) preempt(s, step);
      return false;
    }
    preempt(*victim, step);
    if (victim == &s) return false;
  }
  LW_CHECK(blocks_.allocate(s.blocks, s.computed + 1), "scheduler: the block may-append promised did not come");
  return true;
}

ScheduledStep Scheduler::schedule(SequenceTable& sequences) {
  ScheduledStep step;
  int64_t budget = limits_.max_batch_tokens;
  const auto full = [&] { return static_cast<int64_t>(step.chunks.size()) >= limits_.max_sequences; };

  // Decode: one token for every running sequence that has generated, oldest first.
  for (auto& [id, sp] : sequences) {
    Sequence& s = *sp;
    if (!s.running || s.remaining() != 1 || budget <= 0 || full()) continue;
    if (!schedule_decode(sequences, s, step)) continue;
    step.chunks.push_back({&s, 1});
    budget -= 1;
  }

  // Prefill: chunks of partly computed prompts, then of waiting requests in arrival order,
  // within what is left of the token budget.
  for (auto& [id, sp] : sequences) {
    Sequence& s = *sp;
    if (!s.running || s.done || s.remaining() <= 1 || budget <= 0) continue;
    if (full()) break;
    const int64_t n = std::min(s.remaining(), budget);
    if (!blocks_.allocate(s.blocks, s.computed + n)) continue;
    step.chunks.push_back({&s, n});
    budget -= n;
  }
  while (!waiting_.empty() && budget > 0 && !full()) {
    Sequence& s = *sequences.at(waiting_.front());
    // At least the last token is computed: its logits are needed.
    s.computed = blocks_.reuse_prefix(s.blocks, std::span<const int32_t>(s.tokens).first(s.tokens.size() - 1));
    step.prefix_hit_tokens += s.computed;
    const int64_t n = std::min(s.remaining(), budget);
    if (!blocks_.allocate(s.blocks, s.computed + n)) {
      blocks_.free(s.blocks);
      s.computed = 0;
      break;  // waits for blocks to come free
    }
    waiting_.pop_front();
    s.running = true;
    step.chunks.push_back({&s, n});
    budget -= n;
  }

  if (step.chunks.empty() && !waiting_.empty() &&
      std::none_of(sequences.begin(), sequences.end(), [](const auto& e) { return e.second->running; }))
    step.outgrown = sequences.at(waiting_.front()).get();
  return step;
}

}  // namespace lw::engine
