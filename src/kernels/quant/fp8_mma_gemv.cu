#include "kernels/quant/fp8_mma_gemv.h"

#include <atomic>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"

namespace lw::kernels {

#if defined(LW_TARGET_CUDA)

// The e4m3 mma.sync needs PTX ISA 8.4 (CUDA 12.4).
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4)
#define LW_FP8_MMA 1
#else
#define LW_FP8_MMA 0
#endif

namespace {

constexpr int kMaxSlices = 8;  // warps of a block, each taking one slice of k
constexpr int kGroup = 128;    // k per iteration: one scale group, four m16n8k32 products
constexpr int kStep = 64;      // lint: not-a-warp (k of two m16n8k32 products: 16 bytes x 4 lanes of a row)

LW_DEVICE_INLINE void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                               uint32_t b1) {
#if LW_FP8_MMA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
#if defined(__CUDA_ARCH__)
  __trap();  // never launched: fp8_mma_gemv_available() is false for code without the instruction
#endif
#endif
}

// A block per 16 weight rows (the MMA's M); its warps (of 32 lanes: CUDA only) split k into slices. Lane (g = lane / 4,
// t = lane % 4) loads 16 bytes of weight rows g and g + 8 and of x row g (the MMA's N = 8
// tokens) at k = base + 16 t: the four lanes of a row read 64 contiguous bytes. The MMA's k
// order is permuted the same way for both operands (its k slots 4t..4t+3 and 16+4t..16+4t+3 take
// bytes 0-3 and 4-7 of the lane's 16, a second MMA bytes 8-15), so the products are the dot
// products of the rows. Each 128-column group's sums are scaled (weight row or block scale,
// token scale) into the lane's results: rows g and g + 8, tokens 2t and 2t + 1.
template <class T>
__global__ void fp8_mma_gemv_kernel(T* __restrict__ out, Fp8MmaGemvArgs a, const T* __restrict__ bias, int64_t slice) {
  LW_SHARED(float, partial, [kMaxSlices * gpu::kWarpSize * 4]);
  const int warp = gpu::warp_id(), lane = gpu::lane_id();
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16 + g, row1 = row0 + 8;
  const int64_t load0 = row0 < a.n ? row0 : a.n - 1, load1 = row1 < a.n ? row1 : a.n - 1;
  const auto* w0 = static_cast<const uint8_t*>(a.wq) + load0 * a.k;
  const auto* w1 = static_cast<const uint8_t*>(a.wq) + load1 * a.k;
  const bool has_x = g < a.m;
  const auto* xr = static_cast<const uint8_t*>(a.xq) + (has_x ? g : 0) * a.k;
  const int64_t groups = a.k / kGroup;
  const int tok0 = 2 * t, tok1 = 2 * t + 1;
  auto w_scale = [&](int64_t row, int64_t gk) {
    return a.block ? a.w_scales[(row / kGroup) * groups + gk] : a.w_scales[row];
  };
  auto x_scale = [&](int tok, int64_t gk) {
    return tok < a.m ? a.x_scales[(a.block ? gk : 0) * a.x_scale_ld + tok] : 0.0f;
  };
  auto load16 = [](const uint8_t* p) { return gpu::load_vec<4>(reinterpret_cast<const uint32_t*>(p)); };

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t begin = warp * slice, end = begin + slice;
#pragma unroll 2
  for (int64_t k0 = begin; k0 < end; k0 += kGroup) {
    gpu::Vec<uint32_t, 4> wa[2][2], xb[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t kb = k0 + j * kStep + t * 16;
      wa[j][0] = load16(w0 + kb);
      wa[j][1] = load16(w1 + kb);
      if (has_x) xb[j] = load16(xr + kb);
      else xb[j].v[0] = xb[j].v[1] = xb[j].v[2] = xb[j].v[3] = 0u;
    }
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      mma_e4m3(c, wa[j][0].v[0], wa[j][1].v[0], wa[j][0].v[1], wa[j][1].v[1], xb[j].v[0], xb[j].v[1]);
      mma_e4m3(c, wa[j][0].v[2], wa[j][1].v[2], wa[j][0].v[3], wa[j][1].v[3], xb[j].v[2], xb[j].v[3]);
    }
    const int64_t gk = k0 / kGroup;
    const float s0 = w_scale(load0, gk), s1 = w_scale(load1, gk);
    const float x0 = x_scale(tok0, gk), x1 = x_scale(tok1, gk);
    acc[0] += c[0] * s0 * x0;
    acc[1] += c[1] * s0 * x1;
    acc[2] += c[2] * s1 * x0;
    acc[3] += c[3] * s1 * x1;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[(warp * gpu::kWarpSize + lane) * 4 + i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  const int slices = static_cast<int>(blockDim.x) / gpu::kWarpSize;
  for (int i = 1; i < slices; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] += partial[(i * gpu::kWarpSize + lane) * 4 + e];
  auto store = [&](int64_t row, int tok, float v) {
    if (row < a.n && tok < a.m) out[tok * a.n + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
  };
  store(row0, tok0, acc[0]);
  store(row0, tok1, acc[1]);
  store(row1, tok0, acc[2]);
  store(row1, tok1, acc[3]);
}

}  // namespace

bool fp8_mma_gemv_available() {
  if (!LW_FP8_MMA) return false;
  // Per device (the kernel image the runtime picks depends on the device), asked once each.
  constexpr int kDevices = 64;  // lint: not-a-warp (devices of a process)
  static std::atomic<int8_t> known[kDevices] = {};  // 0 unknown, 1 yes, -1 no
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) {
    (void)cudaGetLastError();
    return false;
  }
  if (const int8_t k = known[device].load(); k != 0) return k > 0;
  cudaFuncAttributes attr{};
  bool yes = cudaFuncGetAttributes(&attr, fp8_mma_gemv_kernel<bfloat16>) == cudaSuccess && attr.ptxVersion >= 89;
  (void)cudaGetLastError();
  known[device].store(yes ? 1 : -1);
  return yes;
}

