#include "kernels/elementwise.h"

#include <cmath>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/portable_math.h"
#include "gpu/vector.h"

namespace lw::kernels {

namespace {

LW_DEVICE_INLINE float apply(MapOp op, float a, float b, float s) {
  switch (op) {
    case MapOp::add: return a + b;
    case MapOp::mul: return a * b;
    case MapOp::scale: return a * s;
    case MapOp::copy: return a;
    case MapOp::silu: return silu(a);
    case MapOp::gelu_tanh: return gelu_tanh(a);
    default: return gelu_erf(a);
  }
}

// Vector main part: VEC elements per step; a scalar tail covers n % VEC.
template <class TOut, class TIn, int VEC, bool Binary>
__global__ void map_kernel(MapOp op, TOut* out, const TIn* a, const TIn* b, float s, int64_t n) {
  gpu::begin_after_prior_grid();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / VEC;
  for (int64_t i = first; i < nvec; i += stride) {
    const gpu::Vec<TIn, VEC> va = gpu::load_vec<VEC>(a + i * VEC);
    gpu::Vec<TIn, VEC> vb;
    if constexpr (Binary) vb = gpu::load_vec<VEC>(b + i * VEC);
    gpu::Vec<TOut, VEC> r;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float bk = 0.0f;
      if constexpr (Binary) bk = gpu::to_float(vb.v[k]);
      r.v[k] = gpu::from_float<TOut>(apply(op, gpu::to_float(va.v[k]), bk, s));
    }
    gpu::store_vec<VEC>(out + i * VEC, r);
  }
  for (int64_t i = nvec * VEC + first; i < n; i += stride) {
    float bi = 0.0f;
    if constexpr (Binary) bi = gpu::to_float(b[i]);
    out[i] = gpu::from_float<TOut>(apply(op, gpu::to_float(a[i]), bi, s));
  }
}

template <class T, int VEC>
__global__ void act_mul_kernel(Activation act, T* out, const T* in, int64_t tokens, int64_t inter) {
  gpu::begin_after_prior_grid();
  const int64_t per_row = inter / VEC;
  const int64_t total = tokens * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t t = i / per_row, c = (i - t * per_row) * VEC;
    const T* row = in + t * 2 * inter;
    const gpu::Vec<T, VEC> g = gpu::load_vec<VEC>(row + c);
    const gpu::Vec<T, VEC> u = gpu::load_vec<VEC>(row + inter + c);
    gpu::Vec<T, VEC> r;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      r.v[k] = gpu::from_float<T>(gated(act, gpu::to_float(g.v[k]), gpu::to_float(u.v[k])));
    }
    gpu::store_vec<VEC>(out + t * inter + c, r);
  }
}

// Enough blocks to fill any GPU several times over; the grid-stride loops cover the rest.
unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65536 ? 65536 : blocks);
}

bool binary(MapOp op) { return op == MapOp::add || op == MapOp::mul; }

}  // namespace

template <class TOut, class TIn>
void map(MapOp op, TOut* out, const TIn* a, const TIn* b, float scalar, int64_t n, int warp_size,
         cudaStream_t stream) {
  if (n == 0) return;
  constexpr int V = gpu::kVecWidth<TIn> < gpu::kVecWidth<TOut> ? gpu::kVecWidth<TIn> : gpu::kVecWidth<TOut>;
  const int threads = gpu::round_block_size(256, warp_size);
  const bool vec = binary(op) ? gpu::aligned_to(gpu::kVectorBytes, out, a, b) : gpu::aligned_to(gpu::kVectorBytes, out, a);
  const gpu::LaunchConfig cfg{dim3(grid_for(vec ? n / V + 1 : n, threads)), dim3(threads), 0, stream, gpu::kOverlapsPrior};
  if (binary(op)) {
    if (vec) gpu::launch("map", map_kernel<TOut, TIn, V, true>, cfg, op, out, a, b, scalar, n);
    else gpu::launch("map", map_kernel<TOut, TIn, 1, true>, cfg, op, out, a, b, scalar, n);
  } else {
    if (vec) gpu::launch("map", map_kernel<TOut, TIn, V, false>, cfg, op, out, a, b, scalar, n);
    else gpu::launch("map", map_kernel<TOut, TIn, 1, false>, cfg, op, out, a, b, scalar, n);
  }
}

