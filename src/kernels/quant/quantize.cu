#include "kernels/quant/quantize.h"

#include <cmath>
#include <type_traits>

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "kernels/quant/fp8.h"
#include "kernels/row_plan.h"

namespace lw::kernels {

namespace {

LW_DEVICE_INLINE int8_t to_int8(float v, float inv_scale) {
  const float r = rintf(v * inv_scale);  // round half to even
  return static_cast<int8_t>(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
}

// The int8 encoding of the quantisation kernels: symmetric to +-127, scales[g] per group in order.
struct Int8Groups {
  int8_t* q;
  float* scales;
  static constexpr float kMax = 127.0f;
  LW_DEVICE_INLINE void store_scale(int64_t g, float s) const { scales[g] = s; }
  LW_DEVICE_INLINE int8_t encode(float v, float inv) const { return to_int8(v, inv); }
};

// The FP8 encoding: e4m3fn codes to +-448, scales group-major (scales[(g % per_row) * ld + row]).
struct Fp8Groups {
  uint8_t* q;
  float* scales;
  int64_t groups_per_row, scale_ld;
  static constexpr float kMax = 448.0f;
  LW_DEVICE_INLINE void store_scale(int64_t g, float s) const {
    scales[(g % groups_per_row) * scale_ld + g / groups_per_row] = s;
  }
  LW_DEVICE_INLINE uint8_t encode(float v, float inv) const { return fp8_e4m3_from_float(v * inv); }
};

// One block per (row, group of the row): the group's absmax, then the group encoded (re-read
// from cache); a group of a whole row is per-token quantisation. Enc as for the per-group kernel
// below; group index row * gridDim.y + blockIdx.y.
template <class T, int VEC, class Enc>
__global__ void quantize_row_group_kernel(const T* x, Enc enc, int64_t cols, int group) {
  const int64_t row = blockIdx.x, g = blockIdx.y;
  const T* xg = x + row * cols + g * group;
  auto* qg = enc.q + row * cols + g * group;
  const int nvec = group / VEC;
  float amax = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < nvec; i += static_cast<int>(blockDim.x)) {
    const gpu::Vec<T, VEC> v = gpu::load_vec<VEC>(xg + static_cast<int64_t>(i) * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) amax = fmaxf(amax, fabsf(gpu::to_float(v.v[j])));
  }
  amax = gpu::block_reduce_max(amax);
  const float inv = amax > 0.0f ? Enc::kMax / amax : 0.0f;
  if (threadIdx.x == 0) enc.store_scale(row * gridDim.y + g, amax / Enc::kMax);
  for (int i = static_cast<int>(threadIdx.x); i < nvec; i += static_cast<int>(blockDim.x)) {
    const gpu::Vec<T, VEC> v = gpu::load_vec<VEC>(xg + static_cast<int64_t>(i) * VEC);
    gpu::Vec<std::remove_pointer_t<decltype(enc.q)>, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = enc.encode(gpu::to_float(v.v[j]), inv);
    gpu::store_vec<VEC>(qg + static_cast<int64_t>(i) * VEC, o);
  }
}

// Groups of `group` elements; Lanes lanes share a group (VEC elements each) and reduce its
// absmax with a Lanes-wide warp reduction. The loop bound is uniform, so every lane reaches
// every shuffle; lanes past the end work on zeros. Enc: Int8Groups (inv = 127 / absmax, the
// int8 rounding) or Fp8Groups (inv = 448 / absmax, the nearest code).
template <class T, int VEC, int Lanes, int PerLane, class Enc>
__global__ void quantize_group_kernel(const T* x, Enc enc, int64_t total_groups, int group) {
  const int per_block = static_cast<int>(blockDim.x) / Lanes;
  const int lane_in_group = static_cast<int>(threadIdx.x) % Lanes;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < total_groups;
       base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t g = base + static_cast<int64_t>(threadIdx.x) / Lanes;
    const bool valid = g < total_groups;
    const int64_t off = g * group;
    float v[VEC * PerLane];  // the lane's PerLane vectors of the group
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < PerLane; ++k) {
      if (valid) {
        const gpu::Vec<T, VEC> xv = gpu::load_vec<VEC>(x + off + (k * Lanes + lane_in_group) * VEC);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[k * VEC + j] = gpu::to_float(xv.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[k * VEC + j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) amax = fmaxf(amax, fabsf(v[k * VEC + j]));
    }
    amax = gpu::warp_reduce_max<Lanes>(amax);
    if (!valid) continue;
    const float inv = amax > 0.0f ? Enc::kMax / amax : 0.0f;
    if (lane_in_group == 0) enc.store_scale(g, amax / Enc::kMax);
#pragma unroll
    for (int k = 0; k < PerLane; ++k) {
      gpu::Vec<std::remove_pointer_t<decltype(enc.q)>, VEC> o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = enc.encode(v[k * VEC + j], inv);
      gpu::store_vec<VEC>(enc.q + off + (k * Lanes + lane_in_group) * VEC, o);
    }
  }
}

// Scalar form for unaligned data: one thread per group.
template <class T>
__global__ void quantize_group_scalar_kernel(const T* x, int8_t* q, float* scales, int64_t total_groups, int group) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total_groups; g += stride) {
    const int64_t off = g * group;
    float amax = 0.0f;
    for (int i = 0; i < group; ++i) amax = fmaxf(amax, fabsf(gpu::to_float(x[off + i])));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    scales[g] = amax / 127.0f;
    for (int i = 0; i < group; ++i) q[off + i] = to_int8(gpu::to_float(x[off + i]), inv);
  }
}

