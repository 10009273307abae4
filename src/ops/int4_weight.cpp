#include "ops/int4_weight.h"

#include <algorithm>
#include <cmath>

#include "kernels/quant/int4.h"
#include "ops/check.h"
#include "ops/copy.h"
#include "ops/elementwise.h"

namespace lw::ops {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_shape(const Int4Tensors& t, const char* name, const Tensor& x, bool float_values, const std::vector<int64_t>& shape) {
  LW_CHECK(x.defined(), "int4 weight (" << int4_layout_name(t.layout) << ", [" << t.n << ", " << t.k << "]): " << name
                                        << " is missing");
  check_on_device("int4 weight", name, x);
  const bool dtype_ok = float_values ? is_float(x.dtype()) : x.dtype() == DType::i32;
  LW_CHECK(dtype_ok && x.shape() == shape && x.is_contiguous(),
           "int4 weight (" << int4_layout_name(t.layout) << ", [" << t.n << ", " << t.k << "], group " << t.group << "): "
                           << name << " " << x.describe() << " must be contiguous "
                           << (float_values ? "f16, bf16 or f32" : "i32") << shape_str(shape));
}

// The order of input columns that makes each group contiguous (act_order_columns), or an empty
// vector where the columns are in group order.
std::vector<int32_t> group_order(Context& ctx, const Int4Tensors& t, int64_t groups) {
  if (!t.g_idx.defined()) return {};
  const Tensor h = ctx.to_host(t.g_idx);
  const std::string what = std::string("int4 weight (") + int4_layout_name(t.layout) + ", [" + std::to_string(t.n) + ", " +
                           std::to_string(t.k) + "])";
  std::optional<std::vector<int32_t>> order = act_order_columns(h.data<int32_t>(), t.k, t.group, groups, what + ": g_idx");
  LW_CHECK(order.has_value(), what << ": g_idx gives a group a number of columns other than " << t.group);
  return std::move(*order);
}

Tensor unpack(Context& ctx, const Tensor& src, kernels::Int4Unpack u) {
  u.words = src.numel();
  Tensor out = ctx.empty({u.rows, u.cols}, DType::i8);
  kernels::int4_unpack(static_cast<uint8_t*>(out.data_ptr()), src.data<int32_t>(), u, ctx.stream().get());
  return out;
}

constexpr uint8_t kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // the nibble of column 8c + j

}  // namespace

const char* int4_layout_name(Int4Layout layout) {
  switch (layout) {
    case Int4Layout::gptq: return "gptq";
    case Int4Layout::gptq_v2: return "gptq_v2";
    case Int4Layout::awq: return "awq";
    case Int4Layout::packed_rows: return "pack-quantized";
  }
  return "?";
}

