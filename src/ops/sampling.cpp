#include "ops/sampling.h"

#include <algorithm>
#include <cmath>

#include "kernels/sampling.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

// Byte offsets of the sampling kernel's inputs in one buffer (each 8-byte aligned), so that a step
// copies them to the device at once rather than a copy per field.
struct PackLayout {
  size_t bytes = 0;
  size_t place(size_t count, size_t size) {
    const size_t at = (bytes + 7) / 8 * 8;
    bytes = at + count * size;
    return at;
  }
};

template <class V>
V* at(void* base, size_t offset) {
  return reinterpret_cast<V*>(static_cast<char*>(base) + offset);
}

}  // namespace

bool uses_history(const SamplingOptions& o) {
  return o.repetition_penalty != 1.0f || o.presence_penalty != 0.0f || o.frequency_penalty != 0.0f;
}

void check_sampling_options(const SamplingOptions& o, int64_t vocab, const std::string& where) {
  LW_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
           where << ": temperature " << o.temperature << " must be finite and >= 0");
  LW_CHECK(o.top_k >= 0, where << ": top_k " << o.top_k << " must be >= 0");
  LW_CHECK(o.top_p > 0 && o.top_p <= 1, where << ": top_p " << o.top_p << " must be in (0, 1]");
  LW_CHECK(o.min_p >= 0 && o.min_p <= 1, where << ": min_p " << o.min_p << " must be in [0, 1]");
  LW_CHECK(std::isfinite(o.repetition_penalty) && o.repetition_penalty > 0,
           where << ": repetition_penalty " << o.repetition_penalty << " must be > 0");
  LW_CHECK(std::isfinite(o.presence_penalty) && std::isfinite(o.frequency_penalty),
           where << ": presence and frequency penalties must be finite");
  for (size_t b = 0; b < o.logit_bias.size(); ++b) {
    const auto [id, bias] = o.logit_bias[b];
    LW_CHECK(id >= 0 && id < vocab, where << ": logit_bias token " << id << " is outside the vocabulary of " << vocab);
    LW_CHECK(std::isfinite(bias), where << ": logit_bias of token " << id << " must be finite");
    for (size_t c = 0; c < b; ++c) LW_CHECK(o.logit_bias[c].first != id, where << ": logit_bias names token " << id << " twice");
  }
}

