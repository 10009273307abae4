#include "weights/load.h"

#include <cstring>
#include <optional>
#include <vector>

#include "gpu/runtime.h"
#include "ops/quant.h"

namespace lw::weights {

namespace {

DType plain_dtype(FileDType t) {
  switch (t) {
    case FileDType::f32: return DType::f32;
    case FileDType::f16: return DType::f16;
    case FileDType::bf16: return DType::bf16;
    case FileDType::i8: return DType::i8;
    case FileDType::i32: return DType::i32;
    case FileDType::i64: return DType::i64;
    default: return DType::f32;
  }
}

bool is_integer(FileDType t) { return t == FileDType::i8 || t == FileDType::i32 || t == FileDType::i64; }

void check_bytes(const TensorRecord& rec) {
  const size_t want = file_dtype_bytes(rec.dtype, rec.numel());
  LW_CHECK(rec.bytes == want && (rec.data != nullptr || want == 0),
           "tensor '" << rec.name << "' in '" << rec.file << "' of type " << rec.type_name << " and shape "
                      << shape_str(rec.shape) << " needs " << want << " bytes but has " << rec.bytes);
}

}  // namespace

std::optional<ops::BlockFormat> block_format(FileDType t) {
  switch (t) {
    case FileDType::f32: return ops::BlockFormat::f32;
    case FileDType::f16: return ops::BlockFormat::f16;
    case FileDType::bf16: return ops::BlockFormat::bf16;
    case FileDType::q8_0: return ops::BlockFormat::q8_0;
    case FileDType::q4_0: return ops::BlockFormat::q4_0;
    case FileDType::q4_1: return ops::BlockFormat::q4_1;
    case FileDType::q5_0: return ops::BlockFormat::q5_0;
    case FileDType::q5_1: return ops::BlockFormat::q5_1;
    case FileDType::q2_k: return ops::BlockFormat::q2_k;
    case FileDType::q3_k: return ops::BlockFormat::q3_k;
    case FileDType::q4_k: return ops::BlockFormat::q4_k;
    case FileDType::q5_k: return ops::BlockFormat::q5_k;
    case FileDType::q6_k: return ops::BlockFormat::q6_k;
    case FileDType::i8:
    case FileDType::i32:
    case FileDType::i64:
    case FileDType::f8_e4m3:
    case FileDType::unsupported: return std::nullopt;
  }
  return std::nullopt;
}

Tensor load_raw(Context& ctx, const TensorRecord& rec, int64_t r0, int64_t r1, int64_t b0, int64_t b1) {
  LW_CHECK(rec.dtype != FileDType::unsupported,
           "tensor '" << rec.name << "' in '" << rec.file << "' has type " << rec.type_name << ", which cannot be loaded");
  check_bytes(rec);
  LW_CHECK(rec.shape.size() == 2 && rec.shape[1] % file_dtype_block_elems(rec.dtype) == 0,
           "load_raw: tensor '" << rec.name << "' " << shape_str(rec.shape) << " of " << rec.type_name
                                << " is not a matrix of whole rows of blocks");
  const int64_t rows = rec.shape[0], row_bytes = rows == 0 ? 0 : static_cast<int64_t>(rec.bytes) / rows;
  LW_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows && 0 <= b0 && b0 <= b1 && b1 <= row_bytes,
           "load_raw: rows [" << r0 << ", " << r1 << ") and bytes [" << b0 << ", " << b1 << ") of tensor '" << rec.name
                              << "' of " << rows << " rows of " << row_bytes << " bytes");
  const int64_t width = b1 - b0;
  Tensor out = ctx.empty({r1 - r0, width}, DType::i8);
  if (out.numel() == 0) return out;
  cudaStream_t stream = ctx.stream().get();
  std::vector<std::byte> gathered;
  const std::byte* src = rec.data + r0 * row_bytes;
  if (width != row_bytes) {  // a column slice: gathered row by row on the host, copied once
    gathered.resize(static_cast<size_t>(out.numel()));
    for (int64_t r = r0; r < r1; ++r)
      std::memcpy(gathered.data() + (r - r0) * width, rec.data + r * row_bytes + b0, static_cast<size_t>(width));
    src = gathered.data();
  }
  LW_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), src, out.nbytes(), cudaMemcpyHostToDevice, stream));
  // The source may be pageable memory the caller unmaps next: finish before returning.
  LW_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

Tensor load_tensor(Context& ctx, const TensorRecord& rec, DType compute) {
  LW_CHECK(rec.dtype != FileDType::unsupported,
           "tensor '" << rec.name << "' in '" << rec.file << "' has type " << rec.type_name
                      << ", which cannot be loaded; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, I8, I32, I64");
  LW_CHECK(rec.dtype != FileDType::f8_e4m3,
           "tensor '" << rec.name << "' in '" << rec.file << "' is F8_E4M3: FP8 values mean nothing without their scales, "
                                                             "and only projection matrices with a weight_scale or "
                                                             "weight_scale_inv tensor load as FP8");
  LW_CHECK(compute == DType::f32 || compute == DType::f16 || compute == DType::bf16,
           "load_tensor: compute dtype " << dtype_name(compute) << " for tensor '" << rec.name
                                         << "' must be f32, f16 or bf16");
  check_bytes(rec);
  const size_t want = rec.bytes;
  cudaStream_t stream = ctx.stream().get();

  const DType stored = plain_dtype(rec.dtype);
  const bool as_is = is_integer(rec.dtype) || ((rec.dtype == FileDType::f32 || rec.dtype == FileDType::f16 ||
                                                rec.dtype == FileDType::bf16) && stored == compute);
  Tensor out = ctx.empty(rec.shape, as_is ? stored : compute);
  if (want == 0) return out;
  if (as_is) {
    LW_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), rec.data, want, cudaMemcpyHostToDevice, stream));
    // The source may be pageable memory the caller unmaps next: finish before returning.
    LW_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }
  Tensor raw = ctx.empty({static_cast<int64_t>(want)}, DType::i8);
  LW_CUDA_CHECK(cudaMemcpyAsync(raw.data_ptr(), rec.data, want, cudaMemcpyHostToDevice, stream));
  LW_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::optional<ops::BlockFormat> format = block_format(rec.dtype);
  LW_CHECK(format.has_value(), "tensor '" << rec.name << "' in '" << rec.file << "': no device conversion from "
                                          << file_dtype_name(rec.dtype) << " to " << dtype_name(compute));
  ops::dequantize(ctx, raw, *format, out);
  return out;
}

}  // namespace lw::weights
