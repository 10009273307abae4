#include "ops/moe.h"

#include <cmath>

#include "kernels/moe.h"
#include "ops/check.h"

namespace lw::ops {

void moe_route(Context& ctx, const Tensor& logits, const MoeRouting& r, const Tensor& weights, const Tensor& ids) {
  check_float_input("moe_route", "logits", logits);
  LW_CHECK(logits.dim() == 2, "moe_route: logits " << logits.describe() << " must be [tokens, experts]");
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  LW_CHECK(experts >= 1 && experts <= 256, "moe_route: " << experts << " experts; 1 to 256 are supported");
  LW_CHECK(r.k >= 1 && r.k <= 16 && r.k <= experts, "moe_route: k " << r.k << " must be in [1, min(16, " << experts << ")]");
  LW_CHECK(r.groups >= 1 && experts % r.groups == 0 && r.topk_groups >= 1 && r.topk_groups <= r.groups,
           "moe_route: " << r.groups << " groups (keeping " << r.topk_groups << ") must divide the " << experts
                         << " experts, keeping between 1 and all of them");
  LW_CHECK(r.groups == 1 || r.topk_groups * (experts / r.groups) >= r.k,
           "moe_route: the " << r.topk_groups << " kept groups hold fewer than k = " << r.k << " experts");
  LW_CHECK(std::isfinite(r.scale) && r.scale > 0, "moe_route: scale " << r.scale << " must be > 0");
  if (r.correction_bias.defined()) {
    check_on_device("moe_route", "correction_bias", r.correction_bias);
    LW_CHECK(r.correction_bias.dtype() == DType::f32 && r.correction_bias.numel() == experts &&
                 r.correction_bias.is_contiguous(),
             "moe_route: correction_bias " << r.correction_bias.describe() << " must be a contiguous f32[" << experts << "]");
  }
  check_on_device("moe_route", "weights", weights);
  check_on_device("moe_route", "ids", ids);
  LW_CHECK(weights.dtype() == DType::f32 && weights.shape() == std::vector<int64_t>({tokens, r.k}) && weights.is_contiguous(),
           "moe_route: weights " << weights.describe() << " must be a contiguous f32[" << tokens << ", " << r.k << "]");
  LW_CHECK(ids.dtype() == DType::i32 && ids.shape() == std::vector<int64_t>({tokens, r.k}) && ids.is_contiguous(),
           "moe_route: ids " << ids.describe() << " must be a contiguous i32[" << tokens << ", " << r.k << "]");
  const kernels::MoeRouteArgs a{tokens, static_cast<int>(experts), r.k, r.sigmoid, r.renormalize, r.groups,
                                r.topk_groups, r.scale};
  dispatch_float(logits.dtype(), "moe_route", [&]<class T>() {
    kernels::moe_route<T>(a, logits.data<T>(), r.correction_bias.defined() ? r.correction_bias.data<float>() : nullptr,
                          weights.data<float>(), ids.data<int32_t>(), ctx.warp_size(), ctx.stream().get());
  });
}

MoePermutation moe_permutation(Context& ctx, const Tensor& ids, int experts) {
  check_on_device("moe_permutation", "ids", ids);
  LW_CHECK(ids.dtype() == DType::i32 && ids.dim() == 2 && ids.is_contiguous(),
           "moe_permutation: ids " << ids.describe() << " must be a contiguous i32[tokens, k]");
  LW_CHECK(experts >= 1 && experts <= 256, "moe_permutation: " << experts << " experts; 1 to 256 are supported");
  MoePermutation p{ctx.empty({experts + 1}, DType::i32), ctx.empty({ids.numel()}, DType::i32),
                   ctx.empty(ids.shape(), DType::i32)};
  kernels::moe_permutation(ids.data<int32_t>(), ids.size(0), static_cast<int>(ids.size(1)), experts,
                           p.offsets.data<int32_t>(), p.rows.data<int32_t>(), p.inverse.data<int32_t>(), ctx.warp_size(),
                           ctx.stream().get());
  return p;
}

void moe_gather(Context& ctx, const Tensor& x, const MoePermutation& perm, const Tensor& out) {
  check_float_input("moe_gather", "x", x);
  check_float_input("moe_gather", "out", out);
  check_same_dtype("moe_gather", "x", x, "out", out);
  LW_CHECK(x.dim() == 2 && out.dim() == 2 && out.size(0) == perm.rows.numel() && out.size(1) == x.size(1),
           "moe_gather: out " << out.describe() << " must be [" << perm.rows.numel() << ", " << x.size(1) << "]");
  dispatch_float(x.dtype(), "moe_gather", [&]<class T>() {
    kernels::moe_gather<T>(x.data<T>(), perm.rows.data<int32_t>(), out.size(0), x.size(1), out.data<T>(),
                           ctx.warp_size(), ctx.stream().get());
  });
}

void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& weights, const MoePermutation& perm,
                 const Tensor& out) {
  check_float_input("moe_combine", "expert_out", expert_out);
  check_float_input("moe_combine", "out", out);
  check_same_dtype("moe_combine", "expert_out", expert_out, "out", out);
  LW_CHECK(weights.dtype() == DType::f32 && weights.shape() == perm.inverse.shape() && weights.is_contiguous(),
           "moe_combine: weights " << weights.describe() << " must be a contiguous f32" << shape_str(perm.inverse.shape()));
  const int64_t tokens = perm.inverse.size(0), k = perm.inverse.size(1);
  LW_CHECK(expert_out.dim() == 2 && expert_out.size(0) == tokens * k,
           "moe_combine: expert_out " << expert_out.describe() << " must have " << tokens * k << " rows");
  LW_CHECK(out.dim() == 2 && out.size(0) == tokens && out.size(1) == expert_out.size(1),
           "moe_combine: out " << out.describe() << " must be [" << tokens << ", " << expert_out.size(1) << "]");
  dispatch_float(out.dtype(), "moe_combine", [&]<class T>() {
    kernels::moe_combine<T>(expert_out.data<T>(), weights.data<float>(), perm.inverse.data<int32_t>(), tokens,
                            static_cast<int>(k), out.size(1), out.data<T>(), ctx.warp_size(), ctx.stream().get());
  });
}

}  // namespace lw::ops
