#include "kernels/attention_prefill_hopper.h"

#include <cmath>
#include <type_traits>

#include "gpu/async_copy.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/warp.h"
#include "gpu/wgmma.h"
#include "kernels/attention_tile.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;
namespace wg = gpu::wgmma;

constexpr int kRows = kPrefillTileRows;  // a warpgroup's 64 rows: the plan's query tiles
constexpr int kKeys = 64;                // keys per tile  // lint: not-a-warp
static_assert(kRows == 64, "a warpgroup multiply has 64 rows");  // lint: not-a-warp

// Dynamic shared memory: the Q tile, two K and two V tiles (swizzled, each D x 128 bytes for 64
// rows), then the element offsets in the cache of four key tiles' slots (tiles j+1 .. j+3 are in
// use during step j; the fourth entry is spare); 1024 bytes more so that the tiles start on a
// swizzle atom.
constexpr int kSlotRing = 4;
template <int D>
LW_HOST_DEVICE constexpr size_t tile_bytes() {
  return static_cast<size_t>(kRows) * D * 2;
}
template <int D>
constexpr size_t shared_bytes() {
  return wg::kAtomBytes + 5 * tile_bytes<D>() + kSlotRing * kKeys * sizeof(int64_t);
}

// Grid (tile, key/value head, partition) as the portable kernel's (attention_prefill.cu), one
// warpgroup per block: warp w holds the tile's rows 16w .. 16w + 15 in the accumulators of the
// group's multiplies. Key tile j: S_j = Q.K_j^T (D / 16 multiplies of 64 x 64 from shared
// memory), masked and turned into probabilities per warp (kernels/attention_tile.h), then
// O += P_j.V_j (P from registers as bf16 hi + lo terms, as the portable kernel; f16 in one).
// The steps overlap: S_{j+1} and P_j.V_j are issued together, and the softmax of S_{j+1} runs
// while P_j.V_j is on the matrix units; K and V tiles load two and one tiles ahead into double
// buffers.
template <class T, int D>
__global__ void __launch_bounds__(wg::kThreads, 2)
    hopper_prefill_kernel(PrefillAttentionArgs a, const T* q, const T* k_cache, const T* v_cache,
                          const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info,
                          float* part_out, float* part_max, float* part_sum, T* out) {
#if LW_WGMMA
  constexpr int P = D / 8;  // 16-byte pieces per row
  constexpr bool kSplitP = std::is_same_v<T, bfloat16>;
  LW_DYNAMIC_SHARED(unsigned char, smem_raw);  // 16-byte aligned: the tiles are aligned below
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (wg::kAtomBytes - raw % wg::kAtomBytes) % wg::kAtomBytes;
  unsigned char* const base = smem_raw + pad;
  const uint32_t q_addr = raw + pad;
  // Tile buffers: 0 Q, 1-2 K, 3-4 V.
  auto buffer = [&](int i) { return base + i * tile_bytes<D>(); };
  auto buffer_addr = [&](int i) { return q_addr + static_cast<uint32_t>(i * tile_bytes<D>()); };
  int64_t* const slot_ring = reinterpret_cast<int64_t*>(base + 5 * tile_bytes<D>());  // [kSlotRing][kKeys]
  const uint64_t q_desc = wg::k_major(q_addr);
  const uint64_t k_desc0 = wg::k_major(buffer_addr(1)), k_desc1 = wg::k_major(buffer_addr(2));
  const uint64_t v_desc0 = wg::mn_major(buffer_addr(3), kKeys), v_desc1 = wg::mn_major(buffer_addr(4), kKeys);
  const int tile = a.tiles - 1 - static_cast<int>(blockIdx.x);  // longest tiles first
  const int kvh = static_cast<int>(blockIdx.y), part = static_cast<int>(blockIdx.z);
  const int group = a.q_heads / a.kv_heads;
  const int s = tile_info[2 * tile], q0 = tile_info[2 * tile + 1];
  const int row0 = seq_info[3 * s], qlen = seq_info[3 * s + 1], ctx = seq_info[3 * s + 2];
  const int prefix = ctx - qlen;
  const int tokens = min(a.tile_tokens, qlen - q0);
  const int rows = tokens * group;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;  // lint: not-a-warp (CUDA's warp)
  const int wr0 = 16 * warp;
  const int32_t* table = block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const uint32_t slot_stride = static_cast<uint32_t>(a.kv_heads * D);
  // Tile row r (a query token and head) is this row of q and out.
  auto row_at = [&](int r) { return static_cast<int64_t>(row0 + q0 + r / group) * a.q_heads + kvh * group + r % group; };

  int key_end = prefix + q0 + tokens;
  int key_begin = a.window > 0 ? max(0, prefix + q0 - a.window + 1) : 0;
  if (a.parts > 1) {
    key_begin = max(key_begin, part * a.partition);
    key_end = min(key_end, (part + 1) * a.partition);
  }
  const int warp_first_token = q0 + wr0 / group;
  const int first_tile = key_begin / kKeys * kKeys;
  const int n = first_tile < key_end ? (key_end - first_tile + kKeys - 1) / kKeys : 0;  // key tiles
  auto tile_start = [&](int j) { return first_tile + j * kKeys; };

  // The element offsets (slot x stride) of tile j's keys, 0 past the end.
  auto fill_slots = [&](int j) {
    if (j >= n) return;
    int64_t* ring = slot_ring + (j % kSlotRing) * kKeys;
    for (int r = tid; r < kKeys; r += wg::kThreads) {
      const int t = tile_start(j) + r;
      const int slot = t < key_end ? table[t / a.block_size] * a.block_size + t % a.block_size : 0;
      ring[r] = static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(slot)) * slot_stride);
    }
  };
  // Tile j of K or V into buffer b (no copy past the last tile). A thread copies one column of
  // 16-byte pieces, every kRowStep-th row: its swizzled places differ by constants.
  constexpr int kRowStep = wg::kThreads / P;
  static_assert(kRowStep % 8 == 0, "a thread's rows share their place in the swizzle");
  const int my_piece = tid % P, my_row = tid / P;
  const uint32_t my_place = wg::piece_offset(my_row, my_piece, kKeys);
  const int64_t my_column = static_cast<int64_t>(kvh) * D + my_piece * 8;
  auto load_tile = [&](const T* cache, int b, int j) {
    if (j >= n) return;
    const int64_t* ring = slot_ring + (j % kSlotRing) * kKeys;
    const int valid = key_end - tile_start(j);  // rows in the cache
    unsigned char* dst = buffer(b) + my_place;
    const T* src = cache + my_column;
#pragma unroll
    for (int i = 0; i < kKeys / kRowStep; ++i) {
      const int r = my_row + i * kRowStep;
      gpu::copy_16_async_or_zero(reinterpret_cast<T*>(dst + i * kRowStep * wg::kRowBytes), 0, src + ring[r], r < valid);
    }
  };
  auto k_buffer = [](int j) { return 1 + (j & 1); };
  auto v_buffer = [](int j) { return 3 + (j & 1); };
  // S_j = Q.K_j^T, issued (the caller commits and waits).
  auto issue_scores = [&](mma::FragC (&sc)[kKeys / 16], int j) {
    wg::pin(sc);
    wg::fence();
#pragma unroll
    for (int k0 = 0; k0 < D; k0 += 16) {
      wg::mma_64x64_ss<T>(sc, wg::advance(q_desc, wg::k_major_offset(kRows, k0)),
                          wg::advance((j & 1) ? k_desc1 : k_desc0, wg::k_major_offset(kKeys, k0)), k0 > 0);
    }
  };
  // S_j (waited for) masked and turned into probabilities; whether o needs rescale_rows(corr).
  float m[mma::kRowSlots], l[mma::kRowSlots], corr[mma::kRowSlots];
  auto probabilities = [&](mma::FragC (&sc)[kKeys / 16], int j) {
    wg::pin(sc);
    const int kv0 = tile_start(j);
    const bool unmasked = a.window <= 0 && wr0 + 15 < rows && kv0 + kKeys - 1 <= prefix + warp_first_token &&
                          kv0 + kKeys <= key_end;
    const float to_log2 = attention_tile::prepare_scores(sc, a.scale, a.softcap);
    if (!unmasked) attention_tile::mask_scores(sc, {rows, group, prefix + q0, key_begin, key_end, a.window}, wr0, kv0);
    return attention_tile::softmax_tile(sc, m, l, corr, to_log2);
  };
  // Probabilities as the registers of P.V's A operand: bf16 hi + lo terms (f16: hi alone).
  wg::RegsA p_hi[kKeys / 16], p_lo[kKeys / 16];
  auto to_operands = [&](const mma::FragC (&sc)[kKeys / 16]) {
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float x = sc[kc].x[2 * i], y = sc[kc].x[2 * i + 1];
        if constexpr (kSplitP) {
          const __nv_bfloat162 hi = __floats2bfloat162_rn(x, y);
          const float2 back = __bfloat1622float2(hi);
          const __nv_bfloat162 lo = __floats2bfloat162_rn(x - back.x, y - back.y);
          p_hi[kc].r[i] = *reinterpret_cast<const uint32_t*>(&hi);
          p_lo[kc].r[i] = *reinterpret_cast<const uint32_t*>(&lo);
        } else {
          const __half2 hi = __floats2half2_rn(x, y);
          p_hi[kc].r[i] = *reinterpret_cast<const uint32_t*>(&hi);
        }
      }
    }
  };

  mma::FragC o[D / 16];
  attention_tile::start_rows(o, m, l);
  if (n > 0) {
    // Prologue: Q, K_0, V_0 and K_1 in, S_0 into probabilities.
    fill_slots(0);
    fill_slots(1);
    fill_slots(2);
    __syncthreads();
    for (int e = tid; e < kRows * P; e += wg::kThreads) {
      const int r = e / P, p = e % P;
      const bool in = r < rows;
      const T* src = q + row_at(in ? r : 0) * D + p * 8;
      gpu::copy_16_async_or_zero(reinterpret_cast<T*>(buffer(0) + wg::piece_offset(r, p, kRows)), 0, src, in);
    }
    load_tile(k_cache, k_buffer(0), 0);
    load_tile(v_cache, v_buffer(0), 0);
    load_tile(k_cache, k_buffer(1), 1);
    gpu::async_commit();
    gpu::async_wait<0>();
    wg::fence_shared_writes();
    __syncthreads();
    mma::FragC sc[kKeys / 16];
    issue_scores(sc, 0);
    wg::commit();
    wg::wait<0>();
    probabilities(sc, 0);  // o is zero: nothing to rescale
    to_operands(sc);
  }
  // Step j: loads for the tiles ahead, then S_{j+1} (where kNext) and P_j.V_j issued together.
  // Two instantiations, so that every multiply of a step's pipeline is unconditional.
  auto step = [&](int j, auto next_tile) {
    constexpr bool kNext = decltype(next_tile)::value;
    __syncthreads();  // every warp is done with S_j and P_{j-1}.V_{j-1}: their buffers are free
    load_tile(v_cache, v_buffer(j + 1), j + 1);
    load_tile(k_cache, k_buffer(j + 2), j + 2);
    gpu::async_commit();
    fill_slots(j + 3);
    gpu::async_wait<1>();  // V_j and K_{j+1}, requested one tile ago
    wg::fence_shared_writes();
    __syncthreads();

    mma::FragC sc[kKeys / 16];
    if constexpr (kNext) {
      issue_scores(sc, j + 1);
      wg::commit();
    }
    wg::pin(o);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
      const uint64_t vd = wg::advance((j & 1) ? v_desc1 : v_desc0, wg::mn_major_offset(kc * 16));
      wg::mma_rs_mn<T, D>(o, p_hi[kc], vd);
      if constexpr (kSplitP) wg::mma_rs_mn<T, D>(o, p_lo[kc], vd);
    }
    wg::commit();
    if constexpr (kNext) {
      wg::wait<1>();  // S_{j+1}; P_j.V_j runs on
      const bool moved = probabilities(sc, j + 1);
      wg::wait<0>();
      wg::pin(o);
      if (moved) attention_tile::rescale_rows(o, corr);
      to_operands(sc);
    } else {
      wg::wait<0>();
      wg::pin(o);
    }
  };
  for (int j = 0; j + 1 < n; ++j) step(j, std::true_type{});
  if (n > 0) step(n - 1, std::false_type{});

  attention_tile::write_tile_rows<T>(o, m, l, wr0, rows, a.parts, part, row_at, out, part_out, part_max, part_sum);
