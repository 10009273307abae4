#include "ops/weight.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/logging.h"
#include "gpu/runtime.h"
#include "gpu/vector.h"
#include "kernels/quant/fp8_mma_gemv.h"
#include "kernels/quant/gguf_gemv.h"
#include "kernels/quant/gguf_mma_gemv.h"
#include "kernels/quant/int4.h"
#include "kernels/quant/int4_hopper.h"
#include "kernels/quant/quantize.h"
#include "ops/check.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/launch_counters.h"
#include "ops/quant.h"
#include "ops/select.h"
#include "ops/vendor_gemm.h"

namespace lw::ops {

namespace {

// The kernel layer's name of a GGUF block format.
std::optional<BlockFormat> gguf_block(WeightFormat format) {
  switch (format) {
    case WeightFormat::gguf_q4_0: return BlockFormat::q4_0;
    case WeightFormat::gguf_q4_1: return BlockFormat::q4_1;
    case WeightFormat::gguf_q5_0: return BlockFormat::q5_0;
    case WeightFormat::gguf_q5_1: return BlockFormat::q5_1;
    case WeightFormat::gguf_q8_0: return BlockFormat::q8_0;
    case WeightFormat::gguf_q2_k: return BlockFormat::q2_k;
    case WeightFormat::gguf_q3_k: return BlockFormat::q3_k;
    case WeightFormat::gguf_q4_k: return BlockFormat::q4_k;
    case WeightFormat::gguf_q5_k: return BlockFormat::q5_k;
    case WeightFormat::gguf_q6_k: return BlockFormat::q6_k;
    default: return std::nullopt;
  }
}

// Every weight tensor: defined, on the device, contiguous.
void check_stored(const char* op, const char* name, const Tensor& t) {
  check_on_device(op, name, t);
  LW_CHECK(t.is_contiguous(), op << ": " << name << " " << t.describe() << " must be contiguous");
}

void check_tensor(const char* op, const char* name, const Tensor& t, DType dtype, const std::vector<int64_t>& shape) {
  check_stored(op, name, t);
  LW_CHECK(t.dtype() == dtype && t.shape() == shape,
           op << ": " << name << " " << t.describe() << " must be " << dtype_name(dtype) << shape_str(shape));
}

// q [N, K] of `dtype` (i8 for int8 and fp8 bytes); returns {N, K}.
std::pair<int64_t, int64_t> check_matrix(const char* op, const char* name, const Tensor& q, DType dtype) {
  check_stored(op, name, q);
  LW_CHECK(q.dtype() == dtype && q.dim() == 2,
           op << ": " << name << " " << q.describe() << " must be 2-D " << dtype_name(dtype) << " [out_features, in_features]");
  return {q.size(0), q.size(1)};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool has_fp8_gemm(const gpu::DeviceCaps& caps) { return caps.vendor == gpu::Vendor::cuda && caps.arch_number >= 89; }

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::dense: return "dense";
    case WeightFormat::fp8_e4m3_per_tensor: return "fp8_e4m3_per_tensor";
    case WeightFormat::fp8_e4m3_per_channel: return "fp8_e4m3_per_channel";
    case WeightFormat::fp8_e4m3_per_block: return "fp8_e4m3_per_block";
    case WeightFormat::int8_per_channel: return "int8_per_channel";
    case WeightFormat::int8_per_group: return "int8_per_group";
    case WeightFormat::int4: return "int4";
    case WeightFormat::gguf_q4_0: return "gguf_q4_0";
    case WeightFormat::gguf_q4_1: return "gguf_q4_1";
    case WeightFormat::gguf_q5_0: return "gguf_q5_0";
    case WeightFormat::gguf_q5_1: return "gguf_q5_1";
    case WeightFormat::gguf_q8_0: return "gguf_q8_0";
    case WeightFormat::gguf_q2_k: return "gguf_q2_k";
    case WeightFormat::gguf_q3_k: return "gguf_q3_k";
    case WeightFormat::gguf_q4_k: return "gguf_q4_k";
    case WeightFormat::gguf_q5_k: return "gguf_q5_k";
    case WeightFormat::gguf_q6_k: return "gguf_q6_k";
    case WeightFormat::gguf_mixed:
      return "gguf_mixed";
  }
  return "?";
}

bool is_gguf_block_format(WeightFormat format) { return gguf_block(format).has_value(); }

int64_t gguf_block_elems(WeightFormat format) {
  const std::optional<BlockFormat> b = gguf_block(format);
  return b ? block_format_elems(*b) : 0;
}

int64_t gguf_block_bytes(WeightFormat format) {
  const std::optional<BlockFormat> b = gguf_block(format);
  return b ? block_format_bytes(*b) : 0;
}

bool is_scaled_8bit_format(WeightFormat format) {
  return format == WeightFormat::int8_per_channel || format == WeightFormat::int8_per_group ||
         format == WeightFormat::fp8_e4m3_per_tensor ||
         format == WeightFormat::fp8_e4m3_per_channel || format == WeightFormat::fp8_e4m3_per_block;
}

std::optional<WeightFormat> gguf_weight_format(BlockFormat format) {
  for (WeightFormat f : {WeightFormat::gguf_q4_0, WeightFormat::gguf_q4_1, WeightFormat::gguf_q5_0, WeightFormat::gguf_q5_1,
                         WeightFormat::gguf_q8_0, WeightFormat::gguf_q2_k, WeightFormat::gguf_q3_k, WeightFormat::gguf_q4_k,
                         WeightFormat::gguf_q5_k, WeightFormat::gguf_q6_k})
    if (gguf_block(f) == format) return f;
  return std::nullopt;
}

Weight Weight::dense(Tensor w) {
  const char* op = "Weight::dense";
  check_float_input(op, "w", w);
  LW_CHECK(w.dim() == 2, op << ": w " << w.describe() << " must be [out_features, in_features]");
  Weight r(WeightFormat::dense, w.size(0), w.size(1));
  r.data_ = std::move(w);
  return r;
}

Weight Weight::int8_per_channel(Tensor q, Tensor scales) {
  const char* op = "Weight::int8_per_channel";
  auto [n, k] = check_matrix(op, "q", q, DType::i8);
  check_tensor(op, "scales", scales, DType::f32, {n});
  Weight r(WeightFormat::int8_per_channel, n, k);
  r.data_ = std::move(q);
  r.scales_ = std::move(scales);
  return r;
}

Weight Weight::int8_per_group(Tensor q, Tensor scales, int64_t group_size, Tensor zeros, Tensor perm) {
  const char* op = "Weight::int8_per_group";
  auto [n, k] = check_matrix(op, "q", q, DType::i8);
  LW_CHECK(group_size > 0, op << ": group_size " << group_size << " must be positive");
  check_tensor(op, "scales", scales, DType::f32, {n, ceil_div(k, group_size)});
  if (zeros.defined()) check_tensor(op, "zeros", zeros, DType::f32, {n, ceil_div(k, group_size)});
  if (perm.defined()) check_tensor(op, "perm", perm, DType::i32, {k});
  Weight r(WeightFormat::int8_per_group, n, k);
  r.data_ = std::move(q);
  r.scales_ = std::move(scales);
  r.zeros_ = std::move(zeros);
  r.perm_ = std::move(perm);
  r.group_size_ = group_size;
  r.block_ = {1, group_size};
  return r;
}

Weight Weight::fp8_per_tensor(Tensor q, Tensor scale) {
  const char* op = "Weight::fp8_per_tensor";
  auto [n, k] = check_matrix(op, "q (e4m3 bytes)", q, DType::i8);
  check_stored(op, "scale", scale);
  LW_CHECK(scale.dtype() == DType::f32 && scale.dim() <= 1 && scale.numel() == 1,
           op << ": scale " << scale.describe() << " must be one f32 ([] or [1])");
  Weight r(WeightFormat::fp8_e4m3_per_tensor, n, k);
  r.data_ = std::move(q);
  r.scales_ = std::move(scale);
  return r;
}

Weight Weight::fp8_per_channel(Tensor q, Tensor scales) {
  const char* op = "Weight::fp8_per_channel";
  auto [n, k] = check_matrix(op, "q (e4m3 bytes)", q, DType::i8);
  check_tensor(op, "scales", scales, DType::f32, {n});
  Weight r(WeightFormat::fp8_e4m3_per_channel, n, k);
  r.data_ = std::move(q);
  r.scales_ = std::move(scales);
  return r;
}

Weight Weight::fp8_per_block(Tensor q, Tensor scales, WeightBlock block) {
  const char* op = "Weight::fp8_per_block";
  auto [n, k] = check_matrix(op, "q (e4m3 bytes)", q, DType::i8);
  LW_CHECK(block.rows > 0 && block.cols > 0,
           op << ": block " << block.rows << " x " << block.cols << " must have positive sides");
  check_tensor(op, "scales", scales, DType::f32, {ceil_div(n, block.rows), ceil_div(k, block.cols)});
  Weight r(WeightFormat::fp8_e4m3_per_block, n, k);
  r.data_ = std::move(q);
  r.scales_ = std::move(scales);
  r.block_ = block;
  return r;
}

Weight Weight::int4(int64_t n, int64_t k, Tensor tiles, Tensor scales, Tensor zeros, int64_t group_size, Tensor perm) {
  const char* op = "Weight::int4";
  LW_CHECK(n > 0 && k > 0 && group_size > 0,
           op << ": [N, K] = [" << n << ", " << k << "] and group_size " << group_size << " must be positive");
  const int64_t groups = ceil_div(k, group_size);
  check_stored(op, "tiles", tiles);
  const int64_t bytes = kernels::int4_tile_count(n, k) * kernels::kInt4TileBytes;
  LW_CHECK(tiles.dtype() == DType::i8 && tiles.numel() == bytes,
           op << ": tiles " << tiles.describe() << " must be i8 holding the " << bytes << " bytes of [" << n << ", " << k
              << "] in tiles of " << kernels::kInt4TileRows << " x " << kernels::kInt4TileCols);
  check_tensor(op, "scales", scales, DType::f32, {n, groups});
  check_tensor(op, "zeros", zeros, DType::i8, {n, groups});
  if (perm.defined()) check_tensor(op, "perm", perm, DType::i32, {k});
  Weight r(WeightFormat::int4, n, k);
  r.data_ = std::move(tiles);
  r.scales_ = std::move(scales);
  r.zeros_ = std::move(zeros);
  r.perm_ = std::move(perm);
  r.group_size_ = group_size;
  return r;
}

Weight Weight::gguf(WeightFormat format, int64_t n, int64_t k, Tensor blocks) {
  const char* op = "Weight::gguf";
  LW_CHECK(is_gguf_block_format(format), op << ": " << weight_format_name(format) << " is not a GGUF block format");
  const int64_t elems = gguf_block_elems(format);
  LW_CHECK(n > 0 && k > 0 && k % elems == 0,
           op << ": " << weight_format_name(format) << " [N, K] = [" << n << ", " << k
              << "] must be positive with K whole blocks of " << elems);
  check_stored(op, "blocks", blocks);
  const int64_t bytes = n * (k / elems) * gguf_block_bytes(format);
  LW_CHECK(blocks.dtype() == DType::i8 && blocks.numel() == bytes,
           op << ": blocks " << blocks.describe() << " must be i8 holding the " << bytes << " bytes of "
              << weight_format_name(format) << " [" << n << ", " << k << "]");
  Weight r(format, n, k);
  r.data_ = std::move(blocks);
  return r;
}

Weight Weight::gguf_mixed(std::vector<Weight> parts) {
  const char* op = "Weight::gguf_mixed";
  LW_CHECK(parts.size() >= 2, op << ": " << parts.size() << " parts (at least two)");
  int64_t n = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Weight& p = parts[i];
    LW_CHECK(p.defined() && is_gguf_block_format(p.format()),
             op << ": part " << i << " " << (p.defined() ? p.describe() : "undefined") << " is not GGUF blocks");
    LW_CHECK(p.in_features() == parts[0].in_features(),
             op << ": part " << i << " " << p.describe() << " has another K than part 0 " << parts[0].describe());
    n += p.out_features();
  }
  Weight r(WeightFormat::gguf_mixed, n, parts[0].in_features());
  r.parts_ = std::make_shared<const std::vector<Weight>>(std::move(parts));
  return r;
}

