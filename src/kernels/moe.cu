#include "kernels/moe.h"

#include <cmath>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/portable_math.h"
#include "gpu/tree_reduce.h"
#include "gpu/vector.h"

namespace lw::kernels {

namespace {

constexpr int kMaxExperts = 256;
constexpr int kMaxK = 16;

// The place of entry i among n scores in the order repeated argmax rounds take them (a higher
// score first, ties to the lower index; NaN counts as -inf): the entries ahead of it. Over all
// i a permutation of 0 .. n-1, so each place below k belongs to exactly one entry.
template <class Scores>
LW_DEVICE_INLINE int rank_of(const Scores& scores, int n, int i) {
  auto key = [](float v) { return v == v ? v : -INFINITY; };
  const float mine = key(scores[i]);
  int rank = 0;
  for (int j = 0; j < n; ++j) {
    const float o = key(scores[j]);
    rank += o > mine || (o == mine && j < i);
  }
  return rank;
}

// One block per token, one thread per expert (threads >= experts, a power of two): the scores'
// maximum and sum by a fixed tree over shared memory, the groups and experts taken by rank
// (rank_of: one pass over shared memory and one barrier instead of a tree's rounds per pick).
template <class T>
__global__ void route_kernel(MoeRouteArgs a, const T* logits, const float* bias, float* weights, int32_t* ids) {
  LW_SHARED(float, score, [kMaxExperts]);    // the weight score (no bias)
  LW_SHARED(float, select, [kMaxExperts]);   // the selection score (with bias); -inf in a group not kept
  LW_SHARED(float, tv, [kMaxExperts]);
  LW_SHARED(float, group_score, [kMaxExperts]);
  LW_SHARED(int, group_kept, [kMaxExperts]);
  LW_SHARED(int, chosen, [kMaxK]);
  const int64_t t = blockIdx.x;
  const int e = static_cast<int>(threadIdx.x);
  const T* row = logits + t * a.experts;

  // Scores: sigmoid per expert, or softmax over the experts.
  const float x = e < a.experts ? gpu::to_float(row[e]) : -INFINITY;
  float s;
  if (a.sigmoid) {
    s = e < a.experts ? 1.0f / (1.0f + gpu::exp_portable(-x)) : 0.0f;
  } else {
    const float mx = gpu::tree_reduce(x, tv, gpu::MaxOp{});
    const float ex = e < a.experts ? gpu::exp_portable(x - mx) : 0.0f;
    // Sum in a fixed tree, as everything here, so all targets agree.
    s = ex / gpu::tree_reduce(ex, tv, gpu::SumOp{});
  }
  if (e < a.experts) {
    score[e] = s;
    select[e] = bias ? s + bias[e] : s;
  }
  __syncthreads();

  // Groups: keep the topk_groups best groups, mask the experts of the others.
  if (a.groups > 1) {
    const int per = a.experts / a.groups;
    if (e < a.groups) {
      float best = -INFINITY, second = -INFINITY;
      for (int j = e * per; j < (e + 1) * per; ++j) {
        const float v = select[j];
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      group_score[e] = a.sigmoid ? best + second : best;
    }
    __syncthreads();
    if (e < a.groups) group_kept[e] = rank_of(group_score, a.groups, e) < a.topk_groups;
    __syncthreads();
    if (e < a.experts && !group_kept[e / per]) select[e] = -INFINITY;
    __syncthreads();
  }

  // Top k by selection score.
  if (e < a.experts) {
    const int rank = rank_of(select, a.experts, e);
    if (rank < a.k) chosen[rank] = e;
  }
  __syncthreads();
  if (e == 0) {
    float sum = 0.0f;
    for (int r = 0; r < a.k; ++r) sum += score[chosen[r]];
    for (int r = 0; r < a.k; ++r) {
      const float w = a.renormalize && sum > 0.0f ? score[chosen[r]] / sum : score[chosen[r]];
      weights[t * a.k + r] = w * a.scale;
      ids[t * a.k + r] = chosen[r];
    }
  }
}

// One thread per expert: counts, offsets by a serial scan, then each expert's rows in order.
__global__ void permutation_kernel(const int32_t* ids, int64_t n, int experts, int32_t* offsets, int32_t* rows,
                                   int32_t* inverse, int k) {
  LW_SHARED(int, counts, [kMaxExperts]);
  const int e = static_cast<int>(threadIdx.x);
  if (e < experts) {
    int c = 0;
    for (int64_t i = 0; i < n; ++i) c += ids[i] == e;
    counts[e] = c;
  }
  __syncthreads();
  if (e == 0) {
    int acc = 0;
    for (int j = 0; j < experts; ++j) {
      offsets[j] = acc;
      acc += counts[j];
    }
    offsets[experts] = acc;
  }
  __syncthreads();
  if (e < experts) {
    int pos = offsets[e];
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] == e) {
        rows[pos] = static_cast<int32_t>(i / k);
        inverse[i] = pos;
        ++pos;
      }
    }
  }
}

