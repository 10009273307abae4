#include "weights/load.h"

#include <optional>

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

// The device format a file type expands from; none for the integer and unsupported types.
std::optional<ops::BlockFormat> block_format(FileDType t) {
  switch (t) {
    case FileDType::f32: return ops::BlockFormat::f32;
    case FileDType::f16: return ops::BlockFormat::f16;
    case FileDType::bf16: return ops::BlockFormat::bf16;
    case FileDType::q8_0: return ops::BlockFormat::q8_0;
    case FileDType::q4_0: return ops::BlockFormat::q4_0;
    case FileDType::q4_1: return ops::BlockFormat::q4_1;
    case FileDType::i8:
    case FileDType::i32:
    case FileDType::i64:
    case FileDType::unsupported: return std::nullopt;
  }
  return std::nullopt;
}

bool is_integer(FileDType t) { return t == FileDType::i8 || t == FileDType::i32 || t == FileDType::i64; }

}  // namespace

Tensor load_tensor(Context& ctx, const TensorRecord& rec, DType compute) {
  LW_CHECK(rec.dtype != FileDType::unsupported,
           "tensor '" << rec.name << "' in '" << rec.file << "' has type " << rec.type_name
                      << ", which cannot be loaded; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, I8, I32, I64");
  LW_CHECK(compute == DType::f32 || compute == DType::f16 || compute == DType::bf16,
           "load_tensor: compute dtype " << dtype_name(compute) << " for tensor '" << rec.name
                                         << "' must be f32, f16 or bf16");
  const int64_t n = rec.numel();
  const size_t want = file_dtype_bytes(rec.dtype, n);
  LW_CHECK(rec.bytes == want && (rec.data != nullptr || want == 0),
           "tensor '" << rec.name << "' in '" << rec.file << "' of type " << rec.type_name << " and shape "
                      << shape_str(rec.shape) << " needs " << want << " bytes but has " << rec.bytes);
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
