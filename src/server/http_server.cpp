#include "server/http_server.h"

#include <httplib.h>

#include <array>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/logging.h"
#include "server/connection.h"

namespace lw::server {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// Equal strings, in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// The token of an "Authorization: Bearer <token>" header: the scheme in any case (RFC 9110
// auth schemes are case-insensitive), spaces or tabs around the token; empty when the header
// is not a bearer credential.
std::string_view bearer_token(std::string_view auth) {
  auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!auth.empty() && blank(auth.front())) auth.remove_prefix(1);
  while (!auth.empty() && blank(auth.back())) auth.remove_suffix(1);
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() <= kScheme.size() || !blank(auth[kScheme.size()])) return {};
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(auth[i])) != kScheme[i]) return {};
  auth.remove_prefix(kScheme.size());
  while (!auth.empty() && blank(auth.front())) auth.remove_prefix(1);
  return auth;
}

std::string random_id(const char* prefix) {
  static std::mt19937_64 rng(std::random_device{}());
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::ostringstream s;
  s << prefix << std::hex << rng();
  return s.str();
}

// Log-probability details of new tokens, in the completions or the chat shape.
json completion_logprobs(const text::Tokenizer& tok, const engine::RequestOutput& o, int top) {
  json r = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  for (size_t i = 0; i < o.tokens.size(); ++i) {
    const int32_t id = o.tokens[i];
    r["tokens"].push_back(tok.decode(std::span<const int32_t>(&id, 1), false));
    r["token_logprobs"].push_back(o.logprobs[i]);
    json alt = json::object();
    for (int j = 0; j < top && i < o.top_logprobs.size(); ++j) {
      const int32_t t = o.top_logprobs[i][static_cast<size_t>(j)].first;
      alt[tok.decode(std::span<const int32_t>(&t, 1), false)] = o.top_logprobs[i][static_cast<size_t>(j)].second;
    }
    r["top_logprobs"].push_back(alt);
    r["text_offset"].push_back(0);
  }
  return r;
}

json chat_logprobs(const text::Tokenizer& tok, const engine::RequestOutput& o, int top) {
  json content = json::array();
  auto entry = [&](int32_t id, float lp) {
    const std::string s = tok.decode(std::span<const int32_t>(&id, 1), false);
    return json{{"token", s}, {"logprob", lp}, {"bytes", std::vector<int>(s.begin(), s.end())}};
  };
  for (size_t i = 0; i < o.tokens.size(); ++i) {
    json e = entry(o.tokens[i], o.logprobs[i]);
    e["top_logprobs"] = json::array();
    for (int j = 0; j < top && i < o.top_logprobs.size(); ++j)
      e["top_logprobs"].push_back(entry(o.top_logprobs[i][static_cast<size_t>(j)].first, o.top_logprobs[i][static_cast<size_t>(j)].second));
    content.push_back(e);
  }
  return {{"content", content}};
}

void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// The engine request of one choice of a parsed request (choice i samples with seed + i).
engine::Request engine_request(const ParsedRequest& p, int choice) {
  engine::Request r;
  r.prompt = p.prompt;
  r.max_tokens = p.max_tokens;
  r.stop_strings = p.stop_strings;
  r.ignore_eos = p.ignore_eos;
  r.top_logprobs = p.top_logprobs;
  ops::SamplingOptions& s = r.sampling;
  s.temperature = p.sampling.temperature;
  s.top_p = p.sampling.top_p;
  s.top_k = p.sampling.top_k;
  s.min_p = p.sampling.min_p;
  s.presence_penalty = p.sampling.presence_penalty;
  s.frequency_penalty = p.sampling.frequency_penalty;
  s.repetition_penalty = p.sampling.repetition_penalty;
  s.seed = p.sampling.seed + static_cast<uint64_t>(choice);
  s.logit_bias = p.sampling.logit_bias;
  return r;
}

// The connection closes after this response (its request's body was not read in full).
void close_after(httplib::Response& res) {
  this_connection().close = true;
  res.set_header("Connection", "close");
}

// A cumulative histogram in Prometheus form.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v) {
    std::lock_guard lock(mu_);
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++n_;
  }
  void write(std::ostringstream& out, const std::string& name, const std::string& help) {
    std::lock_guard lock(mu_);
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cum += counts_[i];
      out << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cum << "\n";
    }
    out << name << "_bucket{le=\"+Inf\"} " << n_ << "\n" << name << "_sum " << sum_ << "\n" << name << "_count " << n_ << "\n";
  }

 private:
  std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

}  // namespace

// Past the body limit, at most this many more bytes of a chunked body are read (and dropped).
constexpr size_t kDiscardBytes = size_t{64} << 20;

