// The steps of a tile of attention that the matrix kernels (prefill, decode) share, on the
// matrix-fragment layer: Q's fragments, the scores' scaling, the online softmax update of a
// tile of scores, O += P.V and the rows written out.
#pragma once
#include <cmath>
#include <type_traits>

#include "gpu/compat.h"
#include "gpu/fast_math.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/warp.h"

namespace lw::kernels::attention_tile {

namespace mma = gpu::mma;

// The warp's 16 query rows as A fragments of U: fragment row r (first + r of the block's rows)
// is q_at(row) (a pointer to its D elements) times `factor` where row < rows, zeros past them.
// q_at is called once per row slot of the lane (its row's address takes divisions).
template <class U, int DT, class QAt>
LW_DEVICE_INLINE void load_q(mma::FragA<U> (&qa)[DT], int first, int rows, QAt q_at, float factor = 1.0f) {
  const int lane = gpu::lane_id();
  decltype(q_at(0)) row_at[mma::kARowSlots];
  bool in[mma::kARowSlots];
#pragma unroll
  for (int s = 0; s < mma::kARowSlots; ++s) {
    const int r = first + mma::a_slot_row(lane, s);
    in[s] = r < rows;
    row_at[s] = q_at(in[s] ? r : 0);  // rows past the end: row 0's address, not read
  }
#pragma unroll
  for (int kd = 0; kd < DT; ++kd) {
#pragma unroll
    for (int i = 0; i < mma::kA; ++i) {
      const int s = mma::a_slot(i);
      qa[kd].x[i] = gpu::from_float<U>(in[s] ? gpu::to_float(row_at[s][kd * 16 + mma::a_col(lane, i)]) * factor : 0.0f);
    }
  }
}

// The online softmax's start: no output, running maxima -inf, sums 0.
template <int DT>
LW_DEVICE_INLINE void start_rows(mma::FragC (&o)[DT], float (&m)[mma::kRowSlots], float (&l)[mma::kRowSlots]) {
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) mma::fill(o[dt], 0.0f);
#pragma unroll
  for (int r = 0; r < mma::kRowSlots; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
}

// Raw q.k products to scores: returns the factor that turns them into log2 units (exp2 of a
// difference is the softmax weight), scale * log2(e), which online_softmax applies in the same
// instruction as the subtraction of the maximum. Where softcap > 0 (softcap * tanh(s * scale /
// softcap)), or the scale is not positive (the maximum would not commute with it), the scores
// are turned into log2 units in place and the factor is 1.
template <int NT>
LW_DEVICE_INLINE float prepare_scores(mma::FragC (&sc)[NT], float scale, float softcap) {
  constexpr float kLog2e = 1.4426950408889634f;
  if (softcap <= 0.0f && scale > 0.0f) return scale * kLog2e;
  const float inv_cap = softcap > 0.0f ? 1.0f / softcap : 0.0f, cap_log2 = softcap * kLog2e;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i)
      sc[nt].x[i] = softcap > 0.0f ? cap_log2 * tanhf(sc[nt].x[i] * scale * inv_cap) : sc[nt].x[i] * scale * kLog2e;
  }
  return 1.0f;
}

// Which keys a prefill block's rows see: block row r is new token r / group of the tile, at
// position first_pos + r / group; it sees keys in [key_begin, key_end) up to its position, and
// within the window (> 0) of it. Rows from `rows` on are padding and see nothing.
struct PrefillMask {
  int rows, group, first_pos, key_begin, key_end, window;
};
// Scores of the warp's rows first_row .. first_row + 15 against keys kv0 .. kv0 + 16 NT - 1 set
// to -inf where the row does not see the key.
template <int NT>
LW_DEVICE_INLINE void mask_scores(mma::FragC (&sc)[NT], const PrefillMask& mask, int first_row, int kv0) {
  const int lane = gpu::lane_id();
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) {
      const int r = first_row + mma::c_row(lane, i), key = kv0 + nt * 16 + mma::c_col(lane, i);
      const int pos = mask.first_pos + r / mask.group;
      const bool visible = r < mask.rows && key <= pos && key >= mask.key_begin && key < mask.key_end &&
                           (mask.window <= 0 || pos - key < mask.window);
      if (!visible) sc[nt].x[i] = -INFINITY;
    }
  }
}

