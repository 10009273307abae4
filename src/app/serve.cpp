#include "app/serve.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "app/engine_flags.h"
#include "app/parallel.h"
#include "base/error.h"

#if defined(LW_HAVE_SERVER)
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/context.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#endif

namespace lw::app {

namespace {

struct ServeArgs {
  std::string model, dtype = "bf16", kv_cache_dtype = "auto";
  std::string host = "127.0.0.1", name, api_key;
  int port = 8000;
  int64_t max_num_seqs = 256, max_batch_tokens = 2048, max_in_flight = 512;
  double kv_fraction = 0.9, grace = 10, header_timeout = 10, body_timeout = 60;
  size_t max_body_bytes = size_t{4} << 20;
  size_t max_connections = 1024, max_connections_per_client = 256;
  bool deterministic = false, allow_special_in_content = false;
  ParallelArgs parallel;
} args;

#if defined(LW_HAVE_SERVER)
std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal = sig; }

// Each open connection is a descriptor: the soft limit is raised towards the hard one so that
// --max-connections of them fit beside the model's files.
void raise_file_limit(size_t connections) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t want = static_cast<rlim_t>(connections) + 256;
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
    r.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min(want, r.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want)
    log().warn("serve: {} open files at most (ulimit -n), fewer than --max-connections {} needs", r.rlim_cur, connections);
}

int run_serve(int device) {
  // The access log is at info level: on unless LW_LOG_LEVEL says otherwise.
  if (!std::getenv("LW_LOG_LEVEL")) log().set_level(spdlog::level::info);
  raise_file_limit(args.max_connections);
  Context ctx(device);
  engine::LoadedModel gen(ctx, args.model, parse_dtype(args.dtype), args.parallel.placement());
  if (follow_if_not_leader(gen.runner())) return 0;
  engine::EngineOptions eo;
  eo.memory_fraction = args.kv_fraction;
  eo.max_sequences = args.max_num_seqs;
  eo.max_batch_tokens = args.max_batch_tokens;
  eo.deterministic = args.deterministic;
  eo.kv_cache_format = ops::parse_kv_cache_format(args.kv_cache_dtype);
  engine::Engine engine(gen.runner(), &gen.tokenizer(), gen.eos_ids(), eo);
  server::EngineLoop loop(engine, args.max_in_flight);
  server::ServerOptions so;
  so.host = args.host;
  so.port = args.port;
  so.model_name = args.name.empty() ? std::filesystem::path(args.model).filename().string() : args.name;
  so.api_key = args.api_key;
  so.max_in_flight = args.max_in_flight;
  so.max_body_bytes = args.max_body_bytes;
  so.grace_seconds = args.grace;
  so.header_seconds = args.header_timeout;
  so.body_seconds = args.body_timeout;
  so.max_connections = args.max_connections;
  so.max_connections_per_client = args.max_connections_per_client;
  so.allow_special_in_content = args.allow_special_in_content;
  server::HttpServer http(gen, loop, so);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done && g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (g_signal != 0) http.stop();
  });
  try {
    http.run();
  } catch (...) {
    done = true;
    watcher.join();
    throw;
  }
  done = true;
  watcher.join();
  // An engine step is never interrupted, and one over a long prompt can take minutes on a slow
  // device: past this wait the process ends without it (the device work is abandoned).
  const double wait_s = std::max(args.grace, 5.0);
  if (!loop.shutdown(std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)))) {
    log().warn("lightwave serve: an engine step is still running {:.0f} s after the server stopped; exiting without it", wait_s);
    log().flush();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  std::fprintf(stderr, "lightwave serve: stopped\n");
  return 0;
}
#endif

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* s = app.add_subcommand("serve", "Serve a model over the OpenAI HTTP API");
  s->add_option("--model", args.model, "Model directory or .gguf file")->required();
  s->add_option("--dtype", args.dtype, "Compute dtype: bf16, f16 or f32");
  add_parallel_options(s, args.parallel);
  s->add_option("--host", args.host, "Address to listen on");
  s->add_option("--port", args.port, "Port to listen on")->check(CLI::Range(1, 65535));
  s->add_option("--served-model-name", args.name, "The model's name in the API (default: the path's last part)");
  s->add_option("--api-key", args.api_key, "Require 'Authorization: Bearer KEY' (default: none)");
  s->add_option("--max-num-seqs", args.max_num_seqs, "Sequences per engine step")->check(CLI::PositiveNumber);
  s->add_option("--max-batch-tokens", args.max_batch_tokens, "Tokens per engine step")->check(CLI::PositiveNumber);
  s->add_option("--max-queued", args.max_in_flight, "Requests in flight before new ones get 503")->check(CLI::PositiveNumber);
  s->add_option("--kv-fraction", args.kv_fraction, "Fraction of free device memory for the KV cache")->check(CLI::Range(0.01, 1.0));
  s->add_option("--max-body-bytes", args.max_body_bytes, "Largest request body accepted");
  s->add_option("--max-connections", args.max_connections, "Open connections in total before new ones get 503")
      ->check(CLI::PositiveNumber);
  s->add_option("--max-connections-per-client", args.max_connections_per_client,
                "Open connections from one client address before its new ones get 429")->check(CLI::PositiveNumber);
  s->add_option("--header-timeout", args.header_timeout,
                "Seconds a request's line and headers may take from its first byte (then 408)")->check(CLI::PositiveNumber);
  s->add_option("--body-timeout", args.body_timeout, "Seconds a request's body may take after its headers (then 408)")
      ->check(CLI::PositiveNumber);
  s->add_option("--grace", args.grace, "Seconds in-flight requests (streams too) get after SIGINT/SIGTERM before they end with finish_reason abort; "
                "an engine step still running this long (5 s at least) after the server stopped is abandoned")->check(CLI::NonNegativeNumber);
  s->add_flag("--allow-special-in-content", args.allow_special_in_content,
              "Read special tokens written in chat message contents as special (trusted clients only; "
              "by default message text is tokenized as plain text, so it cannot forge turns)");
  add_deterministic_flag(s, args.deterministic);
  add_kv_cache_dtype_option(s, args.kv_cache_dtype);
}

int run_serve_command(CLI::App& app, int device) {
  if (!app.got_subcommand("serve")) return -1;
#if defined(LW_HAVE_SERVER)
  return run_serve(device);
#else
  (void)device;
  LW_FAIL("serve: this lightwave was built without the HTTP server (cpp-httplib, Debian libcpp-httplib-dev, was not found)");
#endif
}

}  // namespace lw::app