#else
  __trap();  // built without sm_90a code: hopper_prefill_attention is never called here
#endif
}

template <class T, int D>
void launch_hopper(const PrefillAttentionArgs& a, const T* q, const T* k_cache, const T* v_cache,
                   const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info, float* workspace,
                   T* out, cudaStream_t stream) {
  const PrefillParts p = prefill_parts(a, workspace);
  const auto kernel = hopper_prefill_kernel<T, D>;
  gpu::allow_dynamic_shared(kernel, shared_bytes<D>());
  gpu::launch("prefill_attention_hopper", kernel,
              {dim3(static_cast<unsigned>(a.tiles), static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(a.parts)),
               dim3(wg::kThreads), shared_bytes<D>(), stream},
              a, q, k_cache, v_cache, block_tables, seq_info, tile_info, p.out, p.max, p.sum, out);
  if (a.parts > 1) prefill_merge(a, seq_info, tile_info, workspace, out, 32, stream);  // lint: not-a-warp (CUDA)
}

}  // namespace

template <class T>
void hopper_prefill_attention(const PrefillAttentionArgs& a, const T* q, const T* k_cache, const T* v_cache,
                              const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info,
                              float* workspace, T* out, cudaStream_t stream) {
  if (a.tiles == 0) return;
  LW_CHECK(a.kv_heads > 0 && a.q_heads % a.kv_heads == 0 && a.tile_tokens == prefill_tile_tokens(a.q_heads / a.kv_heads),
           "hopper_prefill_attention: tables of " << a.tile_tokens << "-token tiles do not fit " << a.q_heads
                                                  << " query heads over " << a.kv_heads << " key/value heads");
  LW_CHECK(a.parts == 1 || (a.partition % kKeys == 0 && workspace != nullptr),
           "hopper_prefill_attention: a split needs partitions of a multiple of 64 keys and a workspace");
  switch (a.head_dim) {
    case 64: launch_hopper<T, 64>(a, q, k_cache, v_cache, block_tables, seq_info, tile_info, workspace, out, stream); break;  // lint: not-a-warp
    case 128: launch_hopper<T, 128>(a, q, k_cache, v_cache, block_tables, seq_info, tile_info, workspace, out, stream); break;
    default: LW_FAIL("hopper_prefill_attention: head_dim " << a.head_dim << " is not 64 or 128");
  }
}

template void hopper_prefill_attention<half>(const PrefillAttentionArgs&, const half*, const half*, const half*,
                                             const int32_t*, const int32_t*, const int32_t*, float*, half*, cudaStream_t);
template void hopper_prefill_attention<bfloat16>(const PrefillAttentionArgs&, const bfloat16*, const bfloat16*,
                                                 const bfloat16*, const int32_t*, const int32_t*, const int32_t*, float*,
                                                 bfloat16*, cudaStream_t);

}  // namespace lw::kernels
