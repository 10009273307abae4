#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "kernels/rope.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

// The inverse frequencies of each rotary pair, after scaling (Hugging Face's rope types
// "default", "linear", "llama3" and "yarn"); computed in double, stored as float.
std::vector<double> frequencies(const RopeConfig& c, double& mscale) {
  const int half = c.rotary_dim / 2;
  const double dim = c.rotary_dim;
  std::vector<double> f(half);
  for (int i = 0; i < half; ++i) f[i] = 1.0 / std::pow(c.theta, 2.0 * i / dim);
  mscale = 1.0;
  switch (c.scaling) {
    case RopeScaling::none: break;
    case RopeScaling::linear:
      for (double& x : f) x /= c.factor;
      break;
    case RopeScaling::llama3: {
      const double old_ctx = static_cast<double>(c.original_max_position);
      const double low_wavelen = old_ctx / c.low_freq_factor, high_wavelen = old_ctx / c.high_freq_factor;
      for (double& x : f) {
        const double wavelen = 2 * std::numbers::pi / x;
        if (wavelen > low_wavelen) {
          x /= c.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_ctx / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
          x = (1 - smooth) * x / c.factor + smooth * x;
        }
      }
      break;
    }
    case RopeScaling::yarn: {
      const double max_pos = static_cast<double>(c.original_max_position);
      auto correction_dim = [&](double rotations) {
        return dim * std::log(max_pos / (rotations * 2 * std::numbers::pi)) / (2 * std::log(c.theta));
      };
      double low = std::max(0.0, std::floor(correction_dim(c.beta_fast)));
      double high = std::min(dim - 1, std::ceil(correction_dim(c.beta_slow)));
      if (low == high) high += 0.001;  // no division by zero in the ramp
      for (int i = 0; i < half; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation = f[i], interpolation = f[i] / c.factor;
        const double extrapolation_weight = 1 - ramp;
        f[i] = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight;
      }
      mscale = c.attention_factor > 0 ? c.attention_factor : (c.factor > 1 ? 0.1 * std::log(c.factor) + 1 : 1.0);
      break;
    }
  }
  return f;
}

}  // namespace

Rope::Rope(Context& ctx, const RopeConfig& config) : config_(config) {
  LW_CHECK(config.rotary_dim > 0 && config.rotary_dim % 2 == 0 && config.rotary_dim <= 512,
           "rope: rotary_dim " << config.rotary_dim << " must be even, > 0 and <= 512");
  LW_CHECK(std::isfinite(config.theta) && config.theta > 1, "rope: theta " << config.theta << " must be > 1");
  if (config.scaling != RopeScaling::none) {
    LW_CHECK(std::isfinite(config.factor) && config.factor > 0, "rope: scaling factor " << config.factor << " must be > 0");
  }
  if (config.scaling == RopeScaling::llama3) {
    LW_CHECK(config.high_freq_factor > config.low_freq_factor && config.low_freq_factor > 0,
             "rope: llama3 scaling needs high_freq_factor > low_freq_factor > 0 (got " << config.high_freq_factor
                                                                                       << ", " << config.low_freq_factor << ")");
  }
  if (config.scaling == RopeScaling::llama3 || config.scaling == RopeScaling::yarn) {
    LW_CHECK(config.original_max_position > 0,
             "rope: original_max_position_embeddings " << config.original_max_position << " must be > 0");
  }
  double mscale = 1.0;
  for (double f : frequencies(config, mscale)) inv_freq_.push_back(static_cast<float>(f));
  mscale_ = static_cast<float>(mscale);
  Tensor host = Tensor::empty_host({static_cast<int64_t>(inv_freq_.size())}, DType::f32);
  std::copy(inv_freq_.begin(), inv_freq_.end(), host.data<float>());
  table_ = ctx.to_device(host);
}

