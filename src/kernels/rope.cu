#include "kernels/rope.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"

namespace lw::kernels {

namespace {

constexpr int kMaxHalf = 256;  // rotary_dim <= 512
constexpr int kMaxThreads = 256;  // a block's threads (rope() plans about 256)

// A head's RMSNorm (rms_norm's arithmetic): v * rstd rounded to T, times the weight, rounded.
template <class T>
LW_DEVICE_INLINE float head_norm(float v, float rstd, const T* w, int e) {
  const float normed = gpu::to_float(gpu::from_float<T>(v * rstd));
  return gpu::to_float(gpu::from_float<T>(normed * gpu::to_float(w[e])));
}

// One block per token: the token's cos/sin go to shared memory once, then every head of q
// and k is rotated (k in place, q into q_out), C pairs per thread (threadIdx.x: pair chunk, threadIdx.y: head),
// with vector accesses: NeoX reads C elements from each half, GPT-J 2C interleaved ones.
// The angle is position * inv_freq in float, as Hugging Face computes it. With norm weights,
// each head is first RMS-normalised: its threads' sums of squares meet in shared memory and
// each thread adds its head's in one fixed order (the same on every target). With a cache
// write, the key heads go to the token's cache slot and the value heads are copied beside them.
template <class T, class Pos, int C>
__global__ void rope_kernel(RopeArgs a, const T* q, T* q_out, T* k, const Pos* positions, const float* inv_freq,
                            const T* q_norm, const T* k_norm, RopeCacheWrite<T> cw) {
  gpu::begin_after_prior_grid();
  LW_SHARED(float, cs, [2][kMaxHalf]);
  LW_SHARED(float, squares, [kMaxThreads]);
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
  const bool norm = q_norm != nullptr;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int bx = static_cast<int>(blockDim.x), by = static_cast<int>(blockDim.y);
  // The token's cache slot, or -1: its key heads are then not written anywhere.
  const bool to_cache = cw.k_cache != nullptr;
  const int64_t cache_row = static_cast<int64_t>(a.k_heads) * a.head_dim;
  int64_t slot = -1;
  if (to_cache) {
    const int64_t s = cw.slots[t];
    slot = s >= 0 && s < cw.num_slots ? s : -1;
  }
  // Every thread runs every round (heads past the last are idle): the norm's barriers.
  for (int h0 = 0; h0 < heads; h0 += by) {
    const int h = h0 + ty;
    const bool live = h < heads;
    const int hh = live ? h : 0;  // an idle thread's addresses stay in its token's heads
    const bool query = hh < a.q_heads;
    const T* x = query ? q + t * a.q_token_stride + static_cast<int64_t>(hh) * a.head_dim
                       : k + t * a.k_token_stride + static_cast<int64_t>(hh - a.q_heads) * a.head_dim;
    T* y = query      ? q_out + t * a.q_out_token_stride + static_cast<int64_t>(hh) * a.head_dim
           : to_cache ? (slot >= 0 ? cw.k_cache + slot * cache_row + static_cast<int64_t>(hh - a.q_heads) * a.head_dim
                                   : nullptr)
                      : k + t * a.k_token_stride + static_cast<int64_t>(hh - a.q_heads) * a.head_dim;
    const T* nw = query ? q_norm : k_norm;
    // The element pairs of chunk ch: NeoX (i + j, half + i + j), GPT-J (2(i + j), 2(i + j) + 1).
    auto load_chunk = [&](int ch, float (&x0)[C], float (&x1)[C]) {
      const int i = ch * C;
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
    };
    auto first_of = [&](int ch, int j) { return a.neox ? ch * C + j : 2 * (ch * C + j); };
    auto second_of = [&](int ch, int j) { return a.neox ? half + ch * C + j : 2 * (ch * C + j) + 1; };
    float rstd = 1.0f;
    if (norm) {
      float sum = 0.0f;
      if (live) {
        for (int ch = tx; ch < chunks; ch += bx) {
          float x0[C], x1[C];
          load_chunk(ch, x0, x1);
#pragma unroll
          for (int j = 0; j < C; ++j) sum += x0[j] * x0[j] + x1[j] * x1[j];
        }
        for (int e = a.rotary_dim + tx; e < a.head_dim; e += bx) {
          const float v = gpu::to_float(x[e]);
          sum += v * v;
        }
      }
      squares[ty * bx + tx] = sum;
      __syncthreads();
      float total = 0.0f;
      for (int j = 0; j < bx; ++j) total += squares[ty * bx + j];
      rstd = rsqrtf(total / static_cast<float>(a.head_dim) + a.norm_eps);
      __syncthreads();  // the sums are read before the next round writes them
    }
    if (!live || y == nullptr) continue;
    if (y != x || norm) {  // a query head out of place, or normalised: the dims that do not rotate
      for (int e = a.rotary_dim + tx; e < a.head_dim; e += bx) {
        const float v = gpu::to_float(x[e]);
        y[e] = norm ? gpu::from_float<T>(head_norm(v, rstd, nw, e)) : x[e];
      }
    }
    for (int ch = tx; ch < chunks; ch += bx) {
      const int i = ch * C;  // first pair of the chunk
      float x0[C], x1[C];
      load_chunk(ch, x0, x1);
      if (norm) {
#pragma unroll
        for (int j = 0; j < C; ++j) {
          x0[j] = head_norm(x0[j], rstd, nw, first_of(ch, j));
          x1[j] = head_norm(x1[j], rstd, nw, second_of(ch, j));
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
  if (slot >= 0) {
    const T* vs = cw.v + t * cw.v_token_stride;
    T* vd = cw.v_cache + slot * cache_row;
    for (int64_t i = tid; i < cache_row / C; i += nthreads) gpu::store_vec<C>(vd + i * C, gpu::load_vec<C>(vs + i * C));
  }
}

}  // namespace

template <class T, class Pos>
void rope(const RopeArgs& a, const T* q, T* q_out, T* k, const Pos* positions, const float* inv_freq, int warp_size,
          cudaStream_t stream, const T* q_norm, const T* k_norm, const RopeCacheWrite<T>& cache) {
  LW_CHECK(!k_norm || q_norm, "rope: a key norm without a query norm");
  LW_CHECK(!q_norm || !k || k_norm, "rope: the query heads' norm without the key heads'");
  const bool to_cache = cache.k_cache != nullptr;
  LW_CHECK(!to_cache || (k && cache.v && cache.v_cache && cache.slots), "rope: a cache write needs k, v, slots and both caches");
  if (a.tokens == 0 || (a.rotary_dim == 0 && !q_norm && !to_cache)) return;
  LW_CHECK(a.rotary_dim / 2 <= kMaxHalf, "rope: rotary_dim " << a.rotary_dim << " exceeds " << 2 * kMaxHalf);
  LW_CHECK(a.tokens <= 0x7fffffff, "rope: " << a.tokens << " tokens exceed the grid limit");
  // Four pairs per thread when the heads allow 4-element (NeoX) or 8-element (GPT-J) vectors.
  constexpr int C = 4;
  const int half = a.rotary_dim / 2;
  const int64_t align = static_cast<int64_t>(sizeof(T)) * (a.neox ? C : 2 * C);
  const int64_t width = a.neox ? C : 2 * C;
  const bool vec = half % C == 0 && a.head_dim % width == 0 && a.q_token_stride % width == 0 &&
                   a.q_out_token_stride % width == 0 && (!k || a.k_token_stride % width == 0) &&
                   gpu::aligned_to(align, q, q_out) && (!k || gpu::aligned_to(align, k)) &&
                   (!to_cache || (cache.v_token_stride % width == 0 && gpu::aligned_to(align, cache.v, cache.k_cache, cache.v_cache)));
  const int c = vec ? C : 1;
  const int chunks = half / c;
  const int heads = a.q_heads + a.k_heads;
  // x covers the chunks of a head (rounded to the warp when that is all the block holds),
  // y covers heads, for about 256 threads.
  const int bx = chunks < 1 ? 1 : chunks < 256 ? chunks : 256;
  int by = 256 / bx;
  by = by < heads ? by : heads;
  const int threads = gpu::round_block_size(bx * by, warp_size);
  LW_CHECK(threads <= kMaxThreads, "rope: " << threads << " threads for chunks of " << bx);
  const dim3 block(static_cast<unsigned>(bx), static_cast<unsigned>(threads / bx));
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(a.tokens)), block, 0, stream, gpu::kOverlapsPrior};
  if (vec) gpu::launch("rope", rope_kernel<T, Pos, C>, cfg, a, q, q_out, k, positions, inv_freq, q_norm, k_norm, cache);
  else gpu::launch("rope", rope_kernel<T, Pos, 1>, cfg, a, q, q_out, k, positions, inv_freq, q_norm, k_norm, cache);
}

#define LW_ROPE(T, P)                                                                                              \
  template void rope<T, P>(const RopeArgs&, const T*, T*, T*, const P*, const float*, int, cudaStream_t, const T*, \
                           const T*, const RopeCacheWrite<T>&);
LW_ROPE(float, int32_t)
LW_ROPE(float, int64_t)
LW_ROPE(half, int32_t)
LW_ROPE(half, int64_t)
LW_ROPE(bfloat16, int32_t)
LW_ROPE(bfloat16, int64_t)
#undef LW_ROPE

}  // namespace lw::kernels