// out[i] = q[i] * scales[i / span]: span is cols (per token) or the group size.
template <class T, int VEC>
__global__ void dequantize_kernel(const int8_t* q, const float* scales, T* out, int64_t n, int64_t span) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n / VEC; i += stride) {
    const gpu::Vec<int8_t, VEC> v = gpu::load_vec<VEC>(q + i * VEC);
    const float s = scales[i * VEC / span];  // VEC divides span, so one scale per vector
    gpu::Vec<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = gpu::from_float<T>(static_cast<float>(v.v[j]) * s);
    gpu::store_vec<VEC>(out + i * VEC, o);
  }
}

__global__ void broadcast_kernel(const float* value, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = *value;
}

unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65536 ? 65536 : blocks);
}

template <class T>
void dequantize(const int8_t* q, const float* scales, T* out, int64_t n, int64_t span, int warp_size,
                cudaStream_t stream) {
  if (n == 0) return;
  constexpr int V = gpu::kVecWidth<T>;
  const int threads = gpu::round_block_size(256, warp_size);
  if (span % V == 0 && gpu::aligned_to(gpu::kVectorBytes, out) && gpu::aligned_to(V, q)) {
    gpu::launch("dequantize", dequantize_kernel<T, V>, {dim3(grid_for(n / V, threads)), dim3(threads), 0, stream}, q,
                scales, out, n, span);
  } else {
    gpu::launch("dequantize", dequantize_kernel<T, 1>, {dim3(grid_for(n, threads)), dim3(threads), 0, stream}, q,
                scales, out, n, span);
  }
}

// The per-group kernel for groups of 4, 8, 16 or 32 vectors (8 lanes hold 1, 2 or 4 each; a
// 4-vector group takes 4 lanes); false for other group sizes. x and q must be vector-aligned.
template <class T, class Enc>
bool launch_groups(const T* x, const Enc& enc, int64_t groups, int group, int warp_size, cudaStream_t stream) {
  constexpr int V = gpu::kVecWidth<T>;
  const int threads = gpu::round_block_size(256, warp_size);
  const int vectors = group % V == 0 ? group / V : 0;
  const gpu::LaunchConfig cfg8{dim3(grid_for(groups, threads / 8)), dim3(threads), 0, stream};
  const gpu::LaunchConfig cfg4{dim3(grid_for(groups, threads / 4)), dim3(threads), 0, stream};
  const char* name = std::is_same_v<Enc, Fp8Groups> ? "quantize_fp8" : "quantize_per_group";
  if (vectors == 8) gpu::launch(name, quantize_group_kernel<T, V, 8, 1, Enc>, cfg8, x, enc, groups, group);
  else if (vectors == 16) gpu::launch(name, quantize_group_kernel<T, V, 8, 2, Enc>, cfg8, x, enc, groups, group);
  else if (vectors == 32) gpu::launch(name, quantize_group_kernel<T, V, 8, 4, Enc>, cfg8, x, enc, groups, group);  // lint: not-a-warp (vectors in a group)
  else if (vectors == 4) gpu::launch(name, quantize_group_kernel<T, V, 4, 1, Enc>, cfg4, x, enc, groups, group);
  else return false;
  return true;
}

}  // namespace

template <class T>
void quantize_per_token(const T* x, int8_t* q, float* scales, int64_t rows, int64_t cols, int warp_size,
                        cudaStream_t stream) {
  if (rows == 0) return;
  LW_CHECK(rows <= 0x7fffffff && cols <= 0x7fffffff, "quantize: " << rows << " rows of " << cols << " exceed the grid limit");
  constexpr int V = gpu::kVecWidth<T>;
  const bool vec = cols % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x) && gpu::aligned_to(V, q);
  const int64_t nvec = vec ? cols / V : cols;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(rows)), dim3(row_threads(nvec, rows, warp_size)), 0, stream};
  const Int8Groups enc{q, scales};
  const int c = static_cast<int>(cols);
  if (vec) gpu::launch("quantize_per_token", quantize_row_group_kernel<T, V, Int8Groups>, cfg, x, enc, cols, c);
  else gpu::launch("quantize_per_token", quantize_row_group_kernel<T, 1, Int8Groups>, cfg, x, enc, cols, c);
}

