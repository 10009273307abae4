#include "kernels/quant/dequant.h"

#include <algorithm>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/portable_math.h"

namespace lw::kernels {

namespace {

// GGML's quantized blocks hold 32 elements; the count is a format fact, not a warp width.
constexpr int kQBlock = 32;  // lint: not-a-warp
constexpr int kQHalf = kQBlock / 2;

// Block payloads are byte streams (34- and 18-byte blocks leave fp16 fields only 2-aligned),
// so fields are assembled from bytes.
__device__ __forceinline__ float fp16_at(const uint8_t* p) {
  const unsigned short bits = static_cast<unsigned short>(p[0] | (p[1] << 8));
  return gpu::to_float(__ushort_as_half(bits));
}

struct Q8_0 {
  static constexpr int kBytes = 2 + kQBlock;
  __device__ static float get(const uint8_t* b, int j) {
    return static_cast<float>(static_cast<int8_t>(b[2 + j])) * fp16_at(b);
  }
};

struct Q4_0 {
  static constexpr int kBytes = 2 + kQHalf;
  __device__ static float get(const uint8_t* b, int j) {
    const uint8_t byte = b[2 + (j < kQHalf ? j : j - kQHalf)];
    const int q = j < kQHalf ? (byte & 0x0f) : (byte >> 4);
    return static_cast<float>(q - 8) * fp16_at(b);
  }
};

struct Q4_1 {
  static constexpr int kBytes = 4 + kQHalf;
  __device__ static float get(const uint8_t* b, int j) {
    const uint8_t byte = b[4 + (j < kQHalf ? j : j - kQHalf)];
    const int q = j < kQHalf ? (byte & 0x0f) : (byte >> 4);
    return gpu::mul_add_unfused(fp16_at(b), static_cast<float>(q), fp16_at(b + 2));  // as ggml rounds it
  }
};

template <class T, class Src>
__global__ void convert_kernel(T* out, const Src* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = gpu::from_float<T>(gpu::to_float(in[i]));
}

template <class T, class Block>
__global__ void dequant_kernel(T* out, const uint8_t* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t block = i / kQBlock;
    out[i] = gpu::from_float<T>(Block::get(in + block * Block::kBytes, static_cast<int>(i - block * kQBlock)));
  }
}

}  // namespace

const char* block_format_name(BlockFormat format) {
  switch (format) {
    case BlockFormat::f32: return "f32";
    case BlockFormat::f16: return "f16";
    case BlockFormat::bf16: return "bf16";
    case BlockFormat::q8_0: return "q8_0";
    case BlockFormat::q4_0: return "q4_0";
    case BlockFormat::q4_1: return "q4_1";
  }
  return "?";
}

int64_t block_format_elems(BlockFormat format) {
  switch (format) {
    case BlockFormat::q8_0:
    case BlockFormat::q4_0:
    case BlockFormat::q4_1: return kQBlock;
    default: return 1;
  }
}

int64_t block_format_bytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::f32: return 4;
    case BlockFormat::f16: return 2;
    case BlockFormat::bf16: return 2;
    case BlockFormat::q8_0: return Q8_0::kBytes;
    case BlockFormat::q4_0: return Q4_0::kBytes;
    case BlockFormat::q4_1: return Q4_1::kBytes;
  }
  return 0;
}

template <class T>
void dequantize_blocks(T* out, const void* src, BlockFormat format, int64_t n, int warp_size, cudaStream_t stream) {
  if (n == 0) return;
  LW_CHECK(n % block_format_elems(format) == 0,
           "dequantize: " << n << " elements are not whole " << block_format_name(format) << " blocks of "
                          << block_format_elems(format));
  const int threads = gpu::round_block_size(256, warp_size);
  // Enough blocks to fill a large GPU; the grid-stride loop covers the rest.
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 8192);
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream};
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (format) {
    case BlockFormat::f32:
      gpu::launch("weights_convert_f32", convert_kernel<T, float>, cfg, out, static_cast<const float*>(src), n);
      return;
    case BlockFormat::f16:
      gpu::launch("weights_convert_f16", convert_kernel<T, half>, cfg, out, static_cast<const half*>(src), n);
      return;
    case BlockFormat::bf16:
      gpu::launch("weights_convert_bf16", convert_kernel<T, bfloat16>, cfg, out, static_cast<const bfloat16*>(src), n);
      return;
    case BlockFormat::q8_0: gpu::launch("weights_dequant_q8_0", dequant_kernel<T, Q8_0>, cfg, out, bytes, n); return;
    case BlockFormat::q4_0: gpu::launch("weights_dequant_q4_0", dequant_kernel<T, Q4_0>, cfg, out, bytes, n); return;
    case BlockFormat::q4_1: gpu::launch("weights_dequant_q4_1", dequant_kernel<T, Q4_1>, cfg, out, bytes, n); return;
  }
  LW_FAIL("dequantize: unknown block format " << static_cast<int>(format));
}

template void dequantize_blocks<float>(float*, const void*, BlockFormat, int64_t, int, cudaStream_t);
template void dequantize_blocks<half>(half*, const void*, BlockFormat, int64_t, int, cudaStream_t);
template void dequantize_blocks<bfloat16>(bfloat16*, const void*, BlockFormat, int64_t, int, cudaStream_t);

}  // namespace lw::kernels