const std::vector<Weight>& Weight::parts() const {
  static const std::vector<Weight> none;
  return parts_ ? *parts_ : none;
}

std::optional<std::vector<int32_t>> act_order_columns(const int32_t* g_idx, int64_t k, int64_t group, int64_t groups,
                                                      const std::string& what) {
  bool ordered = true;
  for (int64_t c = 0; c < k; ++c) {
    LW_CHECK(g_idx[c] >= 0 && g_idx[c] < groups,
             what << "[" << c << "] = " << g_idx[c] << " is not a group of 0.." << groups - 1);
    ordered = ordered && g_idx[c] == c / group;
  }
  if (ordered) return std::vector<int32_t>();
  std::vector<int32_t> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return g_idx[a] < g_idx[b]; });
  for (int64_t j = 0; j < k; ++j)
    if (g_idx[order[static_cast<size_t>(j)]] != j / group) return std::nullopt;
  return order;
}

bool same_column_order(Context& ctx, const std::vector<Weight>& parts) {
  if (parts.empty()) return true;
  const Tensor& first = parts[0].perm();
  const Tensor first_host = first.defined() ? ctx.to_host(first) : Tensor();
  for (size_t i = 1; i < parts.size(); ++i) {
    const Tensor& p = parts[i].perm();
    if (p.defined() != first.defined() || (p.defined() && p.numel() != first.numel())) return false;
    if (!p.defined()) continue;
    const Tensor h = ctx.to_host(p);
    if (!std::equal(h.data<int32_t>(), h.data<int32_t>() + h.numel(), first_host.data<int32_t>())) return false;
  }
  return true;
}