template <class T>
void dequantize_per_token(const int8_t* q, const float* scales, T* out, int64_t rows, int64_t cols, int warp_size,
                          cudaStream_t stream) {
  dequantize<T>(q, scales, out, rows * cols, cols, warp_size, stream);
}

template <class T>
void quantize_per_group(const T* x, int8_t* q, float* scales, int64_t rows, int64_t cols, int group, int warp_size,
                        cudaStream_t stream) {
  const int64_t groups = rows * (cols / group);
  if (groups == 0) return;
  constexpr int V = gpu::kVecWidth<T>;
  const int threads = gpu::round_block_size(256, warp_size);
  const bool vec = gpu::aligned_to(gpu::kVectorBytes, x) && gpu::aligned_to(V, q) && group % V == 0;
  if (!vec || !launch_groups(x, Int8Groups{q, scales}, groups, group, warp_size, stream)) {
    gpu::launch("quantize_per_group", quantize_group_scalar_kernel<T>,
                {dim3(grid_for(groups, threads)), dim3(threads), 0, stream}, x, q, scales, groups, group);
  }
}

template <class T>
void dequantize_per_group(const int8_t* q, const float* scales, T* out, int64_t rows, int64_t cols, int group,
                          int warp_size, cudaStream_t stream) {
  dequantize<T>(q, scales, out, rows * cols, group, warp_size, stream);
}

template <class T>
void quantize_fp8(const T* x, uint8_t* q, float* scales, int64_t scale_ld, int64_t rows, int64_t cols, int64_t group,
                  int warp_size, cudaStream_t stream) {
  LW_CHECK(scale_ld >= rows, "quantize_fp8: scale rows of " << scale_ld << " for " << rows << " rows");
  LW_CHECK(group > 0 && cols % group == 0, "quantize_fp8: group " << group << " must divide the " << cols << " columns");
  if (rows == 0 || cols == 0) return;
  LW_CHECK(rows <= 0x7fffffff && cols / group <= 65535,
           "quantize_fp8: " << rows << " rows of " << cols / group << " groups exceed the grid limits");
  constexpr int V = gpu::kVecWidth<T>;
  const bool vec = group % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x) && gpu::aligned_to(V, q);
  const int64_t nvec = vec ? group / V : group;
  // Small groups (the 1 x 128 blocks): many groups per block; whole rows: a block per row.
  if (vec && group <= 32 * V &&  // lint: not-a-warp (vectors in a group)
      launch_groups(x, Fp8Groups{q, scales, cols / group, scale_ld}, rows * (cols / group), static_cast<int>(group),
                    warp_size, stream))
    return;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(rows), static_cast<unsigned>(cols / group)),
                              dim3(row_threads(nvec, rows * (cols / group), warp_size)), 0, stream};
  const int g = static_cast<int>(group);
  const Fp8Groups enc{q, scales, cols / group, scale_ld};
  if (vec) gpu::launch("quantize_fp8", quantize_row_group_kernel<T, V, Fp8Groups>, cfg, x, enc, cols, g);
  else gpu::launch("quantize_fp8", quantize_row_group_kernel<T, 1, Fp8Groups>, cfg, x, enc, cols, g);
}

void broadcast_scale(const float* value, float* out, int64_t n, int warp_size, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = gpu::round_block_size(256, warp_size);
  gpu::launch("broadcast_scale", broadcast_kernel, {dim3(grid_for(n, threads)), dim3(threads), 0, stream}, value, out, n);
}

#define LW_QUANT(T)                                                                                              \
  template void quantize_per_token<T>(const T*, int8_t*, float*, int64_t, int64_t, int, cudaStream_t);         \
  template void dequantize_per_token<T>(const int8_t*, const float*, T*, int64_t, int64_t, int, cudaStream_t);  \
  template void quantize_per_group<T>(const T*, int8_t*, float*, int64_t, int64_t, int, int, cudaStream_t);     \
  template void dequantize_per_group<T>(const int8_t*, const float*, T*, int64_t, int64_t, int, int, cudaStream_t); \
  template void quantize_fp8<T>(const T*, uint8_t*, float*, int64_t, int64_t, int64_t, int64_t, int, cudaStream_t);
LW_QUANT(float)
LW_QUANT(half)
LW_QUANT(bfloat16)
#undef LW_QUANT

}  // namespace lw::kernels
