#include "kernels/attention_prefill.h"

#include <algorithm>
#include <cmath>

#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;

constexpr int kWarps = kPrefillTileRows / 16;  // one 16-row fragment of queries per warp
constexpr int kPad = 8;                        // elements added to each shared row: spreads the banks

// Keys per tile: 64, or 32 for the widest heads (their K and V tiles would not fit beside each
// other in the 64 KiB of an AMD work-group's LDS).
template <int D>
LW_HOST_DEVICE constexpr int key_tile() {
  return D > 128 ? 32 : 64;  // lint: not-a-warp (keys)
}

template <class T, int D>
constexpr size_t shared_bytes() {
  constexpr int kn = key_tile<D>();
  const size_t kv = 2ull * kn * (D + kPad);
  const size_t staging = mma::kCMatchesA ? 0 : static_cast<size_t>(kWarps) * 16 * (16 + kPad);
  return (kv + staging) * sizeof(T);
}

// Grid (tile, query head). Each tile of keys: K and V to shared memory (all threads), then per
// warp S = Q.K^T on the matrix cores, scale, soft-cap and mask, the online softmax update, and
// O += P.V. Rows past the sequence's new tokens compute on zeros and are not written.
template <class T, int D>
__global__ void prefill_kernel(PrefillAttentionArgs a, const T* q, const T* k_cache, const T* v_cache,
                               const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info, T* out) {
#if LW_MATRIX_CORES
  constexpr int KN = key_tile<D>(), KS = D + kPad, PS = 16 + kPad, V = gpu::kVecWidth<T>;
  LW_DYNAMIC_SHARED(T, smem);
  const auto k_tile = smem;
  const auto v_tile = smem + KN * KS;
  const int tile = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const int s = tile_info[2 * tile], q0 = tile_info[2 * tile + 1];
  const int row0 = seq_info[3 * s], qlen = seq_info[3 * s + 1], ctx = seq_info[3 * s + 2];
  const int prefix = ctx - qlen;
  const int kvh = h / (a.q_heads / a.kv_heads);
  const int tid = static_cast<int>(gpu::linear_thread_id()), nthreads = static_cast<int>(gpu::block_threads());
  const int warp = gpu::warp_id(), lane = gpu::lane_id();
  const int wq0 = q0 + 16 * warp;  // the warp's first new token
  const int32_t* table = block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int64_t slot_stride = static_cast<int64_t>(a.kv_heads) * D;

  mma::FragA<T> qa[D / 16];
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) {
#pragma unroll
    for (int i = 0; i < mma::kA; ++i) {
      const int r = wq0 + mma::a_row(lane, i);
      qa[kd].x[i] = r < qlen ? q[(static_cast<int64_t>(row0 + r) * a.q_heads + h) * D + kd * 16 + mma::a_col(lane, i)]
                             : gpu::from_float<T>(0.0f);
    }
  }
  mma::FragC o[D / 16];
#pragma unroll
  for (int dt = 0; dt < D / 16; ++dt) mma::fill(o[dt], 0.0f);
  float m[mma::kRowSlots], l[mma::kRowSlots];
#pragma unroll
  for (int r = 0; r < mma::kRowSlots; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }

  // Keys the block needs: up to its last query's position; from its first query's window.
  const int last = min(q0 + kPrefillTileRows, qlen) - 1;
  const int key_end = prefix + last + 1;
  const int key_begin = a.window > 0 ? max(0, prefix + q0 - a.window + 1) : 0;
  // What this warp's rows can see (uniform across the warp).
  const bool warp_rows = wq0 < qlen;
  const int warp_last_pos = prefix + min(wq0 + 15, qlen - 1);
  const int warp_first_key = a.window > 0 ? prefix + wq0 - a.window + 1 : 0;

  for (int kv0 = key_begin / KN * KN; kv0 < key_end; kv0 += KN) {
    __syncthreads();  // the previous tile's readers are done
    for (int e = tid; e < KN * (D / V); e += nthreads) {
      const int r = e / (D / V), c = e - r * (D / V);
      const int t = kv0 + r;
      gpu::Vec<T, V> kv, vv;
      if (t < key_end) {
        const int64_t slot = static_cast<int64_t>(table[t / a.block_size]) * a.block_size + t % a.block_size;
        const int64_t off = slot * slot_stride + static_cast<int64_t>(kvh) * D + c * V;
        kv = gpu::load_vec<V>(k_cache + off);
        vv = gpu::load_vec<V>(v_cache + off);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) kv.v[j] = vv.v[j] = gpu::from_float<T>(0.0f);
      }
      gpu::store_vec_at<V>(k_tile, r * KS + c * V, kv);
      gpu::store_vec_at<V>(v_tile, r * KS + c * V, vv);
    }
    __syncthreads();
    if (!warp_rows || kv0 > warp_last_pos || kv0 + KN - 1 < warp_first_key) continue;

    mma::FragC sc[KN / 16];
