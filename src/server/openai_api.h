// The OpenAI API's request and response shapes: parsing and validating /v1/completions and
// /v1/chat/completions bodies into ParsedRequests, and the error object. Every bad input is
// an ApiError with the HTTP status and the offending parameter. Nothing here depends on the
// engine (http_server.cpp makes engine requests of them), so the parser builds and is fuzzed
// on its own (tests/fuzz).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace lw::server {

struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string param = "", std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param, type;
};

// {"error": {"message", "type", "param", "code"}}
nlohmann::json error_json(const ApiError& e);

struct ApiModel {
  std::string name;
  const text::Tokenizer* tokenizer = nullptr;
  const text::ChatTemplate* chat = nullptr;  // null: the model has none
  int64_t context = 0;
  // Special tokens written in message contents are read as special (trusted clients only);
  // false: message text is tokenized as plain text, so it cannot forge chat turns.
  bool allow_special_in_content = false;
};

// The sampling fields of a request (ops::SamplingOptions's, as the API states them).
struct Sampling {
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int32_t top_k = 0;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  uint64_t seed = 0;  // choice i of n samples with seed + i
  std::vector<std::pair<int32_t, float>> logit_bias;  // distinct token ids
};

struct ParsedRequest {
  bool chat = false, stream = false, include_usage = false;
  int n = 1;
  bool logprobs = false;  // return log-probabilities of the chosen tokens
  int top_logprobs = 0;
  std::vector<int32_t> prompt;  // token ids, within the vocabulary, fewer than the context
  int max_tokens = 16;          // prompt + max_tokens fit the context
  Sampling sampling;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
};

// The deepest nesting of arrays and objects a request body may have.
inline constexpr int kMaxJsonDepth = 64;

// Parses a request body; throws ApiError (400) for text that is not JSON, not UTF-8, or nests
// deeper than kMaxJsonDepth (checked while parsing, so no deeper value is ever built).
nlohmann::json parse_body(const std::string& text);

// Throws ApiError. `body` is the parsed JSON body. Every field is honoured or refused: a field
// the server does not implement (tools, response_format other than text, ...) or does not know
// is a 400 naming it. `user` is accepted and ignored.
ParsedRequest parse_request(const nlohmann::json& body, bool chat, const ApiModel& model);

}  // namespace lw::server
