#include "engine/step_timer.h"

namespace lw::engine {

namespace {
double ms_since(StepTimer::Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(StepTimer::Clock::now() - t).count();
}
}  // namespace

std::unique_ptr<Event> StepTimer::event() {
  if (spare_.empty()) return std::make_unique<Event>();
  std::unique_ptr<Event> e = std::move(spare_.back());
  spare_.pop_back();
  return e;
}

void StepTimer::begin_step() {
  current_ = Pending{};  // a step that threw leaves its events unread
  in_forward_ = false;
  step_start_ = phase_start_ = Clock::now();
}

void StepTimer::scheduled() {
  sums_.schedule_ms += ms_since(phase_start_);
  phase_start_ = Clock::now();
}

void StepTimer::begin_forward(int64_t decode_rows, int64_t prefill_tokens) {
  current_.decode_only = prefill_tokens == 0;
  if (current_.decode_only) {
    ++sums_.decode_steps;
    sums_.decode_rows += decode_rows;
  } else {
    ++sums_.prefill_steps;
  }
  sums_.prefill_tokens += prefill_tokens;
  current_.start = event();
  current_.start->record(ctx_.stream());
  in_forward_ = true;
  phase_start_ = Clock::now();
}

void StepTimer::end_forward() {
  current_.forward_end = event();
  current_.forward_end->record(ctx_.stream());
  sums_.forward_call_ms += ms_since(phase_start_);
  phase_start_ = Clock::now();
}

void StepTimer::end_sampling() {
  current_.sampled = event();
  current_.sampled->record(ctx_.stream());
  phase_start_ = Clock::now();
}

void StepTimer::end_step() {
  sums_.outputs_ms += ms_since(phase_start_);
  sums_.wall_ms += ms_since(step_start_);
  ++sums_.steps;
  if (!in_forward_) return;
  in_forward_ = false;
  const bool sampled = current_.sampled != nullptr;
  pending_.push_back(std::move(current_));
  current_ = Pending{};
  if (sampled) collect();  // the host has waited for this step's tokens, so for every event before them
}

void StepTimer::collect() {
  for (Pending& p : pending_) {
    Event& last = p.sampled ? *p.sampled : *p.forward_end;
    last.synchronize();
    const double forward = p.forward_end->elapsed_ms_since(*p.start);
    (p.decode_only ? sums_.decode_forward_ms : sums_.prefill_forward_ms) += forward;
    if (p.sampled) sums_.sampling_ms += p.sampled->elapsed_ms_since(*p.forward_end);
    for (std::unique_ptr<Event>* e : {&p.start, &p.forward_end, &p.sampled})
      if (*e) spare_.push_back(std::move(*e));
  }
  pending_.clear();
}

StepTimes StepTimer::totals() {
  collect();
  return sums_;
}

void StepTimer::reset() {
  collect();
  sums_ = StepTimes{};
}

}  // namespace lw::engine
