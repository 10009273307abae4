#include "kernels/attention_decode.h"

#include <cmath>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/kv_cache.h"

namespace lw::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kTokenLanes = 16;  // lanes that share one key row in the QK stage

// Tokens per partition: 512 (128 for wide head groups, whose scores take more shared memory),
// halved down to kMinPartition while the launch would have fewer than kFillBlocks blocks, so that a small
// batch of short contexts still spreads over the device.
constexpr int64_t kFillBlocks = 256;
constexpr int kMinPartition = 64;  // tokens  lint: not-a-warp
int partition_size(const DecodeAttentionArgs& a) {
  if (a.partition > 0) return a.partition;
  int part = max_partition_size(a.q_heads, a.kv_heads);
  const int64_t rows = static_cast<int64_t>(a.seqs) * a.kv_heads;
  while (part > kMinPartition && rows * ((a.max_context + part - 1) / part) < kFillBlocks) part /= 2;
  return part;
}

struct Layout {  // dynamic shared memory, in floats
  int q, logits, stats, scratch, total;
};

LW_HOST_DEVICE inline Layout layout(int group, int head_dim, int part, int vec, int threads) {
  const int items = group * (head_dim / vec);
  const int scratch = items <= threads ? (threads / items) * items * vec : items * vec;
  Layout l;
  l.q = 0;
  l.logits = group * head_dim;
  l.stats = l.logits + group * part;
  l.scratch = l.stats + 2 * group;
  l.total = l.scratch + scratch;
  return l;
}