// How far (log2 units) a row's maximum may grow past the reference its probabilities are
// taken against before the reference moves: probabilities reach at most 2^kStaleMax, which the
// fp32 sums and outputs and the 16-bit terms of P hold as well as values up to 1, and the
// output's rescale is skipped on the tiles where no row of the warp moves (most tiles of a long
// row). Exact: the output and the sum share the reference.
inline constexpr float kStaleMax = 8.0f;

// NT fragments of scores of a warp's 16 rows (times `to_log2`, a positive factor, in log2
// units; -inf where masked): the rows' reference maxima m (log2 units, within kStaleMax of
// the true maxima) and sums l (this lane's part of each row) updated, and the scores turned
// into probabilities in place. Returns whether a row's reference moved: the output must then be
// multiplied by corr (rescale_rows) before this tile's P.V adds to it. The whole warp calls it.
template <int NT>
LW_DEVICE_INLINE bool softmax_tile(mma::FragC (&sc)[NT], float (&m)[mma::kRowSlots], float (&l)[mma::kRowSlots],
                                   float (&corr)[mma::kRowSlots], float to_log2) {
  float tile_max[mma::kRowSlots];
#pragma unroll
  for (int r = 0; r < mma::kRowSlots; ++r) tile_max[r] = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) tile_max[mma::c_slot(i)] = fmaxf(tile_max[mma::c_slot(i)], sc[nt].x[i]);
  }
  bool move = false;
#pragma unroll
  for (int r = 0; r < mma::kRowSlots; ++r) {
    tile_max[r] = mma::reduce_row(tile_max[r], gpu::MaxOp{}) * to_log2;
    move = move || tile_max[r] > m[r] + kStaleMax;  // always where the row has seen no key yet
  }
  const bool moved = gpu::warp_any(move);
  if (moved) {
#pragma unroll
    for (int r = 0; r < mma::kRowSlots; ++r) {
      const float m_new = fmaxf(m[r], tile_max[r]);
      // A row that has seen no key yet keeps m = -inf: exponentials against 0 give zeros.
      corr[r] = gpu::exp2_approx(m[r] - (m_new == -INFINITY ? 0.0f : m_new));
      m[r] = m_new;
      l[r] *= corr[r];
    }
  }
  float ref[mma::kRowSlots];
#pragma unroll
  for (int r = 0; r < mma::kRowSlots; ++r) ref[r] = m[r] == -INFINITY ? 0.0f : m[r];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) {
      const float p = gpu::exp2_approx(fmaf(sc[nt].x[i], to_log2, -ref[mma::c_slot(i)]));
      sc[nt].x[i] = p;
      l[mma::c_slot(i)] += p;  // this lane's part of the row; summed over the row at the end
    }
  }
  return moved;
}

// The output's rows multiplied by the factors softmax_tile gave.
template <int DT>
LW_DEVICE_INLINE void rescale_rows(mma::FragC (&o)[DT], const float (&corr)[mma::kRowSlots]) {
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) o[dt].x[i] *= corr[mma::c_slot(i)];
  }
}

// softmax_tile, then the output rescaled where a reference moved.
template <int NT, int DT>
LW_DEVICE_INLINE void online_softmax(mma::FragC (&sc)[NT], float (&m)[mma::kRowSlots], float (&l)[mma::kRowSlots],
                                     mma::FragC (&o)[DT], float to_log2) {
  float corr[mma::kRowSlots];
  if (softmax_tile(sc, m, l, corr, to_log2)) rescale_rows(o, corr);
}