#pragma unroll
    for (int nt = 0; nt < KN / 16; ++nt) {
      mma::fill(sc[nt], 0.0f);
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd) {
        mma::FragB<T> kb;
        mma::load_b_transposed_shared(kb, k_tile + nt * 16 * KS + kd * 16, KS);
        mma::mma(sc[nt], qa[kd], kb, sc[nt]);
      }
    }

    float tile_max[mma::kRowSlots];
#pragma unroll
    for (int r = 0; r < mma::kRowSlots; ++r) tile_max[r] = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < KN / 16; ++nt) {
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        const int row = wq0 + mma::c_row(lane, i), key = kv0 + nt * 16 + mma::c_col(lane, i);
        const int pos = prefix + row;
        float x = sc[nt].x[i] * a.scale;
        if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
        const bool visible = row < qlen && key <= pos && (a.window <= 0 || pos - key < a.window);
        x = visible ? x : -INFINITY;
        sc[nt].x[i] = x;
        tile_max[mma::c_slot(i)] = fmaxf(tile_max[mma::c_slot(i)], x);
      }
    }
    float ref[mma::kRowSlots], corr[mma::kRowSlots];
#pragma unroll
    for (int r = 0; r < mma::kRowSlots; ++r) {
      const float m_new = fmaxf(m[r], mma::reduce_row(tile_max[r], gpu::MaxOp{}));
      // A row that has seen no key yet keeps m = -inf: exponentials against 0 give zeros.
      ref[r] = m_new == -INFINITY ? 0.0f : m_new;
      corr[r] = __expf(m[r] - ref[r]);
      m[r] = m_new;
      l[r] *= corr[r];
    }
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) o[dt].x[i] *= corr[mma::c_slot(i)];
    }
#pragma unroll
    for (int nt = 0; nt < KN / 16; ++nt) {
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        const float p = __expf(sc[nt].x[i] - ref[mma::c_slot(i)]);
        sc[nt].x[i] = p;
        l[mma::c_slot(i)] += p;  // this lane's part of the row; summed over the row at the end
      }
    }

#pragma unroll
    for (int kc = 0; kc < KN / 16; ++kc) {
      mma::FragA<T> pa;
      if constexpr (mma::kCMatchesA) {
        pa = mma::c_as_a<T>(sc[kc]);
      } else {
        // This layout's C fragment is not an A fragment: through the warp's staging tile.
        const auto staging = smem + 2 * KN * KS + warp * 16 * PS;
#pragma unroll
        for (int i = 0; i < mma::kC; ++i) {
          staging[mma::c_row(lane, i) * PS + mma::c_col(lane, i)] = gpu::from_float<T>(sc[kc].x[i]);
        }
        gpu::sync_warp();
        mma::load_a_shared(pa, staging, PS);
        gpu::sync_warp();  // read before the next chunk overwrites it
      }
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        mma::FragB<T> vb;
        mma::load_b_shared(vb, v_tile + kc * 16 * KS + dt * 16, KS);
        mma::mma(o[dt], pa, vb, o[dt]);
      }
    }
  }

  float inv[mma::kRowSlots];