size_t Weight::device_bytes() const {
  size_t bytes = 0;
  for (const Weight& p : parts()) bytes += p.device_bytes();
  for (const Tensor* t : {&data_, &scales_, &zeros_, &perm_})
    if (t->defined()) bytes += t->nbytes();
  return bytes;
}

std::string Weight::describe() const {
  std::ostringstream s;
  s << name() << " [" << n_ << ", " << k_ << "]";
  if (format_ == WeightFormat::dense && data_.defined()) s << " " << dtype_name(data_.dtype());
  if (group_size_ > 0) s << " group " << group_size_;
  for (size_t i = 0; i < parts().size(); ++i) s << (i == 0 ? " of " : ", ") << parts()[i].describe();
  return s.str();
}

namespace {

// An 8-bit Weight as the kernels read it.
kernels::ScaledMatrix scaled_matrix(const Weight& w) {
  const bool int8 = w.format() == WeightFormat::int8_per_channel || w.format() == WeightFormat::int8_per_group;
  return {w.data().data_ptr(),
          !int8,
          w.scales().data<float>(),
          w.format() == WeightFormat::fp8_e4m3_per_tensor ? kernels::ScaleLayout::tensor
          : w.format() == WeightFormat::fp8_e4m3_per_block || w.format() == WeightFormat::int8_per_group
              ? kernels::ScaleLayout::block
              : kernels::ScaleLayout::row,
          w.out_features(),
          w.in_features(),
          w.block().rows,
          w.block().cols,
          w.zeros().defined() ? w.zeros().data<float>() : nullptr,
          w.perm().defined() ? w.perm().data<int32_t>() : nullptr};
}

kernels::Int4Matrix int4_matrix(const Weight& w) {
  return {w.data().data_ptr(), w.scales().data<float>(), static_cast<const uint8_t*>(w.zeros().data_ptr()),
          w.out_features(), w.in_features(), w.group_size()};
}

// Whether the device runs the kernels on the matrix-fragment layer (matrix cores, or the
// emulator's): the fused int4 kernels and the Q4_K / Q5_K GEMV.
bool has_fragment_kernels(const gpu::DeviceCaps& caps) {
  return caps.emulator() || caps.matrix.mma_sync || caps.matrix.mfma || caps.matrix.wmma;
}

// Whether GGUF blocks of this format take the GEMV on the matrix-fragment layer (f16 and bf16
// x; the SIMT GEMV otherwise): where the device has the layer and the kernel the format, with
// the weights 16-byte aligned (`data`; null: device allocations, which are).
bool gguf_on_fragments(const gpu::DeviceCaps& caps, kernels::BlockFormat block, const void* data) {
  return has_fragment_kernels(caps) && kernels::gguf_mma_gemv_serves(block) && gpu::aligned_to(16, data);
}

}  // namespace

namespace {

// expand into out [N, K] (contiguous, a float dtype).
void expand_into(Context& ctx, const Weight& w, const Tensor& out) {
  const char* op = "expand";
  const DType dtype = out.dtype();
  if (w.format() == WeightFormat::gguf_mixed) {  // each part into its rows
    int64_t row = 0;
    for (const Weight& p : w.parts()) {
      expand_into(ctx, p, out.slice(0, row, row + p.out_features()));
      row += p.out_features();
    }
    return;
  }
  if (w.format() == WeightFormat::dense) {
    if (w.data().dtype() == dtype) copy(ctx, w.data(), out);
    else cast(ctx, w.data(), out);
    return;
  }
  if (is_scaled_8bit_format(w.format())) {
    const kernels::ScaledMatrix m = scaled_matrix(w);
    dispatch_float(dtype, op, [&]<class T>() {
      kernels::dequantize_scaled<T>(out.data<T>(), m, ctx.warp_size(), ctx.stream().get());
    });
    return;
  }
  if (w.format() == WeightFormat::int4) {
    const int32_t* perm = w.perm().defined() ? w.perm().data<int32_t>() : nullptr;
    dispatch_float(dtype, op, [&]<class T>() {
      kernels::int4_expand<T>(out.data<T>(), int4_matrix(w), perm, ctx.warp_size(), ctx.stream().get());
    });
    return;
  }
  const std::optional<BlockFormat> block = gguf_block(w.format());
  LW_CHECK(block.has_value(), op << ": weight " << w.describe() << ": this build cannot expand format " << w.name());
  dequantize(ctx, w.data().view({w.data().numel()}), *block, out);
}

}  // namespace

Tensor expand(Context& ctx, const Weight& w, DType dtype) {
  const char* op = "expand";
  LW_CHECK(w.defined(), op << ": the weight is undefined");
  LW_CHECK(is_float(dtype), op << ": dtype " << dtype_name(dtype) << " must be f32, f16 or bf16");
  Tensor out = ctx.empty({w.out_features(), w.in_features()}, dtype);
  expand_into(ctx, w, out);
  return out;
}

