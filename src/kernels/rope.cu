#include "kernels/rope.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"

namespace lw::kernels {

namespace {

constexpr int kMaxHalf = 256;  // rotary_dim <= 512

// One block per token: the token's cos/sin go to shared memory once, then every (head, pair)
// of q and k is rotated in place. The angle is position * inv_freq in float, as Hugging Face
// computes it.
template <class T, class Pos>
__global__ void rope_kernel(RopeArgs a, T* q, T* k, const Pos* positions, const float* inv_freq) {
  LW_SHARED(float, cs, [2][kMaxHalf]);
  const int64_t t = blockIdx.x;
  const int half = a.rotary_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  for (int i = static_cast<int>(threadIdx.x); i < half; i += static_cast<int>(blockDim.x)) {
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    cs[0][i] = c * a.mscale;
    cs[1][i] = s * a.mscale;
  }
  __syncthreads();
  const int heads = a.q_heads + a.k_heads;
  const int work = heads * half;
  for (int j = static_cast<int>(threadIdx.x); j < work; j += static_cast<int>(blockDim.x)) {
    const int h = j / half, i = j - h * half;
    T* x = h < a.q_heads ? q + t * a.q_token_stride + static_cast<int64_t>(h) * a.head_dim
                         : k + t * a.k_token_stride + static_cast<int64_t>(h - a.q_heads) * a.head_dim;
    const int i0 = a.neox ? i : 2 * i;
    const int i1 = a.neox ? i + half : 2 * i + 1;
    const float x0 = gpu::to_float(x[i0]), x1 = gpu::to_float(x[i1]);
    const float c = cs[0][i], s = cs[1][i];
    x[i0] = gpu::from_float<T>(x0 * c - x1 * s);
    x[i1] = gpu::from_float<T>(x1 * c + x0 * s);
  }
}

}  // namespace

template <class T, class Pos>
void rope(const RopeArgs& a, T* q, T* k, const Pos* positions, const float* inv_freq, int warp_size,
          cudaStream_t stream) {
  if (a.tokens == 0 || a.rotary_dim == 0) return;
  LW_CHECK(a.rotary_dim / 2 <= kMaxHalf, "rope: rotary_dim " << a.rotary_dim << " exceeds " << 2 * kMaxHalf);
  LW_CHECK(a.tokens <= 0x7fffffff, "rope: " << a.tokens << " tokens exceed the grid limit");
  const int work = (a.q_heads + a.k_heads) * a.rotary_dim / 2;
  const int threads = gpu::round_block_size(work < 256 ? work : 256, warp_size);
  gpu::launch("rope", rope_kernel<T, Pos>, {dim3(static_cast<unsigned>(a.tokens)), dim3(threads), 0, stream}, a, q, k,
              positions, inv_freq);
}

#define LW_ROPE(T, P) template void rope<T, P>(const RopeArgs&, T*, T*, const P*, const float*, int, cudaStream_t);
LW_ROPE(float, int32_t)
LW_ROPE(float, int64_t)
LW_ROPE(half, int32_t)
LW_ROPE(half, int64_t)
LW_ROPE(bfloat16, int32_t)
LW_ROPE(bfloat16, int64_t)
#undef LW_ROPE

}  // namespace lw::kernels