Weight int4_weight(Context& ctx, const Int4Tensors& t, Int4Part part) {
  // A group wider than K is one group per row (checkpoints store G = 1 for it).
  const int64_t n = t.n, k = t.k, group = std::min(t.group, t.k);
  const std::string what = std::string("int4 weight (") + int4_layout_name(t.layout) + ", [" + std::to_string(n) + ", " +
                           std::to_string(k) + "], group " + std::to_string(t.group) + ")";
  LW_CHECK(n > 0 && k > 0 && k % 8 == 0 && group > 0 && group % 8 == 0,
           what << ": sizes must be positive, K a multiple of 8 (eight values per int32) and the group a multiple of 8");
  const int64_t groups = ceil_div(k, group);
  const bool gptq = t.layout == Int4Layout::gptq || t.layout == Int4Layout::gptq_v2;
  if (t.layout != Int4Layout::packed_rows)
    LW_CHECK(n % 8 == 0, what << ": N must be a multiple of 8 (zero points are packed eight to an int32 along N)");
  switch (t.layout) {
    case Int4Layout::gptq:
    case Int4Layout::gptq_v2:
      check_shape(t, "qweight", t.qweight, false, {k / 8, n});
      check_shape(t, "qzeros", t.qzeros, false, {groups, n / 8});
      check_shape(t, "scales", t.scales, true, {groups, n});
      break;
    case Int4Layout::awq:
      check_shape(t, "qweight", t.qweight, false, {k, n / 8});
      check_shape(t, "qzeros", t.qzeros, false, {groups, n / 8});
      check_shape(t, "scales", t.scales, true, {groups, n});
      LW_CHECK(!t.g_idx.defined(), what << ": AWQ weights have no g_idx");
      break;
    case Int4Layout::packed_rows:
      check_shape(t, "weight_packed", t.qweight, false, {n, k / 8});
      check_shape(t, "weight_scale", t.scales, true, {n, groups});
      if (t.qzeros.defined()) check_shape(t, "weight_zero_point", t.qzeros, false, {ceil_div(n, 8), groups});
      break;
  }
  if (t.g_idx.defined()) check_shape(t, "g_idx", t.g_idx, false, {k});
  const std::vector<int32_t> order = group_order(ctx, t, groups);

  int64_t r0 = 0, r1 = n, c0 = 0, c1 = k;
  if (part.dim == 0) r0 = part.start, r1 = part.end;
  if (part.dim == 1) c0 = part.start, c1 = part.end;
  LW_CHECK(0 <= r0 && r0 < r1 && r1 <= n && 0 <= c0 && c0 < c1 && c1 <= k,
           what << ": part [" << r0 << ", " << r1 << ") x [" << c0 << ", " << c1 << ") is outside the matrix");
  if (part.dim == 1 && (!order.empty() || c0 % group != 0 || (c1 % group != 0 && c1 != k) || (c1 - c0) % 8 != 0))
    return Weight();

  Tensor perm;
  if (!order.empty()) {
    Tensor h = Tensor::empty_host({k}, DType::i32);
    std::copy(order.begin(), order.end(), h.data<int32_t>());
    perm = ctx.to_device(h);
  }
  // The part's values [pn, pk] (tile columns: sorted by group where act-order) and zero points
  // [its groups, pn], unpacked from the whole stored matrix.
  const int64_t pn = r1 - r0, pk = c1 - c0, g0 = c0 / group, g1 = ceil_div(c1, group);
  kernels::Int4Unpack u;
  u.rows = pn, u.cols = pk, u.row0 = r0, u.col0 = c0;
  u.col_perm = perm.defined() ? perm.data<int32_t>() : nullptr;
  if (gptq) {
    u.col_div = 8, u.col_stride = n, u.row_stride = 1;
  } else if (t.layout == Int4Layout::awq) {
    u.pack_cols = false, u.row_div = 8, u.row_stride = 1, u.col_stride = n / 8;
    std::copy(kAwqNibble, kAwqNibble + 8, u.order);
  } else {
    u.col_div = 8, u.col_stride = 1, u.row_stride = k / 8;
  }
  const Tensor q = unpack(ctx, t.qweight, u);
  Tensor zeros;
  if (t.layout == Int4Layout::packed_rows && t.qzeros.defined()) {  // stored [ceil(N / 8), G], packed along N
    kernels::Int4Unpack z;
    z.rows = pn, z.cols = g1 - g0, z.row0 = r0, z.col0 = g0;
    z.pack_cols = false, z.row_div = 8, z.row_stride = groups, z.col_stride = 1;
    zeros = unpack(ctx, t.qzeros, z);
  } else if (t.layout == Int4Layout::packed_rows) {
    Tensor h = Tensor::empty_host({pn, g1 - g0}, DType::i8);
    std::fill_n(h.data<int8_t>(), h.numel(), static_cast<int8_t>(8));
    zeros = ctx.to_device(h);
  } else {  // stored [G, N / 8], packed along N: unpacked as [N, G]
    kernels::Int4Unpack z;
    z.rows = pn, z.cols = g1 - g0, z.row0 = r0, z.col0 = g0;
    z.pack_cols = false, z.row_div = 8, z.row_stride = 1, z.col_stride = n / 8;
    z.add = t.layout == Int4Layout::gptq ? 1 : 0;
    if (t.layout == Int4Layout::awq) std::copy(kAwqNibble, kAwqNibble + 8, z.order);
    zeros = unpack(ctx, t.qzeros, z);
  }
  // Scales [N, G] in f32, checked finite.
  Tensor scales = ctx.empty({n, groups}, DType::f32);
  const Tensor stored = t.layout == Int4Layout::packed_rows ? t.scales : t.scales.transpose(0, 1);
  if (stored.dtype() == DType::f32) copy(ctx, stored, scales);
  else cast(ctx, contiguous(ctx, stored), scales);
  const Tensor hs = ctx.to_host(scales);
  for (int64_t i = 0; i < groups * n; ++i) {
    const float v = hs.data<float>()[i];
    LW_CHECK(std::isfinite(v), what << ": scale of row " << i / groups << ", group " << i % groups << " is " << v);
  }
  if (r0 != 0 || r1 != n || g0 != 0 || g1 != groups) scales = contiguous(ctx, scales.slice(0, r0, r1).slice(1, g0, g1));
  Tensor tiles = ctx.empty({kernels::int4_tile_count(pn, pk) * kernels::kInt4TileBytes}, DType::i8);
  kernels::int4_pack_tiles(tiles.data_ptr(), static_cast<const uint8_t*>(q.data_ptr()), pn, pk, ctx.stream().get());
  return Weight::int4(pn, pk, tiles, scales, zeros, std::min(group, pk), perm);
}

Weight int4_stack_rows(Context& ctx, const std::vector<Weight>& parts) {
  LW_CHECK(!parts.empty(), "int4_stack_rows: no parts");
  const Weight& first = parts.front();
  std::vector<Tensor> scales, zeros;
  int64_t n = 0;
  if (!same_column_order(ctx, parts)) return Weight();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Weight& p = parts[i];
    if (p.format() != WeightFormat::int4 || p.in_features() != first.in_features() || p.group_size() != first.group_size())
      return Weight();
    if (i + 1 < parts.size() && p.out_features() % kernels::kInt4TileRows != 0) return Weight();
    scales.push_back(p.scales());
    zeros.push_back(p.zeros());
    n += p.out_features();
  }
  if (parts.size() == 1) return first;
  const int64_t k = first.in_features();
  Tensor stacked = ctx.empty({kernels::int4_tile_count(n, k) * kernels::kInt4TileBytes}, DType::i8);
  int64_t row_tile0 = 0;
  for (const Weight& p : parts) {
    kernels::int4_place_tiles(stacked.data_ptr(), n, p.data().data_ptr(), p.out_features(), row_tile0, k, ctx.stream().get());
    row_tile0 += p.out_features() / kernels::kInt4TileRows;
  }
  return Weight::int4(n, k, stacked, stack_rows(ctx, scales), stack_rows(ctx, zeros), first.group_size(), first.perm());
}

}  // namespace lw::ops