namespace {

// Says once per (weight format and shape, activation dtype) why FP8 does not run W8A8 there.
void log_w8a16(const Weight& w, DType x_dtype, const std::string& reason) {
  static std::mutex mu;
  static std::set<std::string> said;
  const std::string key = w.describe() + " " + dtype_name(x_dtype);
  std::lock_guard<std::mutex> lock(mu);
  if (!said.insert(key).second) return;
  lw::log().info("linear: {} with {} activations runs W8A16 (the 8-bit GEMV up to {} rows, else the weights expanded "
                 "and the dense GEMM): {}",
                 w.describe(), dtype_name(x_dtype), kGgufGemvMaxRows, reason);
}

// FP8 W8A8: x quantised to e4m3 per token (per-tensor and per-channel weights; both operands'
// scales are then vectors) or per 128 columns (128 x 128 block weights), then up to
// kFp8MmaGemvMaxRows rows the tensor-core GEMV (`mma_gemv`: the automatic choice) or else the
// vendor's scaled FP8 GEMM (the library's outer-vector or 1 x 128 / 128 x 128 block scaling),
// into x's dtype. Returns false, having written nothing, where neither takes the problem; the
// reason is logged once per weight shape.
bool fp8_gemm(Context& ctx, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out, int64_t rows,
              bool mma_gemv) {
  const int64_t n = w.out_features(), k = w.in_features();
  const bool block = w.format() == WeightFormat::fp8_e4m3_per_block;
  std::string refused;
  if (x.dtype() == DType::f32) refused = "f32 activations (FP8 products need f16 or bf16)";
  else if (k % 16 != 0) refused = "K not a multiple of 16";
  else if (!x.is_contiguous() || !out.is_contiguous()) refused = "x or out not contiguous";
  else if (!gpu::aligned_to(16, w.data().data_ptr())) refused = "weights not 16-byte aligned";
  else if (block && (w.block().rows != 128 || w.block().cols != 128))
    refused = "scale blocks of " + std::to_string(w.block().rows) + " x " + std::to_string(w.block().cols) +
              " (the FP8 kernels take 128 x 128)";
  if (!refused.empty()) {
    log_w8a16(w, x.dtype(), refused);
    return false;
  }
  const int64_t group = block ? 128 : k;
  Tensor ws = w.scales();
  if (w.format() == WeightFormat::fp8_e4m3_per_tensor) {
    ws = ctx.empty({n}, DType::f32);
    kernels::broadcast_scale(w.scales().data<float>(), ws.data<float>(), n, ctx.warp_size(), ctx.stream().get());
  }
  // Decode-sized batches: the tensor-core GEMV (no padding, the weights read once at a high
  // rate; cuBLASLt's GEMMs are tiled for large M: docs/PERFORMANCE.md "FP8 and INT8 GEMMs").
  if (mma_gemv && rows <= kernels::kFp8MmaGemvMaxRows && k % 128 == 0 && kernels::fp8_mma_gemv_available()) {
    Tensor xq = ctx.empty({rows, k}, DType::i8);
    Tensor xs = ctx.empty({k / group, rows}, DType::f32);
    quantize_fp8(ctx, x.view({rows, k}), group, xq, xs);
    const kernels::Fp8MmaGemvArgs args{xq.data_ptr(), xs.data<float>(), rows, w.data().data_ptr(), ws.data<float>(), block,
                                       rows, n, k};
    if (x.dtype() == DType::bf16)
      kernels::fp8_mma_gemv<bfloat16>(out.data<bfloat16>(), args, bias.defined() ? bias.data<bfloat16>() : nullptr,
                                      ctx.stream().get());
    else
      kernels::fp8_mma_gemv<half>(out.data<half>(), args, bias.defined() ? bias.data<half>() : nullptr, ctx.stream().get());
    return true;
  }
  // The library's block scale rows are read 16-byte aligned: K / 128 a multiple of 4.
  if (block && k % 512 != 0) {
    log_w8a16(w, x.dtype(), "block scales with K / 128 not a multiple of 4 (the library's alignment)");
    return false;
  }
  // The library's 1 x 128 activation scales need M a multiple of 4: padded with zero rows (zero
  // codes, zero scales), the product into a temporary of the padded rows.
  const int64_t padded = block ? (rows + 3) / 4 * 4 : rows;
  Tensor xq = ctx.empty({padded, k}, DType::i8);
  Tensor xs = ctx.empty({k / group, padded}, DType::f32);
  if (padded > rows) {
    LW_CUDA_CHECK(cudaMemsetAsync(static_cast<int8_t*>(xq.data_ptr()) + rows * k, 0, (padded - rows) * k, ctx.stream().get()));
    LW_CUDA_CHECK(cudaMemsetAsync(xs.data_ptr(), 0, xs.nbytes(), ctx.stream().get()));
  }
  quantize_fp8(ctx, x.view({rows, k}), group, xq.slice(0, 0, rows), xs);
  const Tensor result = padded > rows ? ctx.empty({padded, n}, out.dtype()) : out;
  detail::VendorGemm g;
  g.in = DType::i8;
  g.fp8 = true;
  g.out = x.dtype();
  g.m = padded, g.n = n, g.k = k;
  g.a = xq.data_ptr(), g.lda = k;
  g.b = w.data().data_ptr(), g.ldb = k;
  g.c = result.data_ptr(), g.ldc = n;
  g.bias = bias.defined() ? bias.data_ptr() : nullptr;
  g.a_scale = xs.data<float>();
  g.a_scale_layout = block ? detail::OperandScale::vec128 : detail::OperandScale::outer;
  g.b_scale = ws.data<float>();
  g.b_scale_layout = block ? detail::OperandScale::blk128 : detail::OperandScale::outer;
  if (detail::vendor_gemm(ctx, g)) {
    if (padded > rows)
      LW_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), result.data_ptr(), rows * n * dtype_size(out.dtype()),
                                    cudaMemcpyDeviceToDevice, ctx.stream().get()));
    return true;
  }
  log_w8a16(w, x.dtype(), std::string(detail::vendor_gemm_name()) + " has no FP8 GEMM for this problem (M = " +
                              std::to_string(rows) + ")");
  return false;
}

// x [rows, K] (contiguous) with its columns in a weight's stored order: column k' of the result
// is x's column perm[k'].
Tensor gather_columns(Context& ctx, const Tensor& x, const Tensor& perm) {
  const int64_t rows = x.size(0), k = x.size(1);
  Tensor gathered = ctx.empty({rows, k}, x.dtype());
  dispatch_float(x.dtype(), "linear", [&]<class T>() {
    kernels::gather_columns<T>(gathered.data<T>(), x.data<T>(), perm.data<int32_t>(), rows, k, k, ctx.stream().get());
  });
  return gathered;
}

int64_t leading_rows(const Tensor& x) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return rows;
}

// The path of a linear over `rows` rows of x and w.
Selection<GemmPath> select_linear(const Context& ctx, int64_t rows, const Weight& w, GemmPath path) {
  const GemmShape shape{GemmOp::linear, rows, w.out_features(), w.in_features(), 1, ctx.deterministic()};
  return select<GemmPaths>(ctx.caps(), shape, path);
}

