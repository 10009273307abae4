#include "kernels/sampling.h"

#include <cmath>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/portable_math.h"
#include "gpu/tree_reduce.h"

namespace lw::kernels {

namespace {

constexpr int kThreads = kSamplingThreads;

// One block of kThreads per sequence. The passes every sequence takes (the raw maximum and
// sum, the copy into the workspace, the greedy choice; greedy on raw logits only the first two,
// without the copy) stride over the vocabulary, so that a
// warp's loads and stores are contiguous; the sampling passes give thread j the contiguous
// chunk [j * chunk, (j + 1) * chunk) (the draw walks the chunks in index order). Sums add each
// thread's elements in index order, then combine the threads by a fixed pairwise tree: the
// order, and so every rounding, is the same on every target and warp size. Maxima and counts
// are exact in any order.
// Orders floats as unsigned integers (negative below positive), for bisection on raw logits.
LW_DEVICE_INLINE unsigned order_key(float f) {
  const unsigned b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

// The largest key in [a, b] for which keep(key) holds, where keep is true at a and, once
// false, stays false for larger keys (bisection: 32 steps at most; every thread of the block
// calls, since keep reduces over the block).
template <class Keep>
LW_DEVICE_INLINE unsigned largest_cut(unsigned a, unsigned b, Keep keep) {
  while (a < b) {
    const unsigned mid = a + (b - a) / 2 + 1;  // in (a, b], no overflow at b = ~0u
    if (keep(mid)) a = mid;
    else b = mid - 1;
  }
  return a;
}

// f(i, load(i)) for i = thread, thread + kThreads, ... below n, in increasing order, with the
// loads of kAhead elements issued before their use: one load in flight per warp would leave
// the pass bound by the memory latency.
constexpr int kAhead = 8;
template <class Load, class F>
LW_DEVICE_INLINE void for_strided(int thread, int64_t n, Load load, F f) {
  for (int64_t base = thread; base < n; base += int64_t{kAhead} * kThreads) {
    float v[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t i = base + int64_t{u} * kThreads;
      v[u] = i < n ? load(i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t i = base + int64_t{u} * kThreads;
      if (i < n) f(i, v[u]);
    }
  }
}

template <class T>
__global__ void sample_kernel(const T* logits, int64_t vocab, SamplingParams p, float* workspace, int32_t* tokens,
                              float* logprobs, int top_n, int32_t* top_ids, float* top_logprobs) {
  gpu::begin_after_prior_grid();
  LW_SHARED(float, fs, [kThreads]);
  LW_SHARED(int, is, [kThreads]);
  const int64_t s = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const T* x = logits + s * vocab;
  float* w = workspace + s * vocab;
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t lo = tid * chunk, hi = lo + chunk < vocab ? lo + chunk : vocab;

  auto tree_sum = [&](float v) { return gpu::tree_reduce(v, fs, gpu::SumOp{}); };
  auto tree_count = [&](int v) { return gpu::tree_reduce(v, is, gpu::SumOp{}); };
  auto tree_max = [&](float v) { return gpu::tree_reduce(v, fs, gpu::MaxOp{}); };

  const float temperature = p.temperature[s];
  const float rep = p.repetition_penalty[s], pres = p.presence_penalty[s], freq = p.frequency_penalty[s];
  const bool penalised = p.history_len > 0 && (rep != 1.0f || pres != 0.0f || freq != 0.0f);
  // Greedy on the raw logits (no penalty, no bias in the batch): the choice comes from the first
  // pass and nothing goes through the workspace (a third of the bytes). The same token as the
  // greedy pass below over an unchanged copy: each thread's first largest, the lowest id of those.
  const bool plain_greedy = temperature == 0.0f && !penalised && p.bias_len == 0;

  // The raw distribution, for the log-probability of the chosen token.
  const auto logit = [&](int64_t i) { return gpu::to_float(x[i]); };
  float m = -INFINITY;
  int64_t raw_arg = tid < vocab ? tid : -1;  // the thread's first largest logit
  for_strided(tid, vocab, logit, [&](int64_t i, float v) {
    if (v > m) raw_arg = i;
    m = fmaxf(m, v);
  });
  const float raw_max = tree_max(m);
  float acc = 0.0f;
  if (plain_greedy) {
    for_strided(tid, vocab, logit, [&](int64_t, float v) { acc += gpu::exp_portable(v - raw_max); });
  } else {
    for_strided(tid, vocab, logit, [&](int64_t i, float v) {
      w[i] = v;
      acc += gpu::exp_portable(v - raw_max);
    });
  }
  const float raw_sum = tree_sum(acc);

  // Penalties over the history, once per distinct token: the thread holding a token's first
  // occurrence counts it and adjusts its logit.
  if (penalised) {
    const int32_t* hist = p.history + s * p.history_len;
    for (int64_t h = tid; h < p.history_len; h += kThreads) {
      const int32_t id = hist[h];
      if (id < 0 || id >= vocab) continue;
      bool first = true;
      for (int64_t j = 0; j < h && first; ++j) first = hist[j] != id;
      if (!first) continue;
      int count = 0;
      for (int64_t j = 0; j < p.history_len; ++j) count += hist[j] == id;
      float v = w[id];
      if (rep != 1.0f) v = v > 0.0f ? v / rep : v * rep;
      v = fmaf(-freq, static_cast<float>(count), v) - pres;
      w[id] = v;
    }
  }
  __syncthreads();
  // Logit biases, distinct ids per row: no two threads write the same logit.
  if (p.bias_len > 0) {
    for (int64_t b = tid; b < p.bias_len; b += kThreads) {
      const int32_t id = p.bias_ids[s * p.bias_len + b];
      if (id >= 0 && id < vocab) w[id] += p.bias_values[s * p.bias_len + b];
    }
    __syncthreads();
  }

  int64_t token = -1;
  if (plain_greedy) {
    token = gpu::tree_reduce((m == raw_max && raw_arg >= 0) ? static_cast<int>(raw_arg) : 0x7fffffff, is, gpu::MinOp{});
  } else if (temperature == 0.0f) {
    // Greedy: the largest logit, ties to the lowest id (each thread's first of its largest).
    float best = -INFINITY;
    int64_t arg = tid < vocab ? tid : -1;
    for_strided(tid, vocab, [&](int64_t i) { return w[i]; }, [&](int64_t i, float v) {
      if (v > best) {
        best = v;
        arg = i;
      }
    });
    const float top = tree_max(best);
    // The lowest id holding the maximum: each thread offers its own, the tree keeps the least.
    token = gpu::tree_reduce((best == top && arg >= 0) ? static_cast<int>(arg) : 0x7fffffff, is, gpu::MinOp{});
  } else {
    // Unnormalised probabilities p_i = exp(l_i / T - max), in [0, 1], the largest exactly 1.
    float mm = -INFINITY;
    for (int64_t i = lo; i < hi; ++i) {
      w[i] = w[i] / temperature;
      mm = fmaxf(mm, w[i]);
    }
    const float mx = tree_max(mm);
    for (int64_t i = lo; i < hi; ++i) w[i] = gpu::exp_portable(w[i] - mx);
    __syncthreads();

    auto count_ge = [&](float t) {
      int c = 0;
      for (int64_t i = lo; i < hi; ++i) c += w[i] >= t;
      return tree_count(c);
    };
    auto mass_ge = [&](float t) {
      float a = 0.0f;
      for (int64_t i = lo; i < hi; ++i) a += w[i] >= t ? w[i] : 0.0f;
      return tree_sum(a);
    };
    // Thresholds on p found by bisection over the float bit patterns (monotone for p >= 0).
    unsigned cut = 0;  // keep p >= __uint_as_float(cut)
    const int top_k = p.top_k[s];
    const unsigned one = 0x3f800000u;  // the bits of 1.0f, the largest p
    if (top_k > 0 && top_k < vocab) {  // the largest cut that still keeps >= k tokens
      cut = largest_cut(0u, one, [&](unsigned c) { return count_ge(__uint_as_float(c)) >= top_k; });
    }
    const float top_p = p.top_p[s];
    if (top_p < 1.0f) {
      const float target = top_p * mass_ge(__uint_as_float(cut));
      // The largest cut whose kept mass still reaches the target.
      cut = largest_cut(cut, one, [&](unsigned c) { return mass_ge(__uint_as_float(c)) >= target; });
    }
    const float min_p = p.min_p[s];
    float threshold = __uint_as_float(cut);
    if (min_p > threshold) threshold = min_p;  // the most likely token has p = 1

    // Draw: goal = u * kept mass; walk the chunk sums, then the chosen chunk, in index order.
    const float total = mass_ge(threshold);
    float part = 0.0f;
    for (int64_t i = lo; i < hi; ++i) part += w[i] >= threshold ? w[i] : 0.0f;
    fs[tid] = part;
    __syncthreads();
    if (tid == 0) {
      const float goal = gpu::uniform_portable(p.seed[s], p.step[s]) * total;
      float cum = 0.0f;
      int64_t pick = -1;
      for (int j = 0; j < kThreads && pick < 0; ++j) {
        const float c = fs[j];
        if (c > 0.0f && cum + c > goal) {
          const int64_t jl = j * chunk, jh = jl + chunk < vocab ? jl + chunk : vocab;
          for (int64_t i = jl; i < jh && pick < 0; ++i) {
            if (w[i] >= threshold) {
              cum += w[i];
              if (cum > goal) pick = i;
            }
          }
        } else {
          cum += c;
        }
      }
      // Rounding can leave the goal at the very end: take the last kept token.
      for (int64_t i = vocab - 1; pick < 0 && i >= 0; --i) {
        if (w[i] >= threshold) pick = i;
      }
      is[0] = static_cast<int>(pick);
    }
    __syncthreads();
    token = is[0];
    __syncthreads();  // every thread has read is[0] before it is reused below
  }
  const float log_norm = raw_max + logf(raw_sum);
  if (tid == 0) {
    tokens[s] = static_cast<int32_t>(token);
    logprobs[s] = gpu::to_float(x[token]) - log_norm;
  }

  // The top_n raw logits: the largest key cut keeping >= top_n tokens, then those above it and
  // the lowest ids at it, gathered in id order and sorted by thread 0.
  if (top_n > 0) {
    const int n = top_n < vocab ? top_n : static_cast<int>(vocab);
    const unsigned a = largest_cut(0u, ~0u, [&](unsigned key) {
      int c = 0;
      for (int64_t i = lo; i < hi; ++i) c += order_key(gpu::to_float(x[i])) >= key;
      return tree_count(c) >= n;
    });
    int above = 0, at = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const unsigned k = order_key(gpu::to_float(x[i]));
      above += k > a;
      at += k == a;
    }
    const int total_above = tree_count(above);
    // Offsets in chunk (= id) order, by thread 0 over the per-thread counts.
    LW_SHARED(int, at_offset, [kThreads]);
    LW_SHARED(int, pick, [kMaxTopLogprobs]);
    is[tid] = above;
    at_offset[tid] = at;
    __syncthreads();
    if (tid == 0) {
      int acc_above = 0, acc_at = 0;
      for (int j = 0; j < kThreads; ++j) {
        const int ab = is[j], eq = at_offset[j];
        is[j] = acc_above;
        at_offset[j] = acc_at;
        acc_above += ab;
        acc_at += eq;
      }
    }
    __syncthreads();
    int slot_above = is[tid], slot_at = total_above + at_offset[tid];
    for (int64_t i = lo; i < hi; ++i) {
      const unsigned k = order_key(gpu::to_float(x[i]));
      if (k > a) pick[slot_above++] = static_cast<int>(i);
      else if (k == a && slot_at < n) pick[slot_at++] = static_cast<int>(i);
    }
    __syncthreads();
    if (tid == 0) {
      int ids[kMaxTopLogprobs];
      for (int j = 0; j < n; ++j) ids[j] = pick[j];
      for (int j = 1; j < n; ++j) {  // insertion sort: larger logit first, then lower id
        const int id = ids[j];
        const float v = gpu::to_float(x[id]);
        int m = j - 1;
        while (m >= 0 && (gpu::to_float(x[ids[m]]) < v || (gpu::to_float(x[ids[m]]) == v && ids[m] > id))) {
          ids[m + 1] = ids[m];
          --m;
        }
        ids[m + 1] = id;
      }
      for (int j = 0; j < n; ++j) {
        top_ids[s * top_n + j] = ids[j];
        top_logprobs[s * top_n + j] = gpu::to_float(x[ids[j]]) - log_norm;
      }
      for (int j = n; j < top_n; ++j) {  // a vocabulary smaller than top_n
        top_ids[s * top_n + j] = -1;
        top_logprobs[s * top_n + j] = -INFINITY;
      }
    }
  }
}

}  // namespace

template <class T>
void sample(const T* logits, int64_t seqs, int64_t vocab, const SamplingParams& p, float* workspace, int32_t* tokens,
            float* logprobs, int top_n, int32_t* top_ids, float* top_logprobs, cudaStream_t stream) {
  if (seqs == 0) return;
  LW_CHECK(vocab > 0 && vocab < 0x7fffffff, "sample: vocabulary of " << vocab << " tokens");
  LW_CHECK(seqs <= 0x7fffffff, "sample: " << seqs << " sequences exceed the grid limit");
  LW_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs, "sample: top_n " << top_n << " must be in [0, " << kMaxTopLogprobs << "]");
  gpu::launch("sample", sample_kernel<T>, {dim3(static_cast<unsigned>(seqs)), dim3(kThreads), 0, stream, gpu::kOverlapsPrior}, logits,
              vocab, p, workspace, tokens, logprobs, top_n, top_ids, top_logprobs);
}

#define LW_SAMPLE(T)                                                                                          \
  template void sample<T>(const T*, int64_t, int64_t, const SamplingParams&, float*, int32_t*, float*, int, int32_t*, \
                          float*, cudaStream_t);
LW_SAMPLE(float)
LW_SAMPLE(half)
LW_SAMPLE(bfloat16)
#undef LW_SAMPLE

}  // namespace lw::kernels