// A C fragment as an A fragment of T: in registers where the layout's C is one, else through
// the warp's 16 x 16 staging tile (row stride ps) in shared memory.
template <class T, class S>
LW_DEVICE_INLINE mma::FragA<T> as_a(const mma::FragC& c, const S& staging, int ps) {
  mma::FragA<T> f;
  if constexpr (mma::kCMatchesA) {
    f = mma::c_as_a<T>(c);
  } else {
    const int lane = gpu::lane_id();
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) staging[mma::c_row(lane, i) * ps + mma::c_col(lane, i)] = gpu::from_float<T>(c.x[i]);
    gpu::sync_warp();
    mma::load_a_shared(f, staging, ps);
    gpu::sync_warp();  // read before the next use overwrites it
  }
  return f;
}

// o += P.V for 16 keys: p their probabilities (a C fragment), v the 16 rows of V in shared
// memory (row stride ks). bf16 keeps 8 bits of a probability: the rest goes in a second term
// (P = hi + lo, each rounded to bf16), so that P.V is as exact as with fp32 probabilities
// (about 16 bits); f16's 11 bits are kept as they are. (Rounding P to bf16 alone, as
// FlashAttention does, changes greedy answers of small models: docs/PERFORMANCE.md.)
template <class T, int DT, class V, class S>
LW_DEVICE_INLINE void accumulate_pv(mma::FragC (&o)[DT], const mma::FragC& p, const V& v, int ks, const S& staging,
                                    int ps) {
  const mma::FragA<T> pa = as_a<T>(p, staging, ps);
  constexpr bool kSplitP = std::is_same_v<T, bfloat16>;
  mma::FragA<T> pa_lo;
  if constexpr (kSplitP) {
    mma::FragC lo;
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) lo.x[i] = p.x[i] - gpu::to_float(gpu::from_float<T>(p.x[i]));
    pa_lo = as_a<T>(lo, staging, ps);
  }
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    mma::FragB<T> vb;
    mma::load_b_shared(vb, v + dt * 16, ks);
    mma::mma(o[dt], pa, vb, o[dt]);
    if constexpr (kSplitP) mma::mma(o[dt], pa_lo, vb, o[dt]);
  }
}

// Floats of shared memory one warp's rows take in merge_warps.
template <int DT>
LW_HOST_DEVICE constexpr int merge_floats() {
  return (DT * mma::kC + 2 * mma::kRowSlots) * gpu::kWarpSize;
}

// A block's warps each hold the same 16 rows over their own keys (o, m, l as online_softmax
// leaves them), merged pairwise in rounds: while `count` warps hold rows, warps [half, count)
// store theirs at spill(w) (merge_floats<DT>() floats of shared memory, laid out by lane, so any
// fragment layout) and warps w < count - half add warp w + half's to their own, weighted by
// 2^(m_w - m) against the larger reference (any reference will do: output and sum share it),
// half = ceil(count / 2). ceil(log2(warps)) merges on the block's critical path instead of
// warps - 1. The whole block calls it, each warp done with what spill(w) overlays (a warp's own
// shared memory). One barrier a round, between its stores and its loads: a round stores to
// warps [half', half) only, never to the regions [half, count) the round before loads from;
// afterwards warp 0's o, m, l hold the block's rows.
template <int DT, class Spill>
LW_DEVICE_INLINE void merge_warps(mma::FragC (&o)[DT], float (&m)[mma::kRowSlots], float (&l)[mma::kRowSlots],
                                  int warps, Spill spill) {
  constexpr int kO = DT * mma::kC, W = gpu::kWarpSize;
  const int warp = gpu::warp_id(), lane = gpu::lane_id();
  for (int count = warps; count > 1;) {
    const int half = (count + 1) / 2;
    if (warp >= half && warp < count) {
      const auto at = spill(warp);
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
        for (int i = 0; i < mma::kC; ++i) at[(dt * mma::kC + i) * W + lane] = o[dt].x[i];
      }
#pragma unroll
      for (int s = 0; s < mma::kRowSlots; ++s) {
        at[(kO + s) * W + lane] = m[s];
        at[(kO + mma::kRowSlots + s) * W + lane] = l[s];
      }
    }
    __syncthreads();
    if (warp < count - half) {
      const auto at = spill(warp + half);
      float mine[mma::kRowSlots], theirs[mma::kRowSlots];
#pragma unroll
      for (int s = 0; s < mma::kRowSlots; ++s) {
        const float m_w = at[(kO + s) * W + lane], m_new = fmaxf(m[s], m_w);
        const float ref = m_new == -INFINITY ? 0.0f : m_new;  // neither has seen a key: both weights 0
        mine[s] = exp2f(m[s] - ref);
        theirs[s] = exp2f(m_w - ref);
        m[s] = m_new;
        l[s] = l[s] * mine[s] + at[(kO + mma::kRowSlots + s) * W + lane] * theirs[s];
      }
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
        for (int i = 0; i < mma::kC; ++i) {
          const int s = mma::c_slot(i);
          o[dt].x[i] = o[dt].x[i] * mine[s] + at[(dt * mma::kC + i) * W + lane] * theirs[s];
        }
      }
    }
    count = half;
  }
}