#pragma unroll
  for (int r = 0; r < mma::kRowSlots; ++r) {
    const float sum = mma::reduce_row(l[r], gpu::SumOp{});
    inv[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
#pragma unroll
  for (int dt = 0; dt < D / 16; ++dt) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) {
      const int row = wq0 + mma::c_row(lane, i);
      if (row < qlen) {
        out[(static_cast<int64_t>(row0 + row) * a.q_heads + h) * D + dt * 16 + mma::c_col(lane, i)] =
            gpu::from_float<T>(o[dt].x[i] * inv[mma::c_slot(i)]);
      }
    }
  }
#else
  __trap();  // no matrix cores in this device compilation: the op never selects this path here
#endif
}

template <class T, int D>
void launch_prefill(const PrefillAttentionArgs& a, const T* q, const T* k_cache, const T* v_cache,
                    const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info, T* out,
                    int warp_size, cudaStream_t stream) {
  gpu::launch("prefill_attention", prefill_kernel<T, D>,
              {dim3(static_cast<unsigned>(a.tiles), static_cast<unsigned>(a.q_heads)), dim3(kWarps * warp_size),
               shared_bytes<T, D>(), stream},
              a, q, k_cache, v_cache, block_tables, seq_info, tile_info, out);
}

}  // namespace

const std::vector<int>& prefill_head_dims() {
  static const std::vector<int> dims = {64, 80, 96, 128, 256};  // lint: not-a-warp
  return dims;
}
bool prefill_head_dim_supported(int head_dim) {
  const auto& d = prefill_head_dims();
  return std::find(d.begin(), d.end(), head_dim) != d.end();
}

PrefillTables prefill_tables(const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens) {
  PrefillTables t;
  int32_t row = 0;
  for (size_t s = 0; s < query_lens.size(); ++s) {
    t.seq_info.insert(t.seq_info.end(), {row, query_lens[s], context_lens[s]});
    for (int32_t q0 = 0; q0 < query_lens[s]; q0 += kPrefillTileRows) {
      t.tile_info.insert(t.tile_info.end(), {static_cast<int32_t>(s), q0});
      ++t.tiles;
    }
    row += query_lens[s];
  }
  return t;
}

template <class T>
void prefill_attention(const PrefillAttentionArgs& a, const T* q, const T* k_cache, const T* v_cache,
                       const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info, T* out,
                       int warp_size, cudaStream_t stream) {
  if (a.tiles == 0) return;
  LW_CHECK(a.kv_heads > 0 && a.q_heads % a.kv_heads == 0,
           "prefill_attention: " << a.q_heads << " query heads over " << a.kv_heads << " key/value heads");
  switch (a.head_dim) {
    case 64: launch_prefill<T, 64>(a, q, k_cache, v_cache, block_tables, seq_info, tile_info, out, warp_size, stream); break;  // lint: not-a-warp
    case 80: launch_prefill<T, 80>(a, q, k_cache, v_cache, block_tables, seq_info, tile_info, out, warp_size, stream); break;
    case 96: launch_prefill<T, 96>(a, q, k_cache, v_cache, block_tables, seq_info, tile_info, out, warp_size, stream); break;
    case 128: launch_prefill<T, 128>(a, q, k_cache, v_cache, block_tables, seq_info, tile_info, out, warp_size, stream); break;
    case 256: launch_prefill<T, 256>(a, q, k_cache, v_cache, block_tables, seq_info, tile_info, out, warp_size, stream); break;
    default: LW_FAIL("prefill_attention: head_dim " << a.head_dim << " is not one of 64, 80, 96, 128, 256");
  }
}

template void prefill_attention<half>(const PrefillAttentionArgs&, const half*, const half*, const half*, const int32_t*,
                                      const int32_t*, const int32_t*, half*, int, cudaStream_t);
template void prefill_attention<bfloat16>(const PrefillAttentionArgs&, const bfloat16*, const bfloat16*, const bfloat16*,
                                          const int32_t*, const int32_t*, const int32_t*, bfloat16*, int, cudaStream_t);

}  // namespace lw::kernels