// Whether GGUF blocks `w` take the GEMV on the matrix-fragment layer for x of `x_dtype`, and the
// most rows an automatic linear runs on their GEMV.
bool gguf_fragments(const Context& ctx, const Weight& w, DType x_dtype) {
  return x_dtype != DType::f32 && gguf_on_fragments(ctx.caps(), *gguf_block(w.format()), w.data().data_ptr());
}
int64_t gguf_gemv_max_rows(const Context& ctx, const Weight& w, DType x_dtype) {
  if (!gguf_fragments(ctx, w, x_dtype)) return kGgufGemvMaxRows;
  const bool narrow = w.format() == WeightFormat::gguf_q4_0 || w.format() == WeightFormat::gguf_q5_0 ||
                      w.format() == WeightFormat::gguf_q8_0;
  return narrow ? kGgufMmaGemvMaxRowsNarrowLoads : kGgufMmaGemvMaxRows;
}

// x as the fused GEMVs (kernels/quant/gguf_gemv.h, gguf_mma_gemv.h) read it, in whole vectors: a
// contiguous x (rows K apart, K a multiple of 16) that starts off a vector boundary (a view at
// an odd element offset) is copied to one that does not.
Tensor gemv_input(Context& ctx, const Tensor& x) {
  return gpu::aligned_to(gpu::kVectorBytes, x.data_ptr()) ? x : contiguous(ctx, x);
}

// The GEMV over GGUF blocks w of rows of x (K apart, vector-aligned: gemv_input) into y (rows ldy
// apart).
template <class T>
void gguf_gemv_rows(Context& ctx, const T* x, const Weight& w, const T* bias, T* y, int64_t rows, int64_t ldy) {
  const kernels::BlockFormat block = *gguf_block(w.format());
  const int64_t n = w.out_features(), k = w.in_features();
  if constexpr (!std::is_same_v<T, float>) {
    if (gguf_fragments(ctx, w, dtype_of<T>)) {
      kernels::gguf_mma_gemv<T>(y, x, w.data().data_ptr(), block, bias, rows, n, k, k, ldy, ctx.caps().multiprocessors,
                                ctx.stream().get());
      return;
    }
  }
  kernels::gguf_gemv<T>(y, x, w.data().data_ptr(), block, bias, rows, n, k, k, ldy, ctx.warp_size(),
                        ctx.stream().get());
}

// GGUF blocks, FP8 and int8 with group scales: the fused GEMV for decode-sized batches, else the
// weights expanded to x's dtype and the dense linear. Deterministic mode takes the expansion for
// every M (one summation order, the dense path's batch-invariant one). 8-bit rows of a length not
// a multiple of 16 (no 16-byte runs) always take the expansion.
void linear_decoded(Context& ctx, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out, GemmPath path) {
  const char* op = "linear";
  const int64_t n = w.out_features(), k = w.in_features(), rows = leading_rows(x);
  const Selection<GemmPath> sel = select_linear(ctx, rows, w, path);
  const bool gguf = is_gguf_block_format(w.format());
  const bool fp8 = w.format() == WeightFormat::fp8_e4m3_per_tensor || w.format() == WeightFormat::fp8_e4m3_per_channel ||
                   w.format() == WeightFormat::fp8_e4m3_per_block;
  // FP8 on FP8 tensor cores: W8A8 at every M (the tensor-core GEMV and cuBLASLt both beat the
  // W8A16 GEMV from one row: H200, docs/PERFORMANCE.md "FP8 and INT8 GEMMs"), unless another
  // path is forced (the forced vendor path is the library's GEMM alone) or the mode is
  // deterministic.
  const bool vendor = sel.forced() ? sel.path == GemmPath::vendor : !ctx.deterministic();
  if (fp8 && vendor && has_fp8_gemm(ctx.caps()) && rows > 0 && fp8_gemm(ctx, x, w, bias, out, rows, !sel.forced()))
    return;
  const bool runs = gguf || (k % 16 == 0 && gpu::aligned_to(gpu::kVectorBytes, w.data().data_ptr()));
  const int64_t most_rows = gguf ? gguf_gemv_max_rows(ctx, w, x.dtype()) : kGgufGemvMaxRows;
  const bool fused = runs && (sel.forced() ? sel.path == GemmPath::gemv : !ctx.deterministic() && rows <= most_rows);
  if (!fused) {
    linear(ctx, x, expand(ctx, w, x.dtype()), bias, out, sel.forced() ? sel.path : GemmPath::automatic);
    return;
  }
  check_float_input(op, "x", x);
  check_same_dtype(op, "x", x, "out", out);
  LW_CHECK(x.is_contiguous() && out.is_contiguous(), op << ": x " << x.describe() << " and out " << out.describe()
                                                        << " must be contiguous");
  const Tensor xg = w.perm().defined() ? gather_columns(ctx, x.view({rows, k}), w.perm()) : x;
  const Tensor xs = gemv_input(ctx, xg);
  dispatch_float(x.dtype(), op, [&]<class T>() {
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    if (gguf) {
      gguf_gemv_rows<T>(ctx, xs.data<T>(), w, b, out.data<T>(), rows, n);
    } else {
      kernels::ScaledMatrix m = scaled_matrix(w);
      m.col_perm = nullptr;  // x's columns are gathered
      kernels::scaled_gemv<T>(out.data<T>(), xs.data<T>(), m, b, rows, k, n, ctx.warp_size(), ctx.stream().get());
    }
  });
}

// GGUF blocks of several formats stacked by rows: up to the fewest rows any part's GEMV takes,
// each part's GEMV into its columns of out (a row of x gives what each part alone gives); else,
// or in deterministic mode, the whole matrix expanded and the dense linear.
void linear_gguf_mixed(Context& ctx, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out,
                       GemmPath path) {
  const char* op = "linear";
  const int64_t n = w.out_features(), rows = leading_rows(x);
  const Selection<GemmPath> sel = select_linear(ctx, rows, w, path);
  int64_t most_rows = kGgufMmaGemvMaxRows;
  for (const Weight& p : w.parts()) most_rows = std::min(most_rows, gguf_gemv_max_rows(ctx, p, x.dtype()));
  const bool fused = sel.forced() ? sel.path == GemmPath::gemv : !ctx.deterministic() && rows <= most_rows;
  if (!fused) {
    linear(ctx, x, expand(ctx, w, x.dtype()), bias, out, sel.forced() ? sel.path : GemmPath::automatic);
    return;
  }
  check_float_input(op, "x", x);
  check_same_dtype(op, "x", x, "out", out);
  LW_CHECK(x.is_contiguous() && out.is_contiguous(),
           op << ": x " << x.describe() << " and out " << out.describe() << " must be contiguous");
  const Tensor xs = gemv_input(ctx, x);
  dispatch_float(x.dtype(), op, [&]<class T>() {
    int64_t col = 0;
    for (const Weight& p : w.parts()) {
      const T* b = bias.defined() ? bias.data<T>() + col : nullptr;
      gguf_gemv_rows<T>(ctx, xs.data<T>(), p, b, out.data<T>() + col, rows, n);
      col += p.out_features();
    }
  });
}

