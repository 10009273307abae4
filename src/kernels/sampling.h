// Token sampling from logits, one block per sequence, with results that are the same on every
// target for the same seed (see gpu/portable_math.h and the fixed summation order below).
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// Per-sequence parameters, device arrays of [seqs] each.
struct SamplingParams {
  const float* temperature;         // 0: greedy (argmax, ties to the lowest id)
  const int32_t* top_k;             // 0: off
  const float* top_p;               // 1: off
  const float* min_p;               // 0: off (relative to the most likely token)
  const float* repetition_penalty;  // 1: off (divides positive, multiplies negative logits)
  const float* presence_penalty;    // 0: off
  const float* frequency_penalty;   // 0: off
  const uint64_t* seed;
  const uint64_t* step;             // the counter of the seed's random stream
  const int32_t* history;           // [seqs, history_len] token ids the penalties look at; -1 pads
  int64_t history_len;
  const int32_t* bias_ids;          // [seqs, bias_len] distinct token ids per row; -1 pads
  const float* bias_values;         // [seqs, bias_len] added to those tokens' logits after the penalties
  int64_t bias_len;
};

// The threads of the sampling block: fixed, so the summation order is the same everywhere.
inline constexpr int kSamplingThreads = 1024;
inline constexpr int kMaxTopLogprobs = 20;

// tokens [seqs] i32, logprobs [seqs] f32 (log-probability of the chosen token under the raw
// logits' softmax); workspace: seqs * vocab floats. With top_n > 0 (<= kMaxTopLogprobs):
// top_ids [seqs, top_n] i32 and top_logprobs [seqs, top_n] f32, the most likely tokens of the
// raw logits, most likely first, ties by lower id.
template <class T>
void sample(const T* logits, int64_t seqs, int64_t vocab, const SamplingParams& p, float* workspace, int32_t* tokens,
            float* logprobs, int top_n, int32_t* top_ids, float* top_logprobs, cudaStream_t stream);

}  // namespace lw::kernels
