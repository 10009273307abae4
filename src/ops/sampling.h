// Sampling the next token of each sequence from its logits.
#pragma once
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// Per-sequence sampling parameters (as a request carries them).
struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // (0, 1]; 1: off
  float min_p = 0.0f;        // [0, 1]; 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  uint64_t step = 0;  // position in the seed's random stream: the token index of the request
  // (token id, bias) pairs, distinct ids: the bias is added to the token's logit after the
  // penalties, before temperature and the filters (OpenAI's logit_bias).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Throws naming `where` (e.g. "request", "sample: sequence 3") when an option is out of its range
// or a logit_bias names a token outside [0, vocab), a token twice, or a non-finite bias. sample()
// checks every sequence; a scheduler checks a request on arrival, so that one bad request never
// fails a step that others share.
void check_sampling_options(const SamplingOptions& o, int64_t vocab, const std::string& where);

// Whether sample() reads a sequence's history for these options (a penalty is on); where no
// sequence of a call needs it, the histories may be left out (where one does, sample() refuses
// a call without them).
bool uses_history(const SamplingOptions& o);

struct SampleResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each chosen token under the raw logits' softmax
  // With top_logprobs = n: per sequence the n most likely tokens of the raw logits (most
  // likely first, ties by lower id) and their log-probabilities.
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logprobs;
};

// logits [seqs, vocab] (f32/f16/bf16, on the device, contiguous); options: one per sequence;
// history: the token ids each sequence's penalties look at (may be empty where no sequence has a
// penalty). Returns the chosen tokens. Penalties apply once per distinct token, then the logit
// biases; top-k, then top-p over what top-k kept, then min-p; ties at a cut are kept. The same
// seed and step give the same token on every target (CUDA, HIP, the emulator at either warp size).
SampleResult sample(Context& ctx, const Tensor& logits, const std::vector<SamplingOptions>& options,
                    const std::vector<std::vector<int32_t>>& history = {}, int top_logprobs = 0);

}  // namespace lw::ops