// How linear_int4 runs rows of x: the fused kernel on the matrix-fragment layer for
// decode-sized batches of f16 or bf16 rows where the device has matrix cores (the emulator runs
// the layer too), else the weights expanded to x's dtype and the dense linear (deterministic mode
// always: one summation order, the dense path's batch-invariant one).
struct Int4Plan {
  bool fused = false;
  int splits = 1;
  bool perm_in_kernel = false;  // act order: x's columns gathered by the streamed kernel
  bool streamed = false;        // the streamed kernel serves the rows in one pass
  bool hopper = false;          // the Hopper kernel (wgmma) may take passes the streamed one does not serve
  Selection<GemmPath> sel;
};

// Whether int4 rows the streamed kernel does not serve may go to the Hopper kernel: a build and
// a device with it, unless LW_INT4_HOPPER=0 (the ring kernel then, as on other devices).
bool int4_hopper_enabled(const gpu::DeviceCaps& caps) {
  static const bool allowed = [] {
    const char* v = std::getenv("LW_INT4_HOPPER");
    return v == nullptr || std::string(v) != "0";
  }();
  return kernels::kInt4HopperBuilt && caps.matrix.wgmma && allowed;
}

// Whether a pass of `count` rows of x takes the Hopper kernel where it may: at 9-16 and 33-64
// rows, where it is faster (H100, docs/PERFORMANCE.md "4-bit weights on Hopper, pipelined"). Not
// at 17-32, where the ring kernel's blocks of 4 warps over 4 row tiles each beat it on the large
// matrices (3-8% at 14336 x 4096, 28672 x 4096 and 4096 x 14336), nor at 1-8 (the streamed
// kernel, or the ring kernel's narrow form where a split's x does not fit the streamed one: not
// timed against it).
bool int4_hopper_takes(int64_t count) { return (count > 8 && count <= 16) || count > 32; }

Int4Plan plan_int4(Context& ctx, const Tensor& x, const Weight& w, const Tensor& out, int64_t rows, GemmPath path) {
  const int64_t n = w.out_features(), k = w.in_features();
  const GemmShape shape{GemmOp::linear, rows, n, k, 1, ctx.deterministic()};
  Int4Plan p{.sel = select<GemmPaths>(ctx.caps(), shape, path)};
  const gpu::DeviceCaps& caps = ctx.caps();
  const kernels::Int4Matrix m = int4_matrix(w);
  const bool runs = x.dtype() != DType::f32 && kernels::int4_gemm_supports(m) && k % 8 == 0 && x.is_contiguous() &&
                    out.is_contiguous() && gpu::aligned_to(4, x.data_ptr()) && has_fragment_kernels(caps);
  p.fused = runs && (p.sel.forced() ? p.sel.path == GemmPath::gemv : !ctx.deterministic() && rows <= kInt4FusedMaxRows);
  if (!p.fused) return p;
  p.splits = kernels::int4_gemm_splits(m, caps.multiprocessors);
  p.streamed = rows <= kernels::kInt4GemmMaxRows && kernels::int4_gemv_serves(m, rows, p.splits);
  // Act order: at up to kInt4GatherInKernelRows rows the streamed kernel gathers x's columns as it
  // stages them (no launch for a copy); more rows are gathered into a copy first, since every
  // block repeats the gather's scattered loads: on the H100 the kernel's gather saved
  // 3-4 us at 1 row, and cost up to 4 us at 8 rows of 14336 x 4096 against the copy.
  constexpr int64_t kInt4GatherInKernelRows = 4;
  p.perm_in_kernel = w.perm().defined() && rows <= kInt4GatherInKernelRows && p.streamed;
  p.hopper = !p.streamed && int4_hopper_enabled(caps) && kernels::int4_hopper_serves(m);
  return p;
}

// Whether the plan's kernel takes a gated x: the streamed kernel, with any permutation gathered in it.
bool gate_in_kernel(const Weight& w, const Int4Plan& plan) {
  return plan.fused && plan.streamed && (!w.perm().defined() || plan.perm_in_kernel);
}

// gate: x's rows are gate/up pairs of 2K elements, multiplied as their gated product by the
// streamed kernel (gate_in_kernel).
void linear_int4(Context& ctx, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out, int64_t rows,
                 const Int4Plan& plan, kernels::Int4Gate gate = {}) {
  LW_CHECK(!gate.on || gate_in_kernel(w, plan),
           "gated_linear: the int4 kernels take a gated x only on the streamed kernel (" << rows << " rows of x)");
  const int64_t n = w.out_features(), k = w.in_features(), ldx = gate.on ? 2 * k : k;
  if (!plan.fused) {
    linear(ctx, x, expand(ctx, w, x.dtype()), bias, out, plan.sel.forced() ? plan.sel.path : GemmPath::automatic);
    return;
  }
  const kernels::Int4Matrix m = int4_matrix(w);
  const int splits = plan.splits;
  const Tensor xs =
      w.perm().defined() && !plan.perm_in_kernel ? gather_columns(ctx, x.view({rows, k}), w.perm()) : x.view({rows, ldx});
  const int32_t* x_perm = plan.perm_in_kernel ? w.perm().data<int32_t>() : nullptr;
  Tensor workspace = splits > 1 ? ctx.empty({splits * std::min(rows, kernels::kInt4GemmMaxRows) * n}, DType::f32) : Tensor();
  // The splits are added by their last block up to 4 rows of x (each thread's elements one after
  // another, as fast as the second launch at one row); more rows take the second launch,
  // whose many blocks add them faster (the last block's passes made 64 rows 28% slower).
  constexpr int64_t kInt4LastBlockRows = 4;
  int32_t* counters = splits > 1 && rows <= kInt4LastBlockRows
                          ? ctx.resource<LaunchCounters>().get(kernels::int4_gemm_counters(m, rows))
                          : nullptr;
  Tensor ys = out.view({rows, n});
  for (int64_t r0 = 0; r0 < rows; r0 += kernels::kInt4GemmMaxRows) {
    const int64_t count = std::min(rows - r0, kernels::kInt4GemmMaxRows);
    const bool hopper = plan.hopper && int4_hopper_takes(count);
    auto run = [&]<class T>() {
      kernels::int4_gemm<T>(ys.data<T>() + r0 * n, xs.data<T>() + r0 * ldx, m, bias.defined() ? bias.data<T>() : nullptr,
                            count, ldx, n, splits, splits > 1 ? workspace.data<float>() : nullptr, counters,
                            ctx.warp_size(), ctx.stream().get(),
                            hopper ? kernels::Int4GemmKernel::hopper : kernels::Int4GemmKernel::automatic, x_perm, gate);
    };
    if (x.dtype() == DType::bf16) run.operator()<bfloat16>();
    else run.operator()<half>();
  }
}