template <class T>
__global__ void fill_uniform_kernel(T* out, int64_t n, float lo, float hi, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = gpu::from_float<T>(lo + (hi - lo) * gpu::uniform_portable(seed, static_cast<uint64_t>(i)));
}

template <class T>
void fill_uniform(T* out, int64_t n, float lo, float hi, uint64_t seed, int warp_size, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = gpu::round_block_size(256, warp_size);
  const gpu::LaunchConfig cfg{dim3(grid_for(n, threads)), dim3(threads), 0, stream};
  gpu::launch("fill_uniform", fill_uniform_kernel<T>, cfg, out, n, lo, hi, seed);
}

template <class T>
__global__ void sigmoid_gated_add_kernel(T* out, const T* gate, const T* x, int64_t tokens, int64_t hidden) {
  const int64_t total = tokens * hidden;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const float g = gpu::to_float(gate[i / hidden]);
    const float s = 1.0f / (1.0f + expf(-g));
    out[i] = gpu::from_float<T>(gpu::to_float(out[i]) + s * gpu::to_float(x[i]));
  }
}

template <class T>
void sigmoid_gated_add(T* out, const T* gate, const T* x, int64_t tokens, int64_t hidden, int warp_size, cudaStream_t stream) {
  if (tokens == 0 || hidden == 0) return;
  const int threads = gpu::round_block_size(256, warp_size);
  const gpu::LaunchConfig cfg{dim3(grid_for(tokens * hidden, threads)), dim3(threads), 0, stream};
  gpu::launch("sigmoid_gated_add", sigmoid_gated_add_kernel<T>, cfg, out, gate, x, tokens, hidden);
}

template <class T>
void act_mul(Activation act, T* out, const T* in, int64_t tokens, int64_t inter, int warp_size, cudaStream_t stream) {
  if (tokens == 0 || inter == 0) return;
  constexpr int V = gpu::kVecWidth<T>;
  const int threads = gpu::round_block_size(256, warp_size);
  if (inter % V == 0 && gpu::aligned_to(gpu::kVectorBytes, out, in)) {
    const gpu::LaunchConfig cfg{dim3(grid_for(tokens * inter / V, threads)), dim3(threads), 0, stream, gpu::kOverlapsPrior};
    gpu::launch("act_mul", act_mul_kernel<T, V>, cfg, act, out, in, tokens, inter);
  } else {
    const gpu::LaunchConfig cfg{dim3(grid_for(tokens * inter, threads)), dim3(threads), 0, stream, gpu::kOverlapsPrior};
    gpu::launch("act_mul", act_mul_kernel<T, 1>, cfg, act, out, in, tokens, inter);
  }
}

#define LW_MAP(TO, TI) \
  template void map<TO, TI>(MapOp, TO*, const TI*, const TI*, float, int64_t, int, cudaStream_t);
#define LW_MAP_FROM(TI) LW_MAP(float, TI) LW_MAP(half, TI) LW_MAP(bfloat16, TI)
LW_MAP_FROM(float)
LW_MAP_FROM(half)
LW_MAP_FROM(bfloat16)
#undef LW_MAP_FROM
#undef LW_MAP
template void fill_uniform<float>(float*, int64_t, float, float, uint64_t, int, cudaStream_t);
template void fill_uniform<half>(half*, int64_t, float, float, uint64_t, int, cudaStream_t);
template void fill_uniform<bfloat16>(bfloat16*, int64_t, float, float, uint64_t, int, cudaStream_t);
template void sigmoid_gated_add<float>(float*, const float*, const float*, int64_t, int64_t, int, cudaStream_t);
template void sigmoid_gated_add<half>(half*, const half*, const half*, int64_t, int64_t, int, cudaStream_t);
template void sigmoid_gated_add<bfloat16>(bfloat16*, const bfloat16*, const bfloat16*, int64_t, int64_t, int, cudaStream_t);
template void act_mul<float>(Activation, float*, const float*, int64_t, int64_t, int, cudaStream_t);
template void act_mul<half>(Activation, half*, const half*, int64_t, int64_t, int, cudaStream_t);
template void act_mul<bfloat16>(Activation, bfloat16*, const bfloat16*, int64_t, int64_t, int, cudaStream_t);

}  // namespace lw::kernels
