// The engine on its own thread, for many client threads: requests are submitted and
// cancelled from any thread (by handle), and each request's outputs arrive in its own queue.
// Only the loop thread touches the engine (validation reads what never changes).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace lw::server {

// The outputs of one or more requests (RequestOutput::id is the handle), in order, as the
// engine thread produces them.
class OutputQueue {
 public:
  void push(const engine::RequestOutput& o);
  // Waits up to `timeout` for the next output; false on timeout.
  bool pop(engine::RequestOutput& out, std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<engine::RequestOutput> q_;
};

struct LoopStats {
  int64_t running = 0, waiting = 0, kv_blocks = 0, kv_blocks_used = 0, generated_tokens = 0, requests = 0,
          in_flight = 0;
};

class EngineLoop {
 public:
  EngineLoop(engine::Engine& engine, int64_t max_in_flight);
  ~EngineLoop();  // cancels what is left and joins the thread

  // Queues a request (outputs to `queue`) and returns its handle, or -1 when max_in_flight
  // requests are in flight already (the caller answers 503). Throws lw::Error for a request
  // the engine would refuse.
  int64_t submit(engine::Request request, std::shared_ptr<OutputQueue> queue);
  void cancel(int64_t handle);
  // Cancels every request and stops the thread, once the engine step in progress (never
  // interrupted) has returned.
  void shutdown();
  // The same, waiting for that step at most `timeout`: false when it is still running (the
  // thread is left to it; the caller then ends the process without destroying the loop).
  bool shutdown(std::chrono::milliseconds timeout);
  LoopStats stats();

 private:
  struct Pending {
    int64_t handle;
    engine::Request request;
    std::shared_ptr<OutputQueue> queue;
  };
  void run();

  engine::Engine& engine_;
  int64_t max_in_flight_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> adds_;
  std::vector<int64_t> cancels_;
  std::map<int64_t, int64_t> engine_ids_;  // handle -> engine id, loop thread only
  int64_t next_handle_ = 1;
  bool stop_ = false;
  bool ended_ = false;  // run() has returned
  std::condition_variable ended_cv_;
  LoopStats stats_;
  std::thread thread_;
};

}  // namespace lw::server
