// Where an engine's steps spend their time, for benchmarks (EngineOptions::time_steps): device
// events around each step's forward pass and its sampling, host clocks around scheduling,
// the forward call itself (preparing the batch and queueing its kernels) and the outputs.
//
// A step's events are read once the host has waited for them anyway: at the end of the next
// step that samples (whose copy of the tokens to the host follows every earlier event on the
// stream), or in totals(). A step without sampling does not wait for its forward pass, and
// timing does not make it wait.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/context.h"
#include "core/stream.h"

namespace lw::engine {

// Sums over steps; milliseconds.
struct StepTimes {
  int64_t steps = 0;
  // Steps whose every chunk was one generated token (decode-only), and the others (with prompt
  // tokens: chunked prefill, or recomputation after preemption).
  int64_t decode_steps = 0, prefill_steps = 0;
  int64_t decode_rows = 0;     // sequences in the decode-only steps, summed (mean batch = rows / steps)
  int64_t prefill_tokens = 0;  // the other steps' tokens that were not one generated token each
  // The device's time from the start to the end of the forward pass (first to last queued
  // work: an idle device starts the window when the host reaches the step), by kind of step.
  double decode_forward_ms = 0, prefill_forward_ms = 0;
  // From the end of the forward pass to the sampled tokens on the host.
  double sampling_ms = 0;
  // Host: choosing the step's chunks, the forward call (batch preparation and queueing its
  // work; overlapped with the device where the device is slower), outputs and retirement.
  double schedule_ms = 0, forward_call_ms = 0, outputs_ms = 0;
  // Host wall time of the steps, first to last.
  double wall_ms = 0;
};

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StepTimer(Context& ctx) : ctx_(ctx) {}

  // The step's host phases, in order; a step ends with end_step (also without a forward pass).
  // begin_forward takes the step's single generated tokens (its rows where it is decode-only)
  // and its other tokens (prompt chunks, recomputation); none of the latter: decode-only.
  void begin_step();
  void scheduled();
  void begin_forward(int64_t decode_rows, int64_t prefill_tokens);
  void end_forward();
  void end_sampling();  // only where the step sampled
  void end_step();

  // Every completed step so far, waiting for the device where a step's events are pending.
  StepTimes totals();
  void reset();

 private:
  struct Pending {
    std::unique_ptr<Event> start, forward_end, sampled;  // sampled: null where the step did not sample
    bool decode_only = false;
  };
  void collect();
  std::unique_ptr<Event> event();

  Context& ctx_;
  StepTimes sums_;
  std::deque<Pending> pending_;
  std::vector<std::unique_ptr<Event>> spare_;
  Pending current_;
  bool in_forward_ = false;
  Clock::time_point step_start_, phase_start_;
};

}  // namespace lw::engine
