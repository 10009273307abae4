#include "server/openai_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>
#include <set>

#include "base/error.h"

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
  if (!c) throw ApiError(400, "'" + where + "' is required: a string or an array of text parts", where);
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) throw ApiError(400, "'" + where + "' must be a string or an array of text parts", where);
  std::string text;
  for (size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw ApiError(400, "'" + at + "' must be {\"type\": \"text\", \"text\": <string>} (only text is supported)", at);
    for (const auto& [key, value] : part.items())
      if (key != "type" && key != "text")
        throw ApiError(400, "'" + at + "." + key + "' is not supported", at + "." + key);
    text += part["text"].get<std::string>();
  }
  return text;
}

// Fields of the OpenAI API (or of vLLM's extensions) that this server does not implement: a
// request that sets one (to anything but null) is refused, not served without it.
const std::set<std::string>& unsupported_fields() {
  static const std::set<std::string> s = {
      "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "suffix", "audio", "modalities",
      "prediction", "reasoning_effort", "web_search_options", "store", "metadata", "service_tier", "verbosity",
      "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs", "prompt_cache_key",
      "safety_identifier", "add_generation_prompt", "continue_final_message", "chat_template"};
  return s;
}

// Every field of the body is one this endpoint honours, or the request is refused naming it.
void check_fields(const json& body, bool chat) {
  static const std::set<std::string> common = {
      "model", "stream", "stream_options", "n", "max_tokens", "temperature", "top_p", "top_k", "min_p",
      "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "stop", "ignore_eos", "logit_bias",
      "logprobs", "user"};
  static const std::set<std::string> completion_only = {"prompt", "echo", "best_of"};
  static const std::set<std::string> chat_only = {"messages", "max_completion_tokens", "top_logprobs", "response_format"};
  const char* endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  for (const auto& [key, value] : body.items()) {
    if (common.count(key) || (chat ? chat_only : completion_only).count(key)) continue;
    if (unsupported_fields().count(key)) {
      if (value.is_null()) continue;
      throw ApiError(400, "'" + key + "' is not supported by this server", key);
    }
    if ((chat ? completion_only : chat_only).count(key))
      throw ApiError(400, "'" + key + "' is not a field of " + endpoint, key);
    throw ApiError(400, "unknown field '" + key + "' for " + endpoint, key);
  }
}

// logit_bias: {"<token id>": bias in [-100, 100], ...}, at most 300 tokens.
std::vector<std::pair<int32_t, float>> logit_bias(const json& body, const ApiModel& model) {
  const json* lb = field(body, "logit_bias");
  if (!lb) return {};
  if (!lb->is_object()) throw ApiError(400, "'logit_bias' must be an object of token ids to biases", "logit_bias");
  if (lb->size() > 300) throw ApiError(400, "'logit_bias' names " + std::to_string(lb->size()) + " tokens; at most 300", "logit_bias");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : lb->items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty())
      throw ApiError(400, "'logit_bias' keys must be token ids (decimal integers); got '" + key + "'", "logit_bias");
    if (id < 0 || id >= model.tokenizer->vocab_size())
      throw ApiError(400, "'logit_bias' token " + key + " is outside the vocabulary of " +
                              std::to_string(model.tokenizer->vocab_size()), "logit_bias");
    if (!value.is_number()) throw ApiError(400, "'logit_bias' of token " + key + " must be a number", "logit_bias");
    const double bias = value.get<double>();
    if (!std::isfinite(bias) || bias < -100 || bias > 100)
      throw ApiError(400, "'logit_bias' of token " + key + " must be between -100 and 100", "logit_bias");
    for (const auto& e : out)
      if (e.first == id) throw ApiError(400, "'logit_bias' names token " + std::to_string(id) + " twice", "logit_bias");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return out;
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
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && !value.is_null())
        throw ApiError(400, "'" + where + "." + key + "' is not supported (a message has a role and text content)",
                       where + "." + key);
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer")
      throw ApiError(400, "'" + where + ".role' must be system, developer, user or assistant", where + ".role");
    conv.push_back({role == "developer" ? "system" : role, content_text(m, i)});
  }
  try {
    return text::encode_chat(*model.tokenizer, *model.chat, conv, true, model.allow_special_in_content);
  } catch (const Error& e) {
    throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
}

}  // namespace

json error_json(const ApiError& e) {
  return {{"error", {{"message", e.what()}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                     {"code", nullptr}}}};
}

