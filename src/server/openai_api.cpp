#include "server/openai_api.h"

#include <cmath>
#include <random>

namespace lw::server {

namespace {

using nlohmann::json;

const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* key, double fallback, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number()) throw ApiError(400, std::string("'") + key + "' must be a number", key);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw ApiError(400, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi),
                   key);
  return x;
}

int64_t integer(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw ApiError(400, std::string("'") + key + "' must be an integer", key);
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                                                                   : v->get<int64_t>();
  if (x < lo || x > hi)
    throw ApiError(400, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi),
                   key);
  return x;
}

bool boolean(const json& body, const char* key, bool fallback) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw ApiError(400, std::string("'") + key + "' must be a boolean", key);
  return v->get<bool>();
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  const json* c = field(m, "content");
  if (!c) return "";
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) throw ApiError(400, "'" + where + "' must be a string or an array of text parts", where);
  std::string text;
  for (const json& part : *c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      throw ApiError(400, "'" + where + "' parts must be {\"type\": \"text\", \"text\": ...}", where);
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<int32_t> completion_prompt(const json& body, const ApiModel& model) {
  const json* p = field(body, "prompt");
  if (!p) throw ApiError(400, "'prompt' is required", "prompt");
  if (p->is_string()) return model.tokenizer->encode(p->get<std::string>(), true);
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) return model.tokenizer->encode((*p)[0].get<std::string>(), true);
  if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const json& v) { return v.is_number_integer(); })) {
    std::vector<int32_t> ids;
    for (const json& v : *p) {
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= model.tokenizer->vocab_size())
        throw ApiError(400, "'prompt' token " + std::to_string(id) + " is outside the vocabulary", "prompt");
      ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
  }
  throw ApiError(400, "'prompt' must be a string, a one-string array or an array of token ids", "prompt");
}

std::vector<int32_t> chat_prompt(const json& body, const ApiModel& model) {
  if (!model.chat) throw ApiError(400, "this model has no chat template; use /v1/completions", "messages");
  const json* msgs = field(body, "messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) throw ApiError(400, "'messages' must be a non-empty array", "messages");
  std::vector<text::ChatMessage> conv;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw ApiError(400, "'" + where + "' must be an object with a string 'role'", where);
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer")
      throw ApiError(400, "'" + where + ".role' must be system, developer, user or assistant", where + ".role");
    conv.push_back({role == "developer" ? "system" : role, content_text(m, i)});
  }
  try {
    return model.tokenizer->encode(model.chat->render(conv, true), false);
  } catch (const Error& e) {
    throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
}

}  // namespace

json error_json(const ApiError& e) {
  return {{"error", {{"message", e.what()}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                     {"code", nullptr}}}};
}

ParsedRequest parse_request(const json& body, bool chat, const ApiModel& model) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  const json* name = field(body, "model");
  if (name && !name->is_string()) throw ApiError(400, "'model' must be a string", "model");
  if (name && name->get<std::string>() != model.name)
    throw ApiError(404, "the model '" + name->get<std::string>() + "' does not exist; this server serves '" + model.name + "'",
                   "model", "not_found_error");
  ParsedRequest r;
  r.chat = chat;
  r.request.prompt = chat ? chat_prompt(body, model) : completion_prompt(body, model);
  const int64_t prompt = static_cast<int64_t>(r.request.prompt.size());
  if (prompt == 0) throw ApiError(400, "the prompt has no tokens", chat ? "messages" : "prompt");
  const int64_t room = model.context - prompt;
  if (room < 1)
    throw ApiError(400, "the prompt has " + std::to_string(prompt) + " tokens; the model's context is " +
                            std::to_string(model.context), chat ? "messages" : "prompt");
  const char* max_key = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t max_tokens = integer(body, max_key, chat ? std::min<int64_t>(room, 1024) : 16, 1, INT64_MAX);
  if (max_tokens > room)
    throw ApiError(400, "'" + std::string(max_key) + "' " + std::to_string(max_tokens) + " + " + std::to_string(prompt) +
                            " prompt tokens exceed the model's context of " + std::to_string(model.context), max_key);
  r.request.max_tokens = static_cast<int>(max_tokens);
  ops::SamplingOptions& s = r.request.sampling;
  s.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0));
  s.top_p = static_cast<float>(number(body, "top_p", 1.0, 1e-9, 1.0));
  const int64_t top_k = integer(body, "top_k", 0, -1, 1 << 20);
  s.top_k = static_cast<int32_t>(top_k < 0 ? 0 : top_k);
  s.min_p = static_cast<float>(number(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 1.0, 0.01, 10.0));
  s.seed = field(body, "seed") ? static_cast<uint64_t>(integer(body, "seed", 0, INT64_MIN, INT64_MAX))
                               : std::random_device{}() * 0x100000001ull;
  r.n = static_cast<int>(integer(body, "n", 1, 1, 16));
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  r.request.ignore_eos = boolean(body, "ignore_eos", false);
  if (const json* stop = field(body, "stop")) {
    std::vector<std::string> stops;
    if (stop->is_string()) stops.push_back(stop->get<std::string>());
    else if (stop->is_array() && stop->size() <= 16 && std::all_of(stop->begin(), stop->end(), [](const json& v) { return v.is_string(); }))
      for (const json& v : *stop) stops.push_back(v.get<std::string>());
    else throw ApiError(400, "'stop' must be a string or an array of at most 16 strings", "stop");
    for (const std::string& x : stops)
      if (x.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop");
    r.request.stop_strings = std::move(stops);
  }
  if (chat) {
    r.logprobs = boolean(body, "logprobs", false);
    r.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
    if (r.top_logprobs > 0 && !r.logprobs) throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  } else if (const json* lp = field(body, "logprobs")) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, 0, 20));
    (void)lp;
  }
  if (boolean(body, "echo", false)) throw ApiError(400, "'echo' is not supported", "echo");
  r.request.top_logprobs = r.top_logprobs;
  return r;
}

}  // namespace lw::server
