#include "kernels/rope.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"

namespace lw::kernels {

namespace {

constexpr int kMaxHalf = 256;  // rotary_dim <= 512

// One block per token: the token's cos/sin go to shared memory once, then every head of q
// and k is rotated (k in place, q into q_out), C pairs per thread (threadIdx.x: pair chunk, threadIdx.y: head),
// with vector accesses: NeoX reads C elements from each half, GPT-J 2C interleaved ones.
// The angle is position * inv_freq in float, as Hugging Face computes it.
template <class T, class Pos, int C>
__global__ void rope_kernel(RopeArgs a, const T* q, T* q_out, T* k, const Pos* positions, const float* inv_freq) {
  gpu::begin_after_prior_grid();
  LW_SHARED(float, cs, [2][kMaxHalf]);
  const int64_t t = blockIdx.x;
  const int half = a.rotary_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  const int tid = static_cast<int>(threadIdx.x + threadIdx.y * blockDim.x);
  const int nthreads = static_cast<int>(blockDim.x * blockDim.y);
  for (int i = tid; i < half; i += nthreads) {
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    cs[0][i] = c * a.mscale;
    cs[1][i] = s * a.mscale;
  }
  __syncthreads();
  const int heads = a.q_heads + a.k_heads;
  const int chunks = half / C;
  for (int h = static_cast<int>(threadIdx.y); h < heads; h += static_cast<int>(blockDim.y)) {
    const bool query = h < a.q_heads;
    const T* x = query ? q + t * a.q_token_stride + static_cast<int64_t>(h) * a.head_dim
                       : k + t * a.k_token_stride + static_cast<int64_t>(h - a.q_heads) * a.head_dim;
    T* y = query ? q_out + t * a.q_out_token_stride + static_cast<int64_t>(h) * a.head_dim
                 : k + t * a.k_token_stride + static_cast<int64_t>(h - a.q_heads) * a.head_dim;
    if (y != x) {  // a query head out of place: the dims that do not rotate are copied
      for (int e = a.rotary_dim + static_cast<int>(threadIdx.x); e < a.head_dim; e += static_cast<int>(blockDim.x)) y[e] = x[e];
    }
    for (int ch = static_cast<int>(threadIdx.x); ch < chunks; ch += static_cast<int>(blockDim.x)) {
      const int i = ch * C;  // first pair of the chunk
      float x0[C], x1[C];
      if (a.neox) {
        const gpu::Vec<T, C> lo = gpu::load_vec<C>(x + i), hi = gpu::load_vec<C>(x + half + i);
#pragma unroll
        for (int j = 0; j < C; ++j) {
          x0[j] = gpu::to_float(lo.v[j]);
          x1[j] = gpu::to_float(hi.v[j]);
        }
      } else {
        const gpu::Vec<T, 2 * C> v = gpu::load_vec<2 * C>(x + 2 * i);
#pragma unroll
        for (int j = 0; j < C; ++j) {
          x0[j] = gpu::to_float(v.v[2 * j]);
          x1[j] = gpu::to_float(v.v[2 * j + 1]);
        }
      }
      gpu::Vec<T, C> r0, r1;
#pragma unroll
      for (int j = 0; j < C; ++j) {
        const float c = cs[0][i + j], s = cs[1][i + j];
        r0.v[j] = gpu::from_float<T>(x0[j] * c - x1[j] * s);
        r1.v[j] = gpu::from_float<T>(x1[j] * c + x0[j] * s);
      }
      if (a.neox) {
        gpu::store_vec<C>(y + i, r0);
        gpu::store_vec<C>(y + half + i, r1);
      } else {
        gpu::Vec<T, 2 * C> v;
#pragma unroll
        for (int j = 0; j < C; ++j) {
          v.v[2 * j] = r0.v[j];
          v.v[2 * j + 1] = r1.v[j];
        }
        gpu::store_vec<2 * C>(y + 2 * i, v);
      }
    }
  }
}

}  // namespace

template <class T, class Pos>
void rope(const RopeArgs& a, const T* q, T* q_out, T* k, const Pos* positions, const float* inv_freq, int warp_size,
          cudaStream_t stream) {
  if (a.tokens == 0 || a.rotary_dim == 0) return;
  LW_CHECK(a.rotary_dim / 2 <= kMaxHalf, "rope: rotary_dim " << a.rotary_dim << " exceeds " << 2 * kMaxHalf);
  LW_CHECK(a.tokens <= 0x7fffffff, "rope: " << a.tokens << " tokens exceed the grid limit");
  // Four pairs per thread when the heads allow 4-element (NeoX) or 8-element (GPT-J) vectors.
  constexpr int C = 4;
  const int half = a.rotary_dim / 2;
  const int64_t align = static_cast<int64_t>(sizeof(T)) * (a.neox ? C : 2 * C);
  const int64_t width = a.neox ? C : 2 * C;
  const bool vec = half % C == 0 && a.head_dim % width == 0 && a.q_token_stride % width == 0 &&
                   a.q_out_token_stride % width == 0 && (!k || a.k_token_stride % width == 0) &&
                   gpu::aligned_to(align, q, q_out) && (!k || gpu::aligned_to(align, k));
  const int c = vec ? C : 1;
  const int chunks = half / c;
  const int heads = a.q_heads + a.k_heads;
  // x covers the chunks of a head (rounded to the warp when that is all the block holds),
  // y covers heads, for about 256 threads.
  const int bx = chunks < 256 ? chunks : 256;
  int by = 256 / bx;
  by = by < heads ? by : heads;
  const int threads = gpu::round_block_size(bx * by, warp_size);
  const dim3 block(static_cast<unsigned>(bx), static_cast<unsigned>(threads / bx));
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(a.tokens)), block, 0, stream, gpu::kOverlapsPrior};
  if (vec) gpu::launch("rope", rope_kernel<T, Pos, C>, cfg, a, q, q_out, k, positions, inv_freq);
  else gpu::launch("rope", rope_kernel<T, Pos, 1>, cfg, a, q, q_out, k, positions, inv_freq);
}

#define LW_ROPE(T, P) \
  template void rope<T, P>(const RopeArgs&, const T*, T*, T*, const P*, const float*, int, cudaStream_t);
LW_ROPE(float, int32_t)
LW_ROPE(float, int64_t)
LW_ROPE(half, int32_t)
LW_ROPE(half, int64_t)
LW_ROPE(bfloat16, int32_t)
LW_ROPE(bfloat16, int64_t)
#undef LW_ROPE

}  // namespace lw::kernels