// x ([..., x_cols]), out and bias against the weight, for linear and gated_linear.
void check_linear_args(const char* op, const Tensor& x, int64_t x_cols, const Weight& w, const Tensor& bias, const Tensor& out) {
  check_float_input(op, "x", x);
  check_float_input(op, "out", out);
  check_same_dtype(op, "x", x, "out", out);
  const int64_t n = w.out_features();
  const int64_t k = w.in_features();
  LW_CHECK(x.dim() >= 1 && x.size(-1) == x_cols,
           op << ": x " << x.describe() << " must end in " << (x_cols == k ? "" : "2 x ") << "in_features " << k
              << " of the weight " << w.describe() << (x_cols == k ? "" : " (gate and up)"));
  std::vector<int64_t> want = x.shape();
  want.back() = n;
  LW_CHECK(out.shape() == want, op << ": out " << out.describe() << " must be " << shape_str(want));
  if (bias.defined()) {
    check_float_input(op, "bias", bias);
    check_same_dtype(op, "x", x, "bias", bias);
    LW_CHECK(bias.is_contiguous() && bias.shape() == std::vector<int64_t>({n}),
             op << ": bias " << bias.describe() << " must be contiguous [" << n << "]");
  }
}

}  // namespace

void linear(Context& ctx, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out, GemmPath path) {
  const char* op = "linear";
  LW_CHECK(w.defined(), op << ": the weight is undefined");
  if (w.format() == WeightFormat::dense) {
    linear(ctx, x, w.data(), bias, out, path);
    return;
  }
  const int64_t n = w.out_features(), k = w.in_features();
  check_linear_args(op, x, k, w, bias, out);
  if (w.format() == WeightFormat::int4) {
    const int64_t rows = leading_rows(x);
    linear_int4(ctx, x, w, bias, out, rows, plan_int4(ctx, x, w, out, rows, path));
    return;
  }
  if (w.format() == WeightFormat::gguf_mixed) {
    linear_gguf_mixed(ctx, x, w, bias, out, path);
    return;
  }
  if (w.format() != WeightFormat::int8_per_channel) {
    linear_decoded(ctx, x, w, bias, out, path);
    return;
  }

  // int8 per channel (W8A8): x quantised per token, the int8 GEMM with both scales.
  const int64_t rows = leading_rows(x);
  Tensor xq = ctx.empty({rows, k}, DType::i8);
  Tensor x_scale = ctx.empty({rows}, DType::f32);
  if (rows > 0) quantize_per_token(ctx, x.view({rows, k}), xq, x_scale);
  linear_int8(ctx, xq, x_scale, w.data(), w.scales(), bias, out.view({rows, n}), path);
}

void gated_linear(Context& ctx, Activation act, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out,
                  GemmPath path) {
  const char* op = "gated_linear";
  LW_CHECK(w.defined(), op << ": the weight is undefined");
  const int64_t k = w.in_features();
  LW_CHECK(x.dim() >= 1 && x.size(-1) == 2 * k,
           op << ": x " << x.describe() << " must end in 2 x in_features " << k << " of the weight " << w.describe()
              << " (gate and up)");
  check_linear_args(op, x, 2 * k, w, bias, out);
  if (w.format() == WeightFormat::int4) {
    const int64_t rows = leading_rows(x);
    const Int4Plan plan = plan_int4(ctx, x, w, out, rows, path);
    if (gate_in_kernel(w, plan)) {
      linear_int4(ctx, x, w, bias, out, rows, plan, kernels::Int4Gate{true, act});
      return;
    }
  }
  std::vector<int64_t> shape = x.shape();
  shape.back() = k;
  Tensor product = ctx.empty(shape, x.dtype());
  act_mul(ctx, act, x, product);
  linear(ctx, product, w, bias, out, path);
}

bool gated_linear_fuses(Context& ctx, const Tensor& x, const Weight& w, const Tensor& out, GemmPath path) {
  if (!w.defined() || w.format() != WeightFormat::int4 || x.dim() < 1 || x.size(-1) != 2 * w.in_features()) return false;
  return gate_in_kernel(w, plan_int4(ctx, x, w, out, leading_rows(x), path));
}

void grouped_linear(Context& ctx, const Tensor& x, const std::vector<Weight>& weights, std::span<const int32_t> offsets,
                    const Tensor& out, GemmPath path) {
  const char* op = "grouped_linear";
  const int64_t e = static_cast<int64_t>(weights.size());
  LW_CHECK(e > 0, op << ": no weights");
  for (int64_t i = 0; i < e; ++i)
    LW_CHECK(weights[static_cast<size_t>(i)].defined(), op << ": the weight of group " << i << " is undefined");
  const int64_t n = weights[0].out_features(), k = weights[0].in_features();
  for (const Weight& w : weights)
    LW_CHECK(w.out_features() == n && w.in_features() == k,
             op << ": the groups' weights differ in shape: " << w.describe() << " and " << weights[0].describe());
  LW_CHECK(x.dim() == 2 && x.size(1) == k, op << ": x " << x.describe() << " must be [T, " << k << "]");
  const int64_t t = x.size(0);
  LW_CHECK(out.shape() == std::vector<int64_t>({t, n}), op << ": out " << out.describe() << " must be " << shape_str({t, n}));
  LW_CHECK(static_cast<int64_t>(offsets.size()) == e + 1,
           op << ": " << offsets.size() << " offsets for " << e << " groups; expected " << e + 1);
  LW_CHECK(offsets.front() == 0 && offsets.back() == t,
           op << ": offsets must run from 0 to T = " << t << "; got " << offsets.front() << " .. " << offsets.back());
  for (int64_t i = 0; i < e; ++i) {
    const int64_t begin = offsets[static_cast<size_t>(i)], end = offsets[static_cast<size_t>(i) + 1];
    LW_CHECK(begin <= end, op << ": offsets decrease at group " << i << " (" << begin << " > " << end << ")");
    if (begin < end)
      linear(ctx, x.slice(0, begin, end), weights[static_cast<size_t>(i)], Tensor(), out.slice(0, begin, end), path);
  }
}