// Grid (partition, kv head, sequence). Stages: q of the head group to shared memory; scores of
// the partition's tokens (kTokenLanes lanes per key row); per query head, maximum and
// exponentials (one warp per head); P.V with (head, vector) items over token groups, reduced
// through shared memory. Writes the output directly when the context has one partition,
// else the partition's normalised output, maximum and sum for the merge.
template <class T, class C, int VEC>
__global__ void decode_kernel(DecodeAttentionArgs a, const T* q, const C* k_cache, const C* v_cache, KvScales scales,
                              const int32_t* block_tables, const int32_t* context_lens, const int32_t* table_rows,
                              float* part_out, float* part_max, float* part_sum, T* out, int part, int parts) {
  LW_DYNAMIC_SHARED(float, smem);
  const int p = static_cast<int>(blockIdx.x), kvh = static_cast<int>(blockIdx.y), s = static_cast<int>(blockIdx.z);
  const int ctx = context_lens[s];
  const int begin = p * part;
  if (begin >= ctx && !(ctx == 0 && p == 0)) return;
  const int n = (ctx - begin < part ? ctx - begin : part) > 0 ? (ctx - begin < part ? ctx - begin : part) : 0;
  const int group = a.q_heads / a.kv_heads;
  const int hd = a.head_dim, dvecs = hd / VEC;
  const int tid = static_cast<int>(threadIdx.x), nthreads = static_cast<int>(blockDim.x);
  const Layout l = layout(group, hd, part, VEC, nthreads);
  if (a.window > 0 && begin + n <= ctx - a.window) {
    // Every key of the partition is outside the window (never the only partition: the last key
    // is always seen): an empty result for the merge, without reading the cache.
    for (int e = tid; e < group * hd; e += nthreads) {
      const int g = e / hd, d = e - g * hd;
      const int64_t base = (static_cast<int64_t>(s) * a.q_heads + kvh * group + g) * parts + p;
      part_out[base * hd + d] = 0.0f;
      if (d == 0) {
        part_max[base] = -INFINITY;
        part_sum[base] = 0.0f;
      }
    }
    return;
  }
  const int64_t row = static_cast<int64_t>(a.kv_heads) * hd;  // elements per cache slot
  const int32_t* table = block_tables + static_cast<int64_t>(table_rows ? table_rows[s] : s) * a.max_blocks_per_seq;

  for (int i = tid; i < group * hd; i += nthreads) {
    const int g = i / hd, d = i - g * hd;
    smem[l.q + i] = gpu::to_float(q[(static_cast<int64_t>(s) * a.q_heads + kvh * group + g) * hd + d]);
  }
  __syncthreads();

  // Scores: each kTokenLanes-lane group takes a key row; the lanes split its vectors.
  const int token_groups = nthreads / kTokenLanes, lane = tid % kTokenLanes;
  // The loop bound is the same for every lane of a group, so all reach the shuffles.
  for (int t0 = tid / kTokenLanes; t0 < ((n + token_groups - 1) / token_groups) * token_groups; t0 += token_groups) {
    const bool valid = t0 < n;
    float dots[16];
#pragma unroll
    for (int g = 0; g < 16; ++g) dots[g] = 0.0f;
    if (valid) {
      const int t = begin + t0;
      const int64_t slot = static_cast<int64_t>(table[t / a.block_size]) * a.block_size + t % a.block_size;
      const C* krow = k_cache + slot * row + static_cast<int64_t>(kvh) * hd;
      const float kscale = kQuantizedKv<T, C> ? scales.k[kv_scale_index(scales, slot, kvh)] : 1.0f;
      for (int dv = lane; dv < dvecs; dv += kTokenLanes) {
        float kv[VEC];
        kv_load<VEC>(krow + dv * VEC, kscale, kv);
#pragma unroll
        for (int g = 0; g < 16; ++g) {
          if (g < group) {
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc += static_cast<float>(smem[l.q + g * hd + dv * VEC + j]) * kv[j];
            dots[g] += acc;
          }
        }
      }
    }
#pragma unroll
    for (int g = 0; g < 16; ++g) {
      if (g < group) {
        const float d = gpu::warp_reduce_sum<kTokenLanes>(dots[g]);
        if (valid && lane == 0) {
          float x = d * a.scale;
          if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
          // Outside the window: a score of -inf (the key's weight is zero).
          if (a.window > 0 && ctx - 1 - (begin + t0) >= a.window) x = -INFINITY;
          smem[l.logits + g * part + t0] = x;
        }
      }
    }
  }
  __syncthreads();

  // Per query head: maximum, exponentials in place, sum. One warp per head.
  const int warps = nthreads / gpu::kWarpSize, w = tid / gpu::kWarpSize, wl = tid % gpu::kWarpSize;
  for (int g = w; g < group; g += warps) {
    float m = -INFINITY;
    for (int t = wl; t < n; t += gpu::kWarpSize) m = fmaxf(m, smem[l.logits + g * part + t]);
    m = gpu::warp_reduce_max(m);
    const float ref = m == -INFINITY ? 0.0f : m;  // a partition wholly outside the window
    float sum = 0.0f;
    for (int t = wl; t < n; t += gpu::kWarpSize) {
      const float e = __expf(static_cast<float>(smem[l.logits + g * part + t]) - ref);
      smem[l.logits + g * part + t] = e;
      sum += e;
    }
    sum = gpu::warp_reduce_sum(sum);
    if (wl == 0) {
      smem[l.stats + g] = m;
      smem[l.stats + group + g] = sum;
    }
  }
  __syncthreads();

  // P.V: (head, vector) items; token groups split the tokens; partial sums meet in scratch.
  const int items = group * dvecs;
  const int tgs = items <= nthreads ? nthreads / items : 1;
  const int tg = items <= nthreads ? tid / items : 0;
  if (tg < tgs) {
    const int step = items <= nthreads ? items : nthreads;
    for (int item = items <= nthreads ? tid % items : tid; item < items; item += step) {
      const int g = item / dvecs, dv = item - g * dvecs;
      float acc[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
      // Unrolled so that several V loads are in flight at once: with few tokens per thread
      // the loop is bound by memory latency, not bandwidth.
#pragma unroll 4
      for (int t0 = tg; t0 < n; t0 += tgs) {
        const int t = begin + t0;
        const int64_t slot = static_cast<int64_t>(table[t / a.block_size]) * a.block_size + t % a.block_size;
        float vv[VEC];
        kv_load<VEC>(v_cache + slot * row + static_cast<int64_t>(kvh) * hd + dv * VEC,
                     kQuantizedKv<T, C> ? scales.v[kv_scale_index(scales, slot, kvh)] : 1.0f, vv);
        const float pr = smem[l.logits + g * part + t0];
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] += pr * vv[j];
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) smem[l.scratch + (tg * items + item) * VEC + j] = acc[j];
    }
  }
  __syncthreads();

  for (int e = tid; e < items * VEC; e += nthreads) {
    float total = 0.0f;
    for (int k = 0; k < tgs; ++k) total += smem[l.scratch + k * items * VEC + e];
    const int g = e / hd, d = e - g * hd;
    const int qh = kvh * group + g;
    const float sum = smem[l.stats + group + g];
    const float value = sum > 0.0f ? total / sum : 0.0f;
    if (parts == 1) {
      out[(static_cast<int64_t>(s) * a.q_heads + qh) * hd + d] = gpu::from_float<T>(value);
    } else {
      const int64_t base = (static_cast<int64_t>(s) * a.q_heads + qh) * parts + p;
      part_out[base * hd + d] = value;
      if (d == 0) {
        part_max[base] = smem[l.stats + g];
        part_sum[base] = sum;
      }
    }
  }
}

