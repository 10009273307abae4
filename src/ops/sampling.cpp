#include "ops/sampling.h"

#include <algorithm>
#include <cmath>

#include "kernels/sampling.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

template <class V>
Tensor column(Context& ctx, const std::vector<SamplingOptions>& options, DType dt, V SamplingOptions::*field) {
  Tensor h = Tensor::empty_host({static_cast<int64_t>(options.size())}, dt);
  for (size_t i = 0; i < options.size(); ++i) static_cast<V*>(h.data_ptr())[i] = options[i].*field;
  return ctx.to_device(h);
}

}  // namespace

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
  size_t longest = 0;
  for (const auto& h : history) longest = std::max(longest, h.size());
  Tensor hist_h = Tensor::empty_host({seqs, static_cast<int64_t>(longest)}, DType::i32);
  for (int64_t s = 0; s < seqs && longest > 0; ++s) {
    int32_t* row = hist_h.data<int32_t>() + s * static_cast<int64_t>(longest);
    std::fill(row, row + longest, -1);
    std::copy(history[s].begin(), history[s].end(), row);
  }
  Tensor hist = longest > 0 ? ctx.to_device(hist_h) : Tensor();
  size_t biases = 0;
  for (const SamplingOptions& o : options) biases = std::max(biases, o.logit_bias.size());
  Tensor bias_ids, bias_values;
  if (biases > 0) {
    Tensor ids_h = Tensor::empty_host({seqs, static_cast<int64_t>(biases)}, DType::i32);
    Tensor values_h = Tensor::empty_host({seqs, static_cast<int64_t>(biases)}, DType::f32);
    for (int64_t s = 0; s < seqs; ++s) {
      int32_t* ids = ids_h.data<int32_t>() + s * static_cast<int64_t>(biases);
      float* values = values_h.data<float>() + s * static_cast<int64_t>(biases);
      std::fill(ids, ids + biases, -1);
      std::fill(values, values + biases, 0.0f);
      const auto& lb = options[static_cast<size_t>(s)].logit_bias;
      for (size_t b = 0; b < lb.size(); ++b) ids[b] = lb[b].first, values[b] = lb[b].second;
    }
    bias_ids = ctx.to_device(ids_h);
    bias_values = ctx.to_device(values_h);
  }
  Tensor temperature = column(ctx, options, DType::f32, &SamplingOptions::temperature);
  Tensor top_k = column(ctx, options, DType::i32, &SamplingOptions::top_k);
  Tensor top_p = column(ctx, options, DType::f32, &SamplingOptions::top_p);
  Tensor min_p = column(ctx, options, DType::f32, &SamplingOptions::min_p);
  Tensor rep = column(ctx, options, DType::f32, &SamplingOptions::repetition_penalty);
  Tensor pres = column(ctx, options, DType::f32, &SamplingOptions::presence_penalty);
  Tensor freq = column(ctx, options, DType::f32, &SamplingOptions::frequency_penalty);
  Tensor seed = column(ctx, options, DType::i64, &SamplingOptions::seed);
  Tensor step = column(ctx, options, DType::i64, &SamplingOptions::step);
  const kernels::SamplingParams params{temperature.data<float>(),
                                       top_k.data<int32_t>(),
                                       top_p.data<float>(),
                                       min_p.data<float>(),
                                       rep.data<float>(),
                                       pres.data<float>(),
                                       freq.data<float>(),
                                       static_cast<const uint64_t*>(seed.data_ptr()),
                                       static_cast<const uint64_t*>(step.data_ptr()),
                                       longest > 0 ? hist.data<int32_t>() : nullptr,
                                       static_cast<int64_t>(longest),
                                       biases > 0 ? bias_ids.data<int32_t>() : nullptr,
                                       biases > 0 ? bias_values.data<float>() : nullptr,
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