ExpertWeights::ExpertWeights(Context& ctx, std::vector<Weight> weights) : weights_(std::move(weights)) {
  if (weights_.empty()) return;
  const Weight& first = weights_[0];
  auto same_blocks = [&](const Weight& w) {
    return w.defined() && w.format() == first.format() && w.out_features() == first.out_features() &&
           w.in_features() == first.in_features();
  };
  if (first.defined() && gguf_block(first.format()) && std::all_of(weights_.begin(), weights_.end(), same_blocks)) {
    Tensor table = Tensor::empty_host({static_cast<int64_t>(weights_.size() * sizeof(const void*))}, DType::i8);
    for (size_t i = 0; i < weights_.size(); ++i) {
      const void* p = weights_[i].data().data_ptr();
      std::memcpy(static_cast<char*>(table.data_ptr()) + i * sizeof(p), &p, sizeof(p));
    }
    block_table_ = ctx.to_device(table);
    return;
  }
  for (const Weight& w : weights_)
    if (!w.defined() || w.format() != WeightFormat::int4 || w.perm().defined() || w.group_size() != first.group_size() ||
        w.out_features() != first.out_features() || w.in_features() != first.in_features())
      return;
  const int64_t bytes = static_cast<int64_t>(weights_.size() * sizeof(kernels::Int4Matrix));
  Tensor table = Tensor::empty_host({bytes}, DType::i8);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const kernels::Int4Matrix m = int4_matrix(weights_[i]);
    std::memcpy(static_cast<char*>(table.data_ptr()) + i * sizeof(m), &m, sizeof(m));
  }
  int4_table_ = ctx.to_device(table);
}

std::span<const int32_t> ExpertRows::host(Context& ctx) {
  if (!host_.defined()) host_ = ctx.to_host(device_);
  return {host_.data<int32_t>(), static_cast<size_t>(host_.numel())};
}

void grouped_linear(Context& ctx, const Tensor& x, const ExpertWeights& experts, ExpertRows& rows, const Tensor& out,
                    GemmPath path) {
  const char* op = "grouped_linear";
  LW_CHECK(!experts.empty(), op << ": no weights");
  const Tensor& offsets = rows.device();
  const int64_t e = static_cast<int64_t>(experts.size());
  check_on_device(op, "offsets", offsets);
  LW_CHECK(offsets.dtype() == DType::i32 && offsets.dim() == 1 && offsets.size(0) == e + 1 && offsets.is_contiguous(),
           op << ": offsets " << offsets.describe() << " must be contiguous i32 [" << e + 1 << "]");
  const Tensor& table = experts.int4_table();
  const Weight& w0 = experts.weights()[0];
  const int64_t n = w0.out_features(), k = w0.in_features();
  const bool half_x = x.dtype() == DType::bf16 || x.dtype() == DType::f16;
  if (table.defined() && half_x && !ctx.deterministic() && has_fragment_kernels(ctx.caps()) && x.dim() == 2 &&
      x.size(1) == k && x.is_contiguous() && gpu::aligned_to(4, x.data_ptr()) && out.dtype() == x.dtype() &&
      out.is_contiguous() && out.shape() == std::vector<int64_t>({x.size(0), n}) && e <= 65535 &&
      (path == GemmPath::gemv ||
       (path == GemmPath::automatic &&
        x.size(0) <= (n * k < kInt4GroupedSmallExpert ? kInt4GroupedSmallMaxRowsPerExpert : kInt4GroupedMaxRowsPerExpert) * e))) {
    const int64_t t = x.size(0);
    const kernels::Int4Matrix shape = int4_matrix(w0);
    // The planned splits, or more where x's columns of a split (8 rows a pass) exceed the shared
    // memory (a long K at few experts with rows).
    const int tiles_k = static_cast<int>((k + kernels::kInt4TileCols - 1) / kernels::kInt4TileCols);
    int splits = kernels::int4_gemm_splits(shape, ctx.caps().multiprocessors, std::min(t, e));
    while (splits < tiles_k && !kernels::int4_grouped_gemv_serves(shape, splits)) ++splits;
    splits = (tiles_k + (tiles_k + splits - 1) / splits - 1) / ((tiles_k + splits - 1) / splits);  // none without tiles
    if (kernels::int4_grouped_gemv_serves(shape, splits)) {
      Tensor workspace = splits > 1 ? ctx.empty({splits * t * n}, DType::f32) : Tensor();
      const auto* matrices = static_cast<const kernels::Int4Matrix*>(table.data_ptr());
      auto run = [&]<class T>() {
        kernels::int4_grouped_gemv<T>(out.data<T>(), x.data<T>(), shape, matrices, e, offsets.data<int32_t>(), t, splits,
                                      splits > 1 ? workspace.data<float>() : nullptr, ctx.warp_size(), ctx.stream().get());
      };
      if (x.dtype() == DType::bf16) run.operator()<bfloat16>();
      else run.operator()<half>();
      return;
    }
  }
  const Tensor& blocks = experts.block_table();
  if (blocks.defined() && !ctx.deterministic() && x.dim() == 2 && x.size(1) == k && x.is_contiguous() &&
      out.dtype() == x.dtype() && out.is_contiguous() && out.shape() == std::vector<int64_t>({x.size(0), n}) && e <= 65535 &&
      x.size(0) <= std::min(kernels::kGgufGroupedMaxRows, kGgufGemvMaxRows * e) &&
      (path == GemmPath::gemv || path == GemmPath::automatic)) {
    check_float_input(op, "x", x);
    const auto* table = static_cast<const void* const*>(blocks.data_ptr());
    const kernels::BlockFormat block = *gguf_block(w0.format());
    const bool aligned = std::all_of(experts.weights().begin(), experts.weights().end(),
                                     [](const Weight& ew) { return gpu::aligned_to(16, ew.data().data_ptr()); });
    const Tensor xs = gemv_input(ctx, x);
    dispatch_float(x.dtype(), op, [&]<class T>() {
      if constexpr (!std::is_same_v<T, float>) {
        if (aligned && gguf_on_fragments(ctx.caps(), block, nullptr)) {
          kernels::gguf_mma_grouped_gemv<T>(out.data<T>(), xs.data<T>(), table, e, block, offsets.data<int32_t>(),
                                            x.size(0), n, k, ctx.caps().multiprocessors, ctx.stream().get());
          return;
        }
      }
      kernels::gguf_grouped_gemv<T>(out.data<T>(), xs.data<T>(), table, e, block, offsets.data<int32_t>(), x.size(0), n,
                                    k, ctx.warp_size(), ctx.stream().get());
    });
    return;
  }
  grouped_linear(ctx, x, experts.weights(), rows.host(ctx), out, path);
}

}  // namespace lw::ops
