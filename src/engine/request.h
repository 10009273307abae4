// What a client gives the engine (Request) and what it gets back, step by step (RequestOutput).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops/sampling.h"

namespace lw::engine {

struct Request {
  std::vector<int32_t> prompt;
  int max_tokens = 128;
  ops::SamplingOptions sampling;
  std::vector<int32_t> stop_token_ids;  // besides the model's end-of-sequence ids
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  int top_logprobs = 0;  // 0..20 most likely tokens per position, with their log-probabilities
};

// What one step produced for one request.
struct RequestOutput {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // new tokens
  std::vector<float> logprobs;  // of each new token
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  std::string text;             // new text (whole UTF-8 characters, stop strings held back)
  bool finished = false;
  std::string finish_reason;  // "stop", "length" or "abort"
};

using OutputCallback = std::function<void(const RequestOutput&)>;

}  // namespace lw::engine
