// `lightwave serve`: the OpenAI-compatible HTTP API over an EngineLoop — /v1/completions,
// /v1/chat/completions (streamed as server-sent events or whole), /v1/models, /health and
// /metrics (Prometheus text), with an optional API key, caps on the body and header sizes, on
// open connections and on requests in flight.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "engine/loaded_model.h"
#include "server/engine_loop.h"
#include "server/openai_api.h"

namespace lw::server {

class Listener;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_name;  // empty: the model path's last component
  std::string api_key;     // empty: no key needed
  int64_t max_in_flight = 256;
  size_t max_body_bytes = size_t{4} << 20;
  size_t max_header_bytes = size_t{64} << 10;  // request line and headers; past it 431
  // From a request's first byte its line and headers must arrive within header_seconds, then
  // its body within body_seconds; past either, 408 and the connection closes.
  double header_seconds = 10, body_seconds = 60;
  // Open connections in total (past it 503) and per client address (past it 429), each served
  // on a thread of its own.
  size_t max_connections = 1024, max_connections_per_client = 256;
  double grace_seconds = 10;  // after stop(): in-flight requests get this long, then are cancelled
  bool allow_special_in_content = false;  // ApiModel::allow_special_in_content
};

// Past the grace period, requests in flight are cancelled and answered (finish_reason "abort",
// then a stream's [DONE]); the listener closes when none is left, or this much later at most
// (a client that reads nothing holds its stream no longer, and a request whose engine step
// outlasts it is answered without it).
inline constexpr double kStopMarginSeconds = 5;
// The listening socket's accept queue, and the requests one keep-alive connection may send.
inline constexpr int kListenBacklog = 1024;
inline constexpr size_t kKeepAliveRequests = 1000;

class HttpServer {
 public:
  HttpServer(engine::LoadedModel& generator, EngineLoop& loop, ServerOptions options);
  ~HttpServer();
  // Binds and serves until stop(); throws lw::Error when the address cannot be bound.
  void run();
  // New requests get 503 at once; requests in flight, streamed or not, get the grace period,
  // then are cancelled and end with finish_reason "abort" (streams then send [DONE]); run()
  // returns once they are answered. Returns at once; safe from any thread.
  void stop();
  int port() const { return bound_port_; }

 private:
  struct Metrics;
  void routes();

  engine::LoadedModel& generator_;
  EngineLoop& loop_;
  ServerOptions options_;
  ApiModel model_;
  std::unique_ptr<Listener> http_;
  std::unique_ptr<Metrics> metrics_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> deadline_ns_{0};  // steady-clock time past which requests are cancelled
  std::atomic<int64_t> active_{0};       // generation requests not yet answered in full
  std::thread closer_;                    // after stop(): closes the listener once they are
  int bound_port_ = 0;
};

}  // namespace lw::server