SampleResult sample(Context& ctx, const Tensor& logits, const std::vector<SamplingOptions>& options,
                    const std::vector<std::vector<int32_t>>& history, int top_logprobs) {
  check_float_input("sample", "logits", logits);
  LW_CHECK(logits.dim() == 2, "sample: logits " << logits.describe() << " must be [seqs, vocab]");
  const int64_t seqs = logits.size(0), vocab = logits.size(1);
  LW_CHECK(static_cast<int64_t>(options.size()) == seqs,
           "sample: " << options.size() << " sampling options for " << seqs << " sequences");
  LW_CHECK(top_logprobs >= 0 && top_logprobs <= kernels::kMaxTopLogprobs,
           "sample: top_logprobs " << top_logprobs << " must be in [0, " << kernels::kMaxTopLogprobs << "]");
  LW_CHECK(history.empty() || static_cast<int64_t>(history.size()) == seqs,
           "sample: " << history.size() << " histories for " << seqs << " sequences");
  for (size_t i = 0; i < options.size(); ++i)
    check_sampling_options(options[i], vocab, "sample: sequence " + std::to_string(i));
  if (seqs == 0) return {};
  // The histories only matter to penalties (the kernel reads them for rows with one); a penalty
  // without them would silently do nothing.
  const bool penalties = std::any_of(options.begin(), options.end(), uses_history);
  LW_CHECK(!penalties || !history.empty(), "sample: a sequence has a repetition, presence or frequency penalty "
                                           "but no token histories were given");
  size_t longest = 0;
  if (penalties)
    for (const auto& h : history) longest = std::max(longest, h.size());
  size_t biases = 0;
  for (const SamplingOptions& o : options) biases = std::max(biases, o.logit_bias.size());

  const auto rows = static_cast<size_t>(seqs);
  PackLayout layout;
  const size_t seed_at = layout.place(rows, 8), step_at = layout.place(rows, 8), temperature_at = layout.place(rows, 4),
               top_k_at = layout.place(rows, 4), top_p_at = layout.place(rows, 4), min_p_at = layout.place(rows, 4),
               rep_at = layout.place(rows, 4), pres_at = layout.place(rows, 4), freq_at = layout.place(rows, 4),
               bias_ids_at = layout.place(rows * biases, 4), bias_values_at = layout.place(rows * biases, 4),
               hist_at = layout.place(rows * longest, 4);
  Tensor packed_h = Tensor::empty_host({static_cast<int64_t>((layout.bytes + 7) / 8)}, DType::i64);
  void* host = packed_h.data_ptr();
  for (size_t s = 0; s < rows; ++s) {
    const SamplingOptions& o = options[s];
    at<uint64_t>(host, seed_at)[s] = o.seed;
    at<uint64_t>(host, step_at)[s] = o.step;
    at<float>(host, temperature_at)[s] = o.temperature;
    at<int32_t>(host, top_k_at)[s] = o.top_k;
    at<float>(host, top_p_at)[s] = o.top_p;
    at<float>(host, min_p_at)[s] = o.min_p;
    at<float>(host, rep_at)[s] = o.repetition_penalty;
    at<float>(host, pres_at)[s] = o.presence_penalty;
    at<float>(host, freq_at)[s] = o.frequency_penalty;
    int32_t* ids = at<int32_t>(host, bias_ids_at) + s * biases;
    float* values = at<float>(host, bias_values_at) + s * biases;
    std::fill(ids, ids + biases, -1);
    std::fill(values, values + biases, 0.0f);
    for (size_t b = 0; b < o.logit_bias.size(); ++b) ids[b] = o.logit_bias[b].first, values[b] = o.logit_bias[b].second;
    if (longest > 0) {
      int32_t* row = at<int32_t>(host, hist_at) + s * longest;
      std::fill(row, row + longest, -1);
      std::copy(history[s].begin(), history[s].end(), row);
    }
  }
  Tensor packed = ctx.to_device(packed_h);
  void* dev = packed.data_ptr();
  const kernels::SamplingParams params{at<const float>(dev, temperature_at),
                                       at<const int32_t>(dev, top_k_at),
                                       at<const float>(dev, top_p_at),
                                       at<const float>(dev, min_p_at),
                                       at<const float>(dev, rep_at),
                                       at<const float>(dev, pres_at),
                                       at<const float>(dev, freq_at),
                                       at<const uint64_t>(dev, seed_at),
                                       at<const uint64_t>(dev, step_at),
                                       longest > 0 ? at<const int32_t>(dev, hist_at) : nullptr,
                                       static_cast<int64_t>(longest),
                                       biases > 0 ? at<const int32_t>(dev, bias_ids_at) : nullptr,
                                       biases > 0 ? at<const float>(dev, bias_values_at) : nullptr,
                                       static_cast<int64_t>(biases)};
  Tensor workspace = ctx.empty({seqs, vocab}, DType::f32);
  Tensor tokens = ctx.empty({seqs}, DType::i32), logprobs = ctx.empty({seqs}, DType::f32);
  const int64_t n = top_logprobs;
  Tensor top_ids = n > 0 ? ctx.empty({seqs, n}, DType::i32) : Tensor();
  Tensor top_lp = n > 0 ? ctx.empty({seqs, n}, DType::f32) : Tensor();
  dispatch_float(logits.dtype(), "sample", [&]<class T>() {
    kernels::sample<T>(logits.data<T>(), seqs, vocab, params, workspace.data<float>(), tokens.data<int32_t>(),
                       logprobs.data<float>(), top_logprobs, n > 0 ? top_ids.data<int32_t>() : nullptr,
                       n > 0 ? top_lp.data<float>() : nullptr, ctx.stream().get());
  });
  Tensor th = ctx.to_host(tokens), lh = ctx.to_host(logprobs);
  SampleResult r{std::vector<int32_t>(th.data<int32_t>(), th.data<int32_t>() + seqs),
                 std::vector<float>(lh.data<float>(), lh.data<float>() + seqs), {}, {}};
  if (n > 0) {
    Tensor ih = ctx.to_host(top_ids), ph = ctx.to_host(top_lp);
    for (int64_t s = 0; s < seqs; ++s) {
      r.top_ids.emplace_back(ih.data<int32_t>() + s * n, ih.data<int32_t>() + (s + 1) * n);
      r.top_logprobs.emplace_back(ph.data<float>() + s * n, ph.data<float>() + (s + 1) * n);
    }
  }
  return r;
}

}  // namespace lw::ops