// The warp's rows, normalised by their sums, written out: fragment row r (valid(r)) goes to
// out[out_row(r) * D + d] without a split (parts == 1), else to the partial slot part_at(r):
// its values, and its reference maximum (log2 units) and the sum taken against it for the merge
// (attention_merge.h, which needs any reference, not the exact maximum). Values are
// multiplied by `factor` (a scale every V row shares). valid, out_row and part_at are called
// once per row slot of the lane.
template <class T, int DT, class Valid, class OutRow, class PartAt>
LW_DEVICE_INLINE void write_rows(const mma::FragC (&o)[DT], const float (&m)[mma::kRowSlots],
                                 const float (&l)[mma::kRowSlots], int parts, Valid valid, OutRow out_row, PartAt part_at,
                                 T* out, float* part_out, float* part_max, float* part_sum, float factor = 1.0f) {
  constexpr int D = DT * 16;
  const int lane = gpu::lane_id();
  float sum[mma::kRowSlots], inv[mma::kRowSlots];
  bool in[mma::kRowSlots];
  int64_t at[mma::kRowSlots];  // the row's index in out (parts == 1) or in the partial slots
#pragma unroll
  for (int s = 0; s < mma::kRowSlots; ++s) {
    sum[s] = mma::reduce_row(l[s], gpu::SumOp{});
    inv[s] = sum[s] > 0.0f ? factor / sum[s] : 0.0f;
    const int r = mma::slot_row(lane, s);
    in[s] = valid(r);
    at[s] = !in[s] ? 0 : parts == 1 ? out_row(r) : part_at(r);
    bool first_column = false;  // whether this lane holds the row's column 0
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) first_column = first_column || (mma::c_slot(i) == s && mma::c_col(lane, i) == 0);
    if (in[s] && parts > 1 && first_column) {
      part_max[at[s]] = m[s];
      part_sum[at[s]] = sum[s];
    }
  }
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) {
      const int s = mma::c_slot(i);
      if (!in[s]) continue;
      const int64_t e = at[s] * D + dt * 16 + mma::c_col(lane, i);
      const float value = o[dt].x[i] * inv[s];
      if (parts == 1) out[e] = gpu::from_float<T>(value);
      else part_out[e] = value;
    }
  }
}

// A prefill query tile's output through write_rows: fragment row r of the warp is the tile's row
// wr0 + r, valid below `rows`, whose row of q and out is row_at(wr0 + r) (its partial slot:
// that times parts, plus part).
template <class T, int DT, class RowAt>
LW_DEVICE_INLINE void write_tile_rows(const mma::FragC (&o)[DT], const float (&m)[mma::kRowSlots],
                                      const float (&l)[mma::kRowSlots], int wr0, int rows, int parts, int part,
                                      RowAt row_at, T* out, float* part_out, float* part_max, float* part_sum) {
  write_rows<T>(
      o, m, l, parts, [&](int r) { return wr0 + r < rows; }, [&](int r) { return row_at(wr0 + r); },
      [&](int r) { return row_at(wr0 + r) * parts + part; }, out, part_out, part_max, part_sum);
}

}  // namespace lw::kernels::attention_tile