template <class T>
void fp8_mma_gemv(T* out, const Fp8MmaGemvArgs& a, const T* bias, cudaStream_t stream) {
  LW_CHECK(fp8_mma_gemv_available(), "fp8_mma_gemv: this build has no FP8 tensor-core kernel (an sm_89+ CUDA build)");
  LW_CHECK(a.m >= 0 && a.m <= kFp8MmaGemvMaxRows, "fp8_mma_gemv: " << a.m << " rows; at most " << kFp8MmaGemvMaxRows);
  LW_CHECK(a.n > 0 && a.k > 0 && a.k % kGroup == 0, "fp8_mma_gemv: [N, K] = [" << a.n << ", " << a.k
                                                                               << "]: K must be a positive multiple of 128");
  LW_CHECK(a.x_scale_ld >= a.m, "fp8_mma_gemv: x scale rows of " << a.x_scale_ld << " for " << a.m << " rows");
  LW_CHECK(gpu::aligned_to(16, a.xq, a.wq), "fp8_mma_gemv: x and w must start 16-byte aligned");
  if (a.m == 0) return;
  int slices = kMaxSlices;
  while (slices > 1 && a.k % (slices * kGroup) != 0) slices /= 2;
  const int64_t tiles = (a.n + 15) / 16;
  LW_CHECK(tiles <= 0x7fffffff, "fp8_mma_gemv: " << a.n << " rows exceed the grid limit");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(tiles)), dim3(slices * gpu::kWarpSize), 0, stream};
  gpu::launch("fp8_mma_gemv", fp8_mma_gemv_kernel<T>, cfg, out, a, bias, a.k / slices);
}

#else  // HIP and the host: NVIDIA's FP8 tensor cores only

bool fp8_mma_gemv_available() { return false; }

template <class T>
void fp8_mma_gemv(T*, const Fp8MmaGemvArgs&, const T*, cudaStream_t) {
  LW_FAIL("fp8_mma_gemv: NVIDIA FP8 tensor cores only; this build's target has none");
}

#endif

template void fp8_mma_gemv<half>(half*, const Fp8MmaGemvArgs&, const half*, cudaStream_t);
template void fp8_mma_gemv<bfloat16>(bfloat16*, const Fp8MmaGemvArgs&, const bfloat16*, cudaStream_t);

}  // namespace lw::kernels