struct HttpServer::Metrics {
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram tpot{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  std::atomic<int64_t> http_requests{0}, errors{0};
};

HttpServer::HttpServer(engine::LoadedModel& generator, EngineLoop& loop, ServerOptions options)
    : generator_(generator), loop_(loop), options_(std::move(options)), metrics_(std::make_unique<Metrics>()) {
  ConnectionLimits limits;
  limits.max_header_bytes = options_.max_header_bytes;
  limits.header_seconds = options_.header_seconds;
  limits.body_seconds = options_.body_seconds;
  limits.max_connections = options_.max_connections;
  limits.max_connections_per_client = options_.max_connections_per_client;
  http_ = std::make_unique<Listener>(limits);
  http_->on_refused = [this](const std::string& remote, int status) {
    ++metrics_->http_requests;
    ++metrics_->errors;
    log().info("access remote={} method=- path=- status={} request_bytes=0", remote, status);
  };
  // Not a request (none was read): counted apart, in lightwave_http_connections_refused_total.
  http_->on_connection_refused = [](const std::string& remote, int status, const char* cap) {
    log().info("access remote={} method=- path=- status={} request_bytes=0 refused={}", remote, status, cap);
  };
  model_.name = options_.model_name;
  model_.tokenizer = &generator.tokenizer();
  model_.chat = generator.has_chat_template() ? &generator.chat_template() : nullptr;
  model_.context = generator.config().max_position;
  model_.allow_special_in_content = options_.allow_special_in_content;
  http_->set_keep_alive_max_count(kKeepAliveRequests);
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(10, 0);  // a client that sends its body slower than this is dropped
  http_->set_write_timeout(30, 0);
  routes();
}

HttpServer::~HttpServer() {
  if (closer_.joinable()) closer_.join();
}

void HttpServer::routes() {
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // The key guards the API; health checks and metric scrapers go without it.
    if (options_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (constant_time_equal(bearer_token(auth), options_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer <key>)", "", "authentication_error"));
    close_after(res);  // the body, if any, was not read
    return httplib::Server::HandlerResponse::Handled;
  });
  // Every answered request is counted here, once, whatever answered it (a handler, the error
  // handler, or httplib refusing what it could not parse): errors are a subset of requests.
  // cpp-httplib calls this just before it writes the status line, so a client that has read a
  // response and then scrapes /metrics always finds it counted.
  http_->set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    ++metrics_->http_requests;
    if (res.status >= 400) ++metrics_->errors;
  });
  // The access log, once the response is written.
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const ConnectionState& conn = this_connection();
    log().info("access remote={} method={} path={} status={} request_bytes={}", conn.remote, req.method.empty() ? "-" : req.method,
               req.path.empty() ? "-" : req.path, res.status, conn.body_bytes + req.body.size());
  });
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    ConnectionState& conn = this_connection();
    if (res.status == 400 && conn.header_fault != HeaderFault::none) {
      res.body.clear();
      if (conn.header_fault == HeaderFault::stopping)
        reply_error(res, ApiError(503, "the server is shutting down", "", "server_error"));
      else if (conn.header_fault == HeaderFault::too_slow)
        reply_error(res, ApiError(408, "the request line and headers took longer than " +
                                           std::to_string(static_cast<int>(options_.header_seconds)) + " s"));
      else
        reply_error(res, ApiError(431, conn.header_fault == HeaderFault::too_large
                                           ? "the request line and headers are larger than " +
                                                 std::to_string(options_.max_header_bytes) + " bytes"
                                           : "a header line is longer than 8192 bytes"));
      close_after(res);
      return;
    }
    if (!res.body.empty()) return;
    const int status = res.status;
    // httplib's own 400 and 414 mean the request could not be parsed: the rest of the stream
    // cannot be read as requests.
    if (status == 400 || status == 414) close_after(res);
    const std::string what = status == 404 ? "no route " + req.method + " " + req.path
                             : status == 413 ? "the request body is larger than " + std::to_string(options_.max_body_bytes) + " bytes"
                             : status == 414 ? "the request target is longer than 8192 bytes"
                             : status == 400 ? "the request could not be parsed as HTTP/1.1"
                                             : "the request failed (HTTP " + std::to_string(status) + ")";
    reply_error(res, ApiError(status, what, "", status == 404 ? "not_found_error" : "invalid_request_error"));
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log().error("request failed: {}", what);
    reply_error(res, ApiError(500, what, "", "server_error"));
  });

  http_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json body = {{"object", "list"},
                       {"data", {{{"id", model_.name}, {"object", "model"}, {"created", std::time(nullptr)},
                                  {"owned_by", "lightwave"}, {"max_model_len", model_.context}}}}};
    res.set_content(body.dump(), "application/json");
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const LoopStats s = loop_.stats();
    std::ostringstream out;
    auto gauge = [&](const char* name, const char* type, const char* help, int64_t v) {
      out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << v << "\n";
    };
    gauge("lightwave_http_requests_total", "counter", "HTTP requests answered (counted before their response is written)",
          metrics_->http_requests.load());
    gauge("lightwave_http_errors_total", "counter", "HTTP requests answered with a 4xx or 5xx status", metrics_->errors.load());
    const ConnectionGate& gate = http_->gate();
    gauge("lightwave_http_connections", "gauge", "Open HTTP connections (admitted, not yet closed)", gate.open());
    out << "# HELP lightwave_http_connections_refused_total HTTP connections refused at a cap, before any request was read "
           "(limit=\"server\": --max-connections, 503; limit=\"client\": --max-connections-per-client, 429)\n"
           "# TYPE lightwave_http_connections_refused_total counter\n"
        << "lightwave_http_connections_refused_total{limit=\"server\"} " << gate.refused(ConnectionGate::Verdict::server_full) << "\n"
        << "lightwave_http_connections_refused_total{limit=\"client\"} " << gate.refused(ConnectionGate::Verdict::client_full) << "\n";
    gauge("lightwave_requests_total", "counter", "Generation requests accepted", s.requests);
    gauge("lightwave_requests_in_flight", "gauge", "Generation requests not yet finished", s.in_flight);
    gauge("lightwave_sequences_running", "gauge", "Sequences holding KV blocks", s.running);
    gauge("lightwave_sequences_waiting", "gauge", "Sequences waiting for KV blocks", s.waiting);
    gauge("lightwave_kv_blocks_total", "gauge", "KV cache blocks", s.kv_blocks);
    gauge("lightwave_kv_blocks_used", "gauge", "KV cache blocks held by sequences", s.kv_blocks_used);
    gauge("lightwave_generated_tokens_total", "counter", "Tokens generated", s.generated_tokens);
    metrics_->ttft.write(out, "lightwave_time_to_first_token_seconds", "Time from request to its first token");
    metrics_->tpot.write(out, "lightwave_time_per_output_token_seconds", "Mean time between a request's tokens");
    res.set_content(out.str(), "text/plain; version=0.0.4");
  });

  auto generate = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      // Counted before stopping_ is read (stop() sets it before reading the count): the listener
      // never closes under a request that got past this check. A stream's count is held by its
      // content provider, so it ends once the last byte is written.
      struct Active {
        std::atomic<int64_t>& n;
        explicit Active(std::atomic<int64_t>& n) : n(n) { ++n; }
        ~Active() { --n; }
      };
      auto active = std::make_shared<Active>(active_);
      // The body is JSON whatever the Content-Type says (as OpenAI-compatible servers take it),
      // read here so that no form or multipart parsing of httplib applies; multipart is refused.
      if (req.is_multipart_form_data()) {
        close_after(res);
        return reply_error(res, ApiError(415, "the body must be JSON, not multipart form data"));
      }
      // A body over the limit is read and dropped, so the connection can serve the next request
      // (httplib does so itself for a Content-Length over the limit); a chunked body that goes on
      // past kDiscardBytes more is not read further, and the connection closes.
      std::string text;
      size_t seen = 0;
      bool too_large = false;
      const bool read = reader([&](const char* data, size_t n) {
        seen += n;
        if (seen <= options_.max_body_bytes) {
          text.append(data, n);
          return true;
        }
        too_large = true;
        text.clear();
        return seen - options_.max_body_bytes <= kDiscardBytes;
      });
      this_connection().body_bytes = seen;
      if (too_large || res.status == 413) {
        if (!read && res.status != 413) close_after(res);
        return reply_error(res, ApiError(413, "the request body is larger than " + std::to_string(options_.max_body_bytes) + " bytes"));
      }
      if (!read) {
        close_after(res);
        if (this_connection().body_stopped) return reply_error(res, ApiError(503, "the server is shutting down", "", "server_error"));
        if (this_connection().body_too_slow)
          return reply_error(res, ApiError(408, "the request body took longer than " +
                                                    std::to_string(static_cast<int>(options_.body_seconds)) + " s"));
        return reply_error(res, ApiError(400, "the request body could not be read"));
      }
      if (stopping_) return reply_error(res, ApiError(503, "the server is shutting down", "", "server_error"));
      ParsedRequest p;
      try {
        // Parsing bounds the nesting depth; nothing from the request is serialised.
        const json body = parse_body(text);
        p = parse_request(body, chat, model_);
      } catch (const ApiError& e) {
        return reply_error(res, e);
      } catch (const Error& e) {  // the tokenizer or the chat template refused the text
        return reply_error(res, ApiError(400, e.what()));
      }
      if (p.n > options_.max_in_flight)  // it could never be admitted: not a 503 to retry
        return reply_error(res, ApiError(400, "'n' " + std::to_string(p.n) + " is more than the " +
                                                  std::to_string(options_.max_in_flight) +
                                                  " requests this server holds in flight (--max-queued)", "n"));
      auto queue = std::make_shared<OutputQueue>();
      std::vector<int64_t> handles;
      try {
        for (int i = 0; i < p.n; ++i) {
          const int64_t h = loop_.submit(engine_request(p, i), queue);
          if (h < 0) {
            for (int64_t x : handles) loop_.cancel(x);
            res.set_header("Retry-After", "1");
            return reply_error(res, ApiError(503, "too many requests in flight; retry later", "", "server_error"));
          }
          handles.push_back(h);
        }
      } catch (const Error& e) {
        for (int64_t x : handles) loop_.cancel(x);
        return reply_error(res, ApiError(400, e.what()));
      }

      // Per choice: its index, text so far, token count, finish reason.
      struct Choice {
        std::string text;
        int tokens = 0;
        std::string finish;
        json logprobs = nullptr;
        bool done = false;
      };
      struct State {
        std::vector<Choice> choices;
        std::map<int64_t, size_t> index;
        int64_t prompt_tokens = 0;
        Clock::time_point start = Clock::now(), first, last;
        bool started = false, role_sent = false, usage_sent = false, cancelled = false;
        size_t finished = 0;
      };
      auto st = std::make_shared<State>();
      st->choices.resize(static_cast<size_t>(p.n));
      for (size_t i = 0; i < handles.size(); ++i) st->index[handles[i]] = i;
      st->prompt_tokens = static_cast<int64_t>(p.prompt.size());
      const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
      const int64_t created = std::time(nullptr);
      const text::Tokenizer* tok = model_.tokenizer;
      const bool want_logprobs = p.logprobs;
      const int top = p.top_logprobs;

      // Applies one output to its choice; returns the stream chunk it makes (null when none).
      auto apply = [this, st, want_logprobs, top, chat, id, created, tok](const engine::RequestOutput& o) -> json {
        Choice& c = st->choices[st->index.at(o.id)];
        const size_t idx = st->index.at(o.id);
        if (!o.tokens.empty()) {
          const auto now = Clock::now();
          if (!st->started) st->first = now, st->started = true;
          st->last = now;
        }
        c.text += o.text;
        c.tokens += static_cast<int>(o.tokens.size());
        json lp = nullptr;
        if (want_logprobs && !o.tokens.empty()) {
          lp = chat ? chat_logprobs(*tok, o, top) : completion_logprobs(*tok, o, top);
          if (c.logprobs.is_null()) c.logprobs = lp;
          else if (chat) for (auto& e : lp["content"]) c.logprobs["content"].push_back(e);
          else for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) for (auto& e : lp[k]) c.logprobs[k].push_back(e);
        }
        if (o.finished) {
          c.done = true;
          ++st->finished;
          c.finish = o.finish_reason == "abort" ? "abort" : o.finish_reason;
        }
        if (o.text.empty() && !o.finished && lp.is_null()) return nullptr;
        json choice = {{"index", idx}, {"logprobs", lp}, {"finish_reason", o.finished ? json(c.finish) : json(nullptr)}};
        if (chat) choice["delta"] = o.text.empty() && o.finished ? json::object() : json{{"content", o.text}};
        else choice["text"] = o.text;
        return {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                {"model", model_.name}, {"choices", json::array({choice})}};
      };
      auto usage = [st] {
        int64_t completion = 0;
        for (const Choice& c : st->choices) completion += c.tokens;
        return json{{"prompt_tokens", st->prompt_tokens}, {"completion_tokens", completion},
                    {"total_tokens", st->prompt_tokens + completion}};
      };
      auto record_timing = [this, st] {
        if (!st->started) return;
        metrics_->ttft.observe(std::chrono::duration<double>(st->first - st->start).count());
        int tokens = 0;
        for (const Choice& c : st->choices) tokens = std::max(tokens, c.tokens);
        if (tokens > 1) metrics_->tpot.observe(std::chrono::duration<double>(st->last - st->first).count() / (tokens - 1));
      };
      // Past the shutdown deadline: cancels the requests (once); their last outputs then carry
      // finish_reason "abort".
      auto cancel_past_deadline = [this, st, handles] {
        const int64_t d = deadline_ns_.load();
        if (st->cancelled || d == 0 || now_ns() <= d) return;
        st->cancelled = true;
        for (int64_t h : handles) loop_.cancel(h);
      };
      // Past the shutdown's last moment (the cancellation waits for the engine step in progress,
      // which may outlast it): the request is answered without its outputs still to come.
      auto past_stop_margin = [this] {
        const int64_t d = deadline_ns_.load();
        return d != 0 && now_ns() > d + static_cast<int64_t>(kStopMarginSeconds * 1e9);
      };

      if (!p.stream) {
        engine::RequestOutput o;
        while (st->finished < handles.size() && !past_stop_margin()) {
          cancel_past_deadline();
          if (queue->pop(o, std::chrono::milliseconds(100))) apply(o);
        }
        for (Choice& c : st->choices)
          if (!c.done) c.finish = "abort";
        record_timing();
        json choices = json::array();
        for (size_t i = 0; i < st->choices.size(); ++i) {
          const Choice& c = st->choices[i];
          json ch = {{"index", i}, {"logprobs", c.logprobs}, {"finish_reason", c.finish}};
          if (chat) ch["message"] = {{"role", "assistant"}, {"content", c.text}};
          else ch["text"] = c.text;
          choices.push_back(ch);
        }
        const json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                          {"model", model_.name}, {"choices", choices}, {"usage", usage()}};
        res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
        return;
      }

      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, st, queue, apply, usage, record_timing, cancel_past_deadline, chat, id, created, active,
           include_usage = p.include_usage](size_t, httplib::DataSink& sink) {
            auto send = [&](const json& j) {
              const std::string s = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
              return sink.write(s.data(), s.size());
            };
            if (chat && !st->role_sent) {
              st->role_sent = true;
              json first = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model_.name},
                            {"choices", json::array()}};
              for (size_t i = 0; i < st->choices.size(); ++i)
                first["choices"].push_back({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                            {"logprobs", nullptr}, {"finish_reason", nullptr}});
              if (!send(first)) return false;
            }
            cancel_past_deadline();
            engine::RequestOutput o;
            if (queue->pop(o, std::chrono::milliseconds(100))) {
              const json chunk = apply(o);
              if (!chunk.is_null() && !send(chunk)) return false;
            } else if (!sink.is_writable()) {
              return false;
            }
            if (st->finished == st->choices.size()) {
              record_timing();
              if (include_usage) {
                const json u = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                                {"created", created}, {"model", model_.name}, {"choices", json::array()},
                                {"usage", usage()}};
                if (!send(u)) return false;
              }
              static const std::string done = "data: [DONE]\n\n";
              if (!sink.write(done.data(), done.size())) return false;
              sink.done();
            }
            return true;
          },
          [this, st, handles](bool success) {
            // A client that went away mid-stream: its requests are cancelled, their blocks freed.
            if (!success || st->finished < st->choices.size())
              for (int64_t h : handles) loop_.cancel(h);
          });
    };
  };
  http_->Post("/v1/completions", generate(false));
  http_->Post("/v1/chat/completions", generate(true));
}

