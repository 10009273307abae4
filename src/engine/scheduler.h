// Which sequences run in a step and how many of their tokens: every running sequence's next
// token first (decode, oldest first), then chunks of partly computed prompts, then waiting
// sequences in arrival order (prefix-cache hits skip their computed tokens), all under a
// token budget and a sequence limit. When the KV blocks run out for a decode token, the
// youngest running sequence is preempted: its blocks freed, its tokens recomputed later.
// It decides and takes blocks; it does not run the model or touch outputs.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace lw::engine {

struct SchedulerLimits {
  int64_t max_batch_tokens = 512;  // tokens per step (decode tokens + prefill chunks)
  int64_t max_sequences = 256;     // sequences per step
};

// One sequence's part of a step: its next `tokens` tokens from seq->computed.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t tokens = 0;
};

struct ScheduledStep {
  std::vector<ScheduledChunk> chunks;  // decode tokens first, then prefill chunks
  // Nothing holds a block and the oldest waiting sequence still does not fit: its prompt and
  // generated tokens together outgrew the whole cache. The engine finishes it ("length").
  Sequence* outgrown = nullptr;
  int64_t preemptions = 0;        // sequences preempted for this step
  int64_t prefix_hit_tokens = 0;  // tokens of waiting sequences found in the prefix cache
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, const SchedulerLimits& limits);

  // A new sequence waits for its first step.
  void add(const Sequence& s) { waiting_.push_back(s.id); }
  // A finished or cancelled sequence leaves the queue (its blocks are the caller's to free).
  void remove(int64_t id);
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  const std::deque<int64_t>& waiting_ids() const { return waiting_; }

  // The next step's batch over `sequences` (every sequence the engine holds, the waiting ones
  // included). Scheduled sequences hold the blocks for their chunks; their `computed` is
  // advanced by the caller once the step ran.
  ScheduledStep schedule(SequenceTable& sequences);

 private:
  // Decode: s's next token, preempting the youngest running sequences outside `step` while
  // the blocks are short; false when s cannot run this step.
  bool schedule_decode(SequenceTable& sequences, Sequence& s, ScheduledStep& step);
  void preempt(Sequence& s, ScheduledStep& step);

  BlockManager& blocks_;
  SchedulerLimits limits_;
  std::deque<int64_t> waiting_;  // arrival order; preempted sequences go back to the front
};

}  // namespace lw::engine