template <class T>
__global__ void gather_kernel(const T* x, const int32_t* rows, int64_t hidden, T* out) {
  const int64_t r = blockIdx.x;
  const T* src = x + static_cast<int64_t>(rows[r]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[r * hidden + i] = src[i];
}

// Token blockIdx.x, V consecutive elements per thread (blocks along y cover the row): the
// token's k weights and rows read once, every expert's V elements loaded before any is added
// (a decode step's one token is latency-bound), each element's sum taken over the experts in
// order (fmaf).
template <class T, int V>
__global__ void combine_kernel(const T* expert_out, const float* weights, const int32_t* inverse, int k,
                               int64_t hidden, T* out) {
  const int64_t t = blockIdx.x;
  const int64_t i0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * V;
  if (i0 >= hidden) return;
  float w[kMaxK];
  int64_t from[kMaxK];
#pragma unroll
  for (int j = 0; j < kMaxK; ++j)
    if (j < k) {
      w[j] = weights[t * k + j];
      from[j] = static_cast<int64_t>(inverse[t * k + j]) * hidden + i0;
    }
  gpu::Vec<T, V> v[kMaxK];
#pragma unroll
  for (int j = 0; j < kMaxK; ++j)
    if (j < k) v[j] = gpu::load_vec<V>(expert_out + from[j]);
  gpu::Vec<T, V> o;
#pragma unroll
  for (int c = 0; c < V; ++c) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxK; ++j)
      if (j < k) acc = fmaf(w[j], gpu::to_float(v[j].v[c]), acc);
    o.v[c] = gpu::from_float<T>(acc);
  }
  gpu::store_vec<V>(out + t * hidden + i0, o);
}

int pow2_at_least(int v, int warp_size) {
  int p = warp_size;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

template <class T>
void moe_route(const MoeRouteArgs& a, const T* logits, const float* bias, float* weights, int32_t* ids, int warp_size,
               cudaStream_t stream) {
  if (a.tokens == 0) return;
  LW_CHECK(a.experts >= 1 && a.experts <= kMaxExperts, "moe_route: " << a.experts << " experts (at most 256)");
  LW_CHECK(a.k >= 1 && a.k <= kMaxK && a.k <= a.experts, "moe_route: k " << a.k << " must be in [1, min(16, experts)]");
  LW_CHECK(a.tokens <= 0x7fffffff, "moe_route: " << a.tokens << " tokens exceed the grid limit");
  const int threads = pow2_at_least(a.experts, warp_size);
  gpu::launch("moe_route", route_kernel<T>, {dim3(static_cast<unsigned>(a.tokens)), dim3(threads), 0, stream}, a,
              logits, bias, weights, ids);
}

void moe_permutation(const int32_t* ids, int64_t tokens, int k, int experts, int32_t* offsets, int32_t* rows,
                     int32_t* inverse, int warp_size, cudaStream_t stream) {
  LW_CHECK(experts >= 1 && experts <= kMaxExperts, "moe_permutation: " << experts << " experts (at most 256)");
  gpu::launch("moe_permutation", permutation_kernel, {dim3(1), dim3(gpu::round_block_size(experts, warp_size)), 0, stream},
              ids, tokens * k, experts, offsets, rows, inverse, k);
}

template <class T>
void moe_gather(const T* x, const int32_t* rows, int64_t n, int64_t hidden, T* out, int warp_size, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = gpu::round_block_size(static_cast<int>(hidden < 256 ? hidden : 256), warp_size);
  gpu::launch("moe_gather", gather_kernel<T>, {dim3(static_cast<unsigned>(n)), dim3(threads), 0, stream}, x, rows,
              hidden, out);
}

template <class T>
void moe_combine(const T* expert_out, const float* weights, const int32_t* inverse, int64_t tokens, int k,
                 int64_t hidden, T* out, int warp_size, cudaStream_t stream) {
  if (tokens == 0 || hidden == 0) return;
  LW_CHECK(k >= 1 && k <= kMaxK, "moe_combine: k " << k << " must be in [1, 16]");
  LW_CHECK(tokens <= 0x7fffffff, "moe_combine: " << tokens << " tokens exceed the grid limit");
  auto run = [&]<int V>() {
    const int64_t pieces = (hidden + V - 1) / V;  // V elements each
    const int threads = gpu::round_block_size(static_cast<int>(pieces < 256 ? pieces : 256), warp_size);
    const int64_t chunks = (pieces + threads - 1) / threads;
    LW_CHECK(chunks <= 65535, "moe_combine: a row of " << hidden << " elements exceeds the grid limit");
    gpu::launch("moe_combine", combine_kernel<T, V>,
                {dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(chunks)), dim3(threads), 0, stream}, expert_out,
                weights, inverse, k, hidden, out);
  };
  // Vectors where every row starts on a vector boundary.
  constexpr int V = gpu::kVecWidth<T>;
  if (hidden % V == 0 && gpu::aligned_to(gpu::kVectorBytes, expert_out) && gpu::aligned_to(gpu::kVectorBytes, out))
    run.template operator()<V>();
  else
    run.template operator()<1>();
}

#define LW_MOE(T)                                                                                                    \
  template void moe_route<T>(const MoeRouteArgs&, const T*, const float*, float*, int32_t*, int, cudaStream_t);     \
  template void moe_gather<T>(const T*, const int32_t*, int64_t, int64_t, T*, int, cudaStream_t);                  \
  template void moe_combine<T>(const T*, const float*, const int32_t*, int64_t, int, int64_t, T*, int, cudaStream_t);
LW_MOE(float)
LW_MOE(half)
LW_MOE(bfloat16)
#undef LW_MOE

}  // namespace lw::kernels
