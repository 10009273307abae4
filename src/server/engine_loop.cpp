#include "server/engine_loop.h"

#include "core/logging.h"

namespace lw::server {

void OutputQueue::push(const engine::RequestOutput& o) {
  {
    std::lock_guard lock(mu_);
    q_.push_back(o);
  }
  cv_.notify_one();
}

bool OutputQueue::pop(engine::RequestOutput& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !q_.empty(); })) return false;
  out = std::move(q_.front());
  q_.pop_front();
  return true;
}

EngineLoop::EngineLoop(engine::Engine& engine, int64_t max_in_flight)
    : engine_(engine), max_in_flight_(max_in_flight) {
  stats_.kv_blocks = engine.blocks().total_blocks();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { shutdown(); }

int64_t EngineLoop::submit(engine::Request request, std::shared_ptr<OutputQueue> queue) {
  engine_.validate(request);
  std::lock_guard lock(mu_);
  if (stop_ || stats_.in_flight >= max_in_flight_) return -1;
  const int64_t handle = next_handle_++;
  adds_.push_back({handle, std::move(request), std::move(queue)});
  ++stats_.in_flight;
  ++stats_.requests;
  cv_.notify_one();
  return handle;
}

void EngineLoop::cancel(int64_t handle) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(handle);
  }
  cv_.notify_one();
}

void EngineLoop::shutdown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool EngineLoop::shutdown(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  stop_ = true;
  cv_.notify_one();
  if (!ended_cv_.wait_for(lock, timeout, [&] { return ended_; })) return false;
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  return true;
}

LoopStats EngineLoop::stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

void EngineLoop::run() {
  for (;;) {
    std::vector<Pending> adds;
    std::vector<int64_t> cancels;
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !adds_.empty() || !cancels_.empty() || !engine_.idle(); });
      adds.swap(adds_);
      cancels.swap(cancels_);
      stop = stop_;
    }
    for (Pending& p : adds) {
      const int64_t handle = p.handle;
      auto queue = p.queue;
      const int64_t id = engine_.add(std::move(p.request), [this, handle, queue](const engine::RequestOutput& o) {
        {
          std::lock_guard lock(mu_);
          stats_.generated_tokens += static_cast<int64_t>(o.tokens.size());
          if (o.finished) --stats_.in_flight;
        }
        if (o.finished) engine_ids_.erase(handle);
        engine::RequestOutput out = o;
        out.id = handle;  // clients know their requests by handle
        queue->push(out);
      });
      engine_ids_[handle] = id;
    }
    for (int64_t handle : cancels) {
      const auto it = engine_ids_.find(handle);
      if (it != engine_ids_.end()) engine_.cancel(it->second);
    }
    if (stop) {
      engine_.cancel_all();
      std::lock_guard lock(mu_);
      ended_ = true;
      ended_cv_.notify_all();
      return;
    }
    if (!engine_.idle()) {
      try {
        engine_.step();
      } catch (const std::exception& e) {
        // A failing step (out of device memory, a kernel error) ends its requests, not the server.
        log().error("engine step failed: {}; cancelling every request", e.what());
        engine_.cancel_all();
      }
    }
    std::lock_guard lock(mu_);
    stats_.running = engine_.running();
    stats_.waiting = engine_.waiting();
    stats_.kv_blocks_used = engine_.blocks().total_blocks() - engine_.blocks().available_blocks();
  }
}

}  // namespace lw::server