void Rope::apply(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& q_out,
                 const HeadNorm* norm, const RopeCacheRows* cache) const {
  check_on_device("rope", "q", q);
  check_float("rope", "q", q);
  LW_CHECK(q.dim() == 3, "rope: q " << q.describe() << " must be [tokens, heads, head_dim]");
  const int64_t tokens = q.size(0), head_dim = q.size(2);
  LW_CHECK(q.stride(2) == 1 && q.stride(1) == head_dim, "rope: q " << q.describe() << " needs contiguous heads");
  LW_CHECK(head_dim >= config_.rotary_dim,
           "rope: head_dim " << head_dim << " is smaller than rotary_dim " << config_.rotary_dim);
  if (k.defined()) {
    check_on_device("rope", "k", k);
    check_same_dtype("rope", "q", q, "k", k);
    LW_CHECK(k.dim() == 3 && k.size(0) == tokens && k.size(2) == head_dim,
             "rope: k " << k.describe() << " must be [" << tokens << ", heads, " << head_dim << "]");
    LW_CHECK(k.stride(2) == 1 && k.stride(1) == head_dim, "rope: k " << k.describe() << " needs contiguous heads");
  }
  const Tensor& qo = q_out.defined() ? q_out : q;
  if (q_out.defined()) {
    check_on_device("rope", "q_out", q_out);
    check_same_shape("rope", "q", q, "q_out", q_out);
    check_same_dtype("rope", "q", q, "q_out", q_out);
    LW_CHECK(q_out.stride(2) == 1 && q_out.stride(1) == head_dim,
             "rope: q_out " << q_out.describe() << " needs contiguous heads");
    // Rows of q_out and of q (or k) interleaved would be read after they are written.
    auto span = [](const Tensor& t) {
      const auto* b = static_cast<const char*>(t.data_ptr());
      return std::pair{b, b + ((t.size(0) - 1) * t.stride(0) + t.size(1) * t.size(2)) * dtype_size(t.dtype())};
    };
    auto apart = [&](const Tensor& t) {
      const auto [a0, a1] = span(q_out);
      const auto [b0, b1] = span(t);
      return a1 <= b0 || b1 <= a0;
    };
    LW_CHECK(q.size(0) == 0 || (apart(q) && (!k.defined() || apart(k))),
             "rope: q_out " << q_out.describe() << " overlaps q or k (pass no q_out to rotate q in place)");
  }
  check_on_device("rope", "positions", positions);
  LW_CHECK((positions.dtype() == DType::i32 || positions.dtype() == DType::i64) && positions.dim() == 1 &&
               positions.size(0) == tokens && positions.is_contiguous(),
           "rope: positions " << positions.describe() << " must be a contiguous i32 or i64 [" << tokens << "]");
  if (norm) {
    auto check_weight = [&](const char* name, const Tensor& w) {
      check_on_device("rope", name, w);
      check_same_dtype("rope", "q", q, name, w);
      LW_CHECK(w.dim() == 1 && w.size(0) == head_dim && w.is_contiguous(),
               "rope: the head norm's " << name << " " << w.describe() << " must be a contiguous [" << head_dim << "]");
    };
    check_weight("q_weight", norm->q_weight);
    if (k.defined()) check_weight("k_weight", norm->k_weight);
    LW_CHECK(norm->eps >= 0.0f && std::isfinite(norm->eps), "rope: the head norm's epsilon " << norm->eps);
  }
  if (cache) {
    LW_CHECK(k.defined(), "rope: a cache write needs k");
    check_on_device("rope", "v", cache->v);
    check_same_dtype("rope", "k", k, "v", cache->v);
    LW_CHECK(cache->v.dim() == 3 && cache->v.size(0) == tokens && cache->v.size(1) == k.size(1) &&
                 cache->v.size(2) == head_dim && cache->v.stride(2) == 1 && cache->v.stride(1) == head_dim,
             "rope: v " << cache->v.describe() << " must be [" << tokens << ", " << k.size(1) << ", " << head_dim
                        << "] with contiguous heads");
    for (auto [name, c] : {std::pair<const char*, const Tensor*>{"k_cache", &cache->k_cache}, {"v_cache", &cache->v_cache}}) {
      check_on_device("rope", name, *c);
      check_same_dtype("rope", "k", k, name, *c);
      LW_CHECK(c->dim() == 4 && c->is_contiguous() && c->size(2) == k.size(1) && c->size(3) == head_dim,
               "rope: " << name << " " << c->describe() << " must be a contiguous [num_blocks, block_size, "
                        << k.size(1) << ", " << head_dim << "]");
    }
    check_same_shape("rope", "k_cache", cache->k_cache, "v_cache", cache->v_cache);
    check_slot_mapping("rope", cache->slot_mapping, tokens);
  }
  kernels::RopeArgs a{tokens,
                      static_cast<int>(q.size(1)),
                      k.defined() ? static_cast<int>(k.size(1)) : 0,
                      static_cast<int>(head_dim),
                      config_.rotary_dim,
                      q.stride(0),
                      k.defined() ? k.stride(0) : 0,
                      qo.stride(0),
                      config_.neox,
                      mscale_,
                      norm ? norm->eps : 0.0f};
  dispatch_float(q.dtype(), "rope", [&]<class T>() {
    T* kp = k.defined() ? k.data<T>() : nullptr;
    const T* qn = norm ? norm->q_weight.data<T>() : nullptr;
    const T* kn = norm && k.defined() ? norm->k_weight.data<T>() : nullptr;
    kernels::RopeCacheWrite<T> cw;
    if (cache) {
      cw.v = cache->v.data<T>();
      cw.v_token_stride = cache->v.stride(0);
      cw.slots = cache->slot_mapping.data<int64_t>();
      cw.num_slots = cache->k_cache.size(0) * cache->k_cache.size(1);
      cw.k_cache = cache->k_cache.data<T>();
      cw.v_cache = cache->v_cache.data<T>();
    }
    if (positions.dtype() == DType::i32) {
      kernels::rope<T, int32_t>(a, q.data<T>(), qo.data<T>(), kp, positions.data<int32_t>(), table_.data<float>(),
                                ctx.warp_size(), ctx.stream().get(), qn, kn, cw);
    } else {
      kernels::rope<T, int64_t>(a, q.data<T>(), qo.data<T>(), kp, positions.data<int64_t>(), table_.data<float>(),
                                ctx.warp_size(), ctx.stream().get(), qn, kn, cw);
    }
  });
}

}  // namespace lw::ops
