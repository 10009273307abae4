// `lightwave serve`: the OpenAI-compatible HTTP API over an EngineLoop — /v1/completions,
// /v1/chat/completions (streamed as server-sent events or whole), /v1/models, /health and
// /metrics (Prometheus text), with an optional API key, a body size limit and a cap on
// requests in flight.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "engine/loaded_model.h"
#include "server/engine_loop.h"
#include "server/openai_api.h"

namespace httplib {
class Server;
}

namespace lw::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_name;  // empty: the model path's last component
  std::string api_key;     // empty: no key needed
  int64_t max_in_flight = 256;
  size_t max_body_bytes = size_t{4} << 20;
  int threads = 0;           // HTTP worker threads; 0: max_in_flight + 8
  double grace_seconds = 10;  // after stop(): in-flight requests get this long, then are cancelled
};

class HttpServer {
 public:
  HttpServer(engine::LoadedModel& generator, EngineLoop& loop, ServerOptions options);
  ~HttpServer();
  // Binds and serves until stop(); throws lw::Error when the address cannot be bound.
  void run();
  // Stops accepting at once; requests in flight get the grace period. Safe from any thread.
  void stop();
  int port() const { return bound_port_; }

 private:
  struct Metrics;
  void routes();

  engine::LoadedModel& generator_;
  EngineLoop& loop_;
  ServerOptions options_;
  ApiModel model_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Metrics> metrics_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> deadline_ns_{0};  // steady-clock time past which streams are cancelled
  int bound_port_ = 0;
};

}  // namespace lw::server