json parse_body(const std::string& text) {
  // The callback sees each array and object as it opens, at its depth (the body's top level
  // is 0): past the limit the parse stops, before anything deeper is built.
  const json::parser_callback_t limit = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw ApiError(400, "the body nests arrays and objects more than " + std::to_string(kMaxJsonDepth) +
                              " levels deep");
    return true;
  };
  try {
    return json::parse(text, limit);
  } catch (const json::exception& e) {  // the lexer also refuses strings that are not UTF-8
    throw ApiError(400, std::string("the body is not valid UTF-8 JSON: ") + e.what());
  }
}

ParsedRequest parse_request(const json& body, bool chat, const ApiModel& model) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_fields(body, chat);
  const json* name = field(body, "model");
  if (name && !name->is_string()) throw ApiError(400, "'model' must be a string", "model");
  if (name && name->get<std::string>() != model.name)
    throw ApiError(404, "the model '" + name->get<std::string>() + "' does not exist; this server serves '" + model.name + "'",
                   "model", "not_found_error");
  ParsedRequest r;
  r.chat = chat;
  r.prompt = chat ? chat_prompt(body, model) : completion_prompt(body, model);
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt == 0) throw ApiError(400, "the prompt has no tokens", chat ? "messages" : "prompt");
  const int64_t room = model.context - prompt;
  if (room < 1)
    throw ApiError(400, "the prompt has " + std::to_string(prompt) + " tokens; the model's context is " +
                            std::to_string(model.context), chat ? "messages" : "prompt");
  // max_completion_tokens (chat) is max_tokens under its newer name; both must agree.
  const bool new_name = chat && field(body, "max_completion_tokens");
  const char* max_key = new_name ? "max_completion_tokens" : "max_tokens";
  const int64_t max_tokens = integer(body, max_key, chat ? std::min<int64_t>(room, 1024) : 16, 1, INT64_MAX);
  if (new_name && field(body, "max_tokens") && integer(body, "max_tokens", 0, 1, INT64_MAX) != max_tokens)
    throw ApiError(400, "'max_tokens' and 'max_completion_tokens' differ; give one of them", "max_completion_tokens");
  if (max_tokens > room)
    throw ApiError(400, "'" + std::string(max_key) + "' " + std::to_string(max_tokens) + " + " + std::to_string(prompt) +
                            " prompt tokens exceed the model's context of " + std::to_string(model.context), max_key);
  r.max_tokens = static_cast<int>(max_tokens);
  Sampling& s = r.sampling;
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
    if (!r.stream) throw ApiError(400, "'stream_options' needs 'stream': true", "stream_options");
    if (!so->is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    for (const auto& [key, value] : so->items())
      if (key != "include_usage")
        throw ApiError(400, "'stream_options." + key + "' is not supported (only include_usage)", "stream_options." + key);
    r.include_usage = boolean(*so, "include_usage", false);
  }
  s.logit_bias = logit_bias(body, model);
  if (const json* user = field(body, "user"); user && !user->is_string())
    throw ApiError(400, "'user' must be a string", "user");  // accepted and not used: no per-user state
  if (const json* rf = field(body, "response_format")) {
    const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (!type || !type->is_string())
      throw ApiError(400, "'response_format' must be an object with a string 'type'", "response_format");
    if (*type != "text" || rf->size() != 1)
      throw ApiError(400, "'response_format' of type '" + type->get<std::string>() +
                              "' is not supported; only {\"type\": \"text\"}", "response_format");
  }
  if (const json* best_of = field(body, "best_of"); best_of && integer(body, "best_of", 1, 1, 16) != r.n)
    throw ApiError(400, "'best_of' other than n is not supported", "best_of");
  r.ignore_eos = boolean(body, "ignore_eos", false);
  if (const json* stop = field(body, "stop")) {
    std::vector<std::string> stops;
    if (stop->is_string()) stops.push_back(stop->get<std::string>());
    else if (stop->is_array() && stop->size() <= 16 && std::all_of(stop->begin(), stop->end(), [](const json& v) { return v.is_string(); }))
      for (const json& v : *stop) stops.push_back(v.get<std::string>());
    else throw ApiError(400, "'stop' must be a string or an array of at most 16 strings", "stop");
    for (const std::string& x : stops)
      if (x.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop");
    r.stop_strings = std::move(stops);
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
  return r;
}

}  // namespace lw::server