// Grid (q head, sequence): combines the partitions of one head.
template <class T>
__global__ void merge_kernel(DecodeAttentionArgs a, const int32_t* context_lens, const float* part_out,
                             const float* part_max, const float* part_sum, T* out, int part, int parts) {
  const int qh = static_cast<int>(blockIdx.x), s = static_cast<int>(blockIdx.y);
  const int ctx = context_lens[s];
  const int used = ctx > 0 ? (ctx + part - 1) / part : 0;
  const int64_t base = (static_cast<int64_t>(s) * a.q_heads + qh) * parts;
  float m = -INFINITY;
  for (int p = 0; p < used; ++p) m = fmaxf(m, part_max[base + p]);
  float total = 0.0f;
  for (int p = 0; p < used; ++p) total += part_sum[base + p] * __expf(part_max[base + p] - m);
  for (int d = static_cast<int>(threadIdx.x); d < a.head_dim; d += static_cast<int>(blockDim.x)) {
    float acc = 0.0f;
    for (int p = 0; p < used; ++p) {
      acc += part_out[(base + p) * a.head_dim + d] * part_sum[base + p] * __expf(part_max[base + p] - m);
    }
    out[(static_cast<int64_t>(s) * a.q_heads + qh) * a.head_dim + d] = gpu::from_float<T>(total > 0.0f ? acc / total : 0.0f);
  }
}

}  // namespace

int max_partition_size(int q_heads, int kv_heads) { return q_heads / kv_heads <= 8 ? 512 : 128; }
int batch_invariant_partition_size() { return kMinPartition; }

int64_t decode_attention_workspace(const DecodeAttentionArgs& a) {
  const int part = partition_size(a);
  const int64_t parts = (a.max_context + part - 1) / part;
  return parts <= 1 ? 0 : static_cast<int64_t>(a.seqs) * a.q_heads * parts * (a.head_dim + 2);
}

template <class T, class C>
void decode_attention(const DecodeAttentionArgs& a, const T* q, const C* k_cache, const C* v_cache,
                      const KvScales& scales, const int32_t* block_tables, const int32_t* context_lens, const int32_t* table_rows,
                      float* workspace, T* out, int warp_size, cudaStream_t stream) {
  if (a.seqs == 0) return;
  const int group = a.q_heads / a.kv_heads;
  LW_CHECK(group >= 1 && group <= 16, "decode_attention: " << group << " query heads per key/value head (at most 16)");
  constexpr int V = gpu::kVecWidth<T>;
  LW_CHECK(a.head_dim % V == 0 && a.head_dim <= 256,
           "decode_attention: head_dim " << a.head_dim << " must be a multiple of " << V << " and <= 256");
  LW_CHECK(a.partition == 0 || (a.partition >= kMinPartition && a.partition <= max_partition_size(a.q_heads, a.kv_heads) &&
                                 (a.partition & (a.partition - 1)) == 0),
           "decode_attention: partition " << a.partition << " must be 0 or a power of two from " << kMinPartition << " to "
                                          << max_partition_size(a.q_heads, a.kv_heads));
  const int part = partition_size(a);
  const int parts = a.max_context > 0 ? (a.max_context + part - 1) / part : 1;
  const int threads = gpu::round_block_size(kThreads, warp_size);
  const Layout l = layout(group, a.head_dim, part, V, threads);
  const size_t smem = static_cast<size_t>(l.total) * sizeof(float);
  const int64_t per = static_cast<int64_t>(a.seqs) * a.q_heads * parts;
  float* part_out = parts > 1 ? workspace : nullptr;
  float* part_max = parts > 1 ? workspace + per * a.head_dim : nullptr;
  float* part_sum = parts > 1 ? part_max + per : nullptr;
  gpu::launch("decode_attention", decode_kernel<T, C, V>,
              {dim3(static_cast<unsigned>(parts), static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(a.seqs)),
               dim3(threads), smem, stream},
              a, q, k_cache, v_cache, scales, block_tables, context_lens, table_rows, part_out, part_max, part_sum, out, part,
              parts);
  if (parts > 1) {
    const int mt = gpu::round_block_size(a.head_dim < 256 ? a.head_dim : 256, warp_size);
    gpu::launch("decode_attention_merge", merge_kernel<T>,
                {dim3(static_cast<unsigned>(a.q_heads), static_cast<unsigned>(a.seqs)), dim3(mt), 0, stream}, a,
                context_lens, part_out, part_max, part_sum, out, part, parts);
  }
}

#define LW_DECODE(T, C)                                                                                         \
  template void decode_attention<T, C>(const DecodeAttentionArgs&, const T*, const C*, const C*, const KvScales&, \
                                       const int32_t*, const int32_t*, const int32_t*, float*, T*, int, cudaStream_t);
#define LW_DECODE_ALL(T) LW_DECODE(T, T) LW_DECODE(T, uint8_t) LW_DECODE(T, int8_t)
LW_DECODE_ALL(float)
LW_DECODE_ALL(half)
LW_DECODE_ALL(bfloat16)
#undef LW_DECODE_ALL
#undef LW_DECODE

}  // namespace lw::kernels