void HttpServer::run() {
  LW_CHECK(http_->bind_to_port(options_.host, options_.port), "serve: cannot listen on " << options_.host << ":"
                                                                                          << options_.port);
  bound_port_ = options_.port;
  if (!http_->set_backlog(kListenBacklog))
    log().warn("serve: cannot raise the accept queue of {}:{} to {} connections; it stays at cpp-httplib's 5", options_.host,
               options_.port, kListenBacklog);
  if (stopping_) return;  // stopped before it listened
  log().warn("lightwave serve: model '{}' on http://{}:{}", model_.name, options_.host, options_.port);
  http_->listen_after_bind();
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  const int64_t deadline = now_ns() + static_cast<int64_t>(options_.grace_seconds * 1e9);
  deadline_ns_ = deadline;
  // httplib ends chunked streams as soon as its listener closes: it closes only when every
  // request is answered (the ones past the deadline are cancelled, so they are answered soon),
  // or kStopMarginSeconds after the deadline.
  closer_ = std::thread([this, deadline] {
    const int64_t last = deadline + static_cast<int64_t>(kStopMarginSeconds * 1e9);
    while (active_.load() > 0 && now_ns() < last) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (active_.load() > 0) log().warn("lightwave serve: {} requests still unanswered; closing", active_.load());
    http_->stop_connections();
    http_->stop();
  });
}

}  // namespace lw::server
