// A linear layer's weight in whatever format it is stored: the logical matrix [N, K] (out, in
// features, as checkpoints store it), the format, and the tensors that format needs (data,
// scales, zero points, group indices). `linear` over a Weight dispatches on the format.
//
// Each factory checks what its format's kernels will rely on (dtypes, shapes, scale counts,
// device, contiguity) and says what is wrong.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "kernels/quant/dequant.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"

namespace lw::ops {

enum class WeightFormat : uint8_t {
  dense,                 // f32/f16/bf16 [N, K]
  fp8_e4m3_per_tensor,   // e4m3 bytes (i8) [N, K], one f32 scale: w = fp8(q) * scale
  fp8_e4m3_per_channel,  // e4m3 bytes (i8) [N, K], f32 scales [N]
  fp8_e4m3_per_block,    // e4m3 bytes (i8) [N, K], f32 scales [ceil(N/bn), ceil(K/bk)]
  int8_per_channel,      // symmetric int8 [N, K], f32 scales [N]: w = q * scale[n]
  int8_per_group,        // int8 [N, K], f32 scales [N, ceil(K / group)]: w = (q - zero) * scale[n, k / group]
  int4,                  // 4-bit values in matrix-fragment tiles, f32 scales and zero points per (group, row)
  gguf_q4_0,             // GGML blocks (llama.cpp layout), rows of whole blocks
  gguf_q4_1,
  gguf_q5_0,
  gguf_q5_1,
  gguf_q8_0,
  gguf_q2_k,
  gguf_q3_k,
  gguf_q4_k,
  gguf_q5_k,
  gguf_q6_k,
  gguf_mixed,  // GGUF block matrices of different formats stacked by rows, each kept in its own (parts())
};

const char* weight_format_name(WeightFormat format);
bool is_gguf_block_format(WeightFormat format);
// int8_per_channel, int8_per_group and the fp8_e4m3 formats: one byte per element and f32 scales.
bool is_scaled_8bit_format(WeightFormat format);
// The Weight format of GGML blocks the kernels decode (none for the plain float types).
std::optional<WeightFormat> gguf_weight_format(kernels::BlockFormat format);
// A GGUF block format's elements and bytes per block (0 for the other formats).
int64_t gguf_block_elems(WeightFormat format);
int64_t gguf_block_bytes(WeightFormat format);

// The block of output rows x input columns that shares one fp8 scale (DeepSeek-V3: 128 x 128).
struct WeightBlock {
  int64_t rows = 0;
  int64_t cols = 0;
};

class Weight {
 public:
  Weight() = default;  // no weight: every accessor but defined() describes nothing

  // w f32/f16/bf16 [N, K].
  static Weight dense(Tensor w);
  // q i8 [N, K], scales f32 [N]: w[n, k] = q[n, k] * scales[n] (q in [-127, 127]).
  static Weight int8_per_channel(Tensor q, Tensor scales);
  // q i8 [N, K], scales f32 [N, G], G = ceil(K / group_size): w[n, k'] = (q[n, k'] - zeros[n, g]) *
  // scales[n, g] with g = k' / group_size (GPTQ 8-bit: q in [-128, 127], the stored byte - 128);
  // zeros (optional: 0) f32 [N, G], integers in [-128, 128]; perm (optional) i32 [K]: column k'
  // of q is the matrix's column perm[k'] (act-order, as int4). Weight-only: linear keeps x in its
  // dtype (W8A16).
  static Weight int8_per_group(Tensor q, Tensor scales, int64_t group_size, Tensor zeros = Tensor(),
                               Tensor perm = Tensor());
  // fp8 e4m3 bytes, held in an i8 [N, K] tensor (Tensor has no fp8 dtype): w = fp8(q) * scale.
  // scale: f32 with one element ([] or [1]). The NaN codes (0x7F, 0xFF) are not values: the
  // checkpoint loader refuses them; the kernels do not check again (they read them as +-480).
  static Weight fp8_per_tensor(Tensor q, Tensor scale);
  // scales f32 [N].
  static Weight fp8_per_channel(Tensor q, Tensor scales);
  // scales f32 [ceil(N / block.rows), ceil(K / block.cols)]; block sides positive.
  static Weight fp8_per_block(Tensor q, Tensor scales, WeightBlock block);
  // 4-bit values with a zero point and a scale per group of input columns and output row:
  // w[n, k'] = (q - zeros[n, g]) * scales[n, g] with g = k' / group_size, where k' is the tiles'
  // column: tiles i8 holding kernels::int4_tile_count(N, K) tiles of kernels::kInt4TileBytes
  // (kernels/quant/int4.h, made by ops::int4_weight), scales f32 [N, G], zeros i8 [N, G] (0..16),
  // G = ceil(K / group_size); perm (optional) i32 [K]: tile column k' is the matrix's column
  // perm[k'] (act-order checkpoints, whose groups are scattered over K).
  static Weight int4(int64_t n, int64_t k, Tensor tiles, Tensor scales, Tensor zeros, int64_t group_size,
                     Tensor perm = Tensor());
  // GGML blocks as llama.cpp stores them, row by row: blocks i8 holding exactly
  // N * (K / block elements) * block bytes bytes (any shape, contiguous); K whole blocks.
  static Weight gguf(WeightFormat format, int64_t n, int64_t k, Tensor blocks);
  // GGUF block matrices [N_i, K] of different formats as one [sum N_i, K] matrix, rows of part 0
  // first: a fused projection whose parts a checkpoint stores in different types (llama.cpp's
  // Q4_K_M: Q4_K q and k, Q6_K v), each part kept in its own blocks. At least two parts, every
  // one a GGUF block format, one K.
  static Weight gguf_mixed(std::vector<Weight> parts);

  bool defined() const { return data_.defined() || parts_ != nullptr; }
  WeightFormat format() const { return format_; }
  const char* name() const { return weight_format_name(format_); }
  int64_t out_features() const { return n_; }  // N
  int64_t in_features() const { return k_; }   // K
  // The format's tensors; undefined where the format has none.
  const Tensor& data() const { return data_; }
  const Tensor& scales() const { return scales_; }
  const Tensor& zeros() const { return zeros_; }
  // int4, int8_per_group: the column permutation (undefined where the columns are in order).
  const Tensor& perm() const { return perm_; }
  // Input columns per scale group (int4, int8_per_group), 0 where the format has no groups.
  int64_t group_size() const { return group_size_; }
  // The scale block (per-block fp8; {1, group} for int8_per_group; {0, 0} otherwise).
  WeightBlock block() const { return block_; }
  // gguf_mixed: its parts, in row order (empty for the other formats).
  const std::vector<Weight>& parts() const;
  // Bytes of every tensor the weight holds on the device.
  size_t device_bytes() const;
  // "int8_per_channel [N, K]", for messages.
  std::string describe() const;

 private:
  Weight(WeightFormat format, int64_t n, int64_t k) : format_(format), n_(n), k_(k) {}

  WeightFormat format_ = WeightFormat::dense;
  int64_t n_ = 0, k_ = 0;
  Tensor data_, scales_, zeros_, perm_;
  std::shared_ptr<const std::vector<Weight>> parts_;
  int64_t group_size_ = 0;
  WeightBlock block_;
};

// The order of a weight's K input columns that makes each group of `group` columns contiguous,
// stable by column, from g_idx (host memory: K entries, each checked to be in 0 .. groups - 1;
// `what` names g_idx in the message): empty where g_idx already gives column c the group
// c / group (no permutation), nullopt where the groups are not all `group` columns but the last
// (act-order checkpoints give each group `group` columns).
std::optional<std::vector<int32_t>> act_order_columns(const int32_t* g_idx, int64_t k, int64_t group, int64_t groups,
                                                      const std::string& what);

// Whether the weights (of one K) store their columns in one order: none permuted, or all by equal
// permutations (read back from the device), so that parts stacked by rows share it.
bool same_column_order(Context& ctx, const std::vector<Weight>& parts);

// An automatic linear over GGUF blocks (or FP8) of at most this many rows runs the fused GEMV;
// above it the expansion and the vendor GEMM are faster (H200, docs/PERFORMANCE.md "GGUF block
// weights"; FP8 takes the crossover of Q8_0, its nearest GGUF kin, until measured itself).
inline constexpr int64_t kGgufGemvMaxRows = 4;
// The same for the GEMV on the matrix-fragment layer (kernels/quant/gguf_mma_gemv.h: every
// GGML block format, with f16 and bf16 x where the device has the layer): its passes of 8 rows
// each read the weights, and the expansion is faster from 32 rows at 4096 x 4096 (Q4_K, Q3_K;
// H100, docs/PERFORMANCE.md "GGUF Q4_K on matrix fragments", "GGUF Q8_0, Q3_K and Q2_K"; Q2_K
// still faster at 32, the other formats take the same crossover).
inline constexpr int64_t kGgufMmaGemvMaxRows = 24;
// Q4_0, Q5_0 and Q8_0 there (blocks 2-aligned only, half their fields read 2 bytes at a time): up
// to 16 rows (at 24 rows Q4_0 with 2-byte loads 23% slower than the expansion at 4096 x 4096 and
// 3% at 14336 x 4096, Q8_0 21% and 2%; faster at 16; H100).
inline constexpr int64_t kGgufMmaGemvMaxRowsNarrowLoads = 16;

// An automatic linear over int4 weights of at most this many rows runs the fused kernel (one
// pass); above it the expansion and the vendor GEMM (H200, docs/PERFORMANCE.md "4-bit weights":
// the fused kernel is faster up to 64 rows, the expansion from 128).
inline constexpr int64_t kInt4FusedMaxRows = 64;

// Whether linear over FP8 weights may run W8A8 on this device (NVIDIA sm_89 and later; not on
// HIP: hipBLASLt's gfx942 FP8 reads e4m3fnuz codes, nor the host).
bool has_fp8_gemm(const gpu::DeviceCaps& caps);

// The weight as a dense [N, K] tensor of `dtype` (every format): each value decoded in fp32,
// times its scale, rounded once.
Tensor expand(Context& ctx, const Weight& w, DType dtype);

// out[..., N] = x[..., K] @ W^T + bias[N] for W in any format this build has a kernel for:
//   dense             the tensor `linear` (every path);
//   gguf_*            up to kGgufGemvMaxRows rows (and any rows on the forced gemv path): the
//                     fused GEMV over the blocks (kernels/quant/gguf_gemv.h); more rows, another
//                     forced path, or deterministic mode: the weights expanded to x's dtype (a
//                     temporary [N, K]) and the dense linear. Weights are the expansion's values
//                     (rounded to x's dtype) on every path, except with f16 or bf16 x where the
//                     device has the matrix-fragment layer, for every format: up to
//                     kGgufMmaGemvMaxRows rows (kGgufMmaGemvMaxRowsNarrowLoads for Q4_0, Q5_0
//                     and Q8_0; and on the forced gemv path)
//                     kernels::gguf_mma_gemv, which scales each sub-block's sums in fp32 and so
//                     uses gguf's values unrounded;
//   gguf_mixed        each part as its format would run alone, into its columns of out: the
//                     GEMV per part up to the fewest rows any part's GEMV takes (and on the
//                     forced gemv path), else the whole matrix expanded and the dense linear;
//   int8_per_group    as the GGUF formats (W8A16): the fused 8-bit GEMV (kernels::scaled_gemv;
//                     x's columns gathered first where the weight has a permutation) up to
//                     kGgufGemvMaxRows rows and on the forced gemv path, else the weights
//                     expanded to x's dtype and the dense linear;
//   int8_per_channel  x quantised per token (quantize_per_token), then `linear_int8` with x's
//                     per-row scales and the weight's per-channel scales (exact int32
//                     accumulation; the output rounded once); the gemv path is refused;
//   fp8_e4m3_*        on a device with FP8 tensor cores (has_fp8_gemm: NVIDIA sm_89+, measured
//                     on sm_90), automatic and not deterministic: W8A8 at every M, x quantised
//                     to e4m3 (quantize_fp8: per token, or per 128 columns for 128 x 128
//                     blocks), then up to kernels::kFp8MmaGemvMaxRows rows the tensor-core GEMV
//                     (kernels::fp8_mma_gemv; K a multiple of 128) and above it, or on the
//                     forced vendor path, the vendor's scaled FP8 GEMM (K a multiple of 16;
//                     block weights with K a multiple of 512). f16/bf16 x; blocks only 128 x
//                     128. Elsewhere, where those refuse the problem (the reason logged once
//                     per weight shape), and in deterministic mode: W8A16, the fused GEMV
//                     (kernels::scaled_gemv; K a multiple of 16) up to kGgufGemvMaxRows rows and
//                     on the forced gemv path, else the weights expanded to x's dtype and the
//                     dense linear.
//   int4              f16/bf16 x on a device with matrix cores (and the emulator), up to
//                     kInt4FusedMaxRows rows and on the forced gemv path (any rows, in passes of
//                     kernels::kInt4GemmMaxRows): the fused
//                     kernel on the matrix-fragment layer (kernels::int4_gemm; where the weight
//                     has a permutation, x's columns gathered by the streamed kernel up to 4
//                     rows, into a copy first above; on sm_90 the passes of 9-16 and 33-64
//                     rows go to its warpgroup twin,
//                     kernels::Int4GemmKernel::hopper, unless LW_INT4_HOPPER=0); more rows, f32 x,
//                     another forced path, deterministic mode, groups that are not whole
//                     16-column steps or no matrix cores: the expansion and the dense linear.
// x, out contiguous with the same leading dimensions and x's dtype (f32/f16/bf16); bias
// optional, [N] in that dtype.
void linear(Context& ctx, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out,
            GemmPath path = GemmPath::automatic);

// out = (act(x[..., :K]) * x[..., K:]) @ w^T (+ bias): an MLP's down projection of its gate/up
// product x ([..., 2K]). int4 weights on the streamed kernel (up to gpu::mma::kNarrowCols rows,
// act order up to 4) take the product as they stage x, in one launch; every other case is
// act_mul into a temporary and `linear`. The same values either way (the product rounded once
// to x's dtype).
void gated_linear(Context& ctx, Activation act, const Tensor& x, const Weight& w, const Tensor& bias, const Tensor& out,
                  GemmPath path = GemmPath::automatic);
// Whether gated_linear(x, w, out) takes the product in the projection's kernel (one launch)
// rather than act_mul first.
bool gated_linear_fuses(Context& ctx, const Tensor& x, const Weight& w, const Tensor& out,
                        GemmPath path = GemmPath::automatic);

// out[T, N] = x[T, K] through one weight per group (MoE experts): rows [offsets[e],
// offsets[e + 1]) of x times weights[e] by `linear` above, each weight in its own format (so a
// quantised expert runs its format's kernels; an expert without rows launches nothing). The
// weights share N and K; the offsets (E + 1 of them, on the host: the caller reads the
// device's once for every call that shares them) run from 0 to T without decreasing.
void grouped_linear(Context& ctx, const Tensor& x, const std::vector<Weight>& weights, std::span<const int32_t> offsets,
                    const Tensor& out, GemmPath path = GemmPath::automatic);

// One projection's weights of every expert (MoE), each in its own format, and what the
// single-launch grouped kernels read, made once here: where every expert is int4 with the same
// groups and columns in order, a device table of their matrices (kernels::Int4Matrix each);
// where every expert is in one GGUF block format, a device array of their data pointers.
class ExpertWeights {
 public:
  ExpertWeights() = default;
  ExpertWeights(Context& ctx, std::vector<Weight> weights);
  const std::vector<Weight>& weights() const { return weights_; }
  bool empty() const { return weights_.empty(); }
  size_t size() const { return weights_.size(); }
  // The int4 table (undefined where the experts do not all qualify).
  const Tensor& int4_table() const { return int4_table_; }
  // The GGUF block table (undefined where the experts do not all qualify).
  const Tensor& block_table() const { return block_table_; }

 private:
  std::vector<Weight> weights_;
  Tensor int4_table_, block_table_;
};

// The rows of x grouped by expert: i32 [E + 1] offsets on the device, copied to the host on the
// first call that needs them there (one synchronisation for every call that shares them).
class ExpertRows {
 public:
  explicit ExpertRows(Tensor offsets) : device_(std::move(offsets)) {}
  const Tensor& device() const { return device_; }
  std::span<const int32_t> host(Context& ctx);

 private:
  Tensor device_, host_;
};

// An automatic grouped_linear over int4 experts with at most kInt4GroupedMaxRowsPerExpert rows
// per expert on average, or kInt4GroupedSmallMaxRowsPerExpert for experts of fewer than
// kInt4GroupedSmallExpert weights, runs the grouped kernel (kernels::int4_grouped_gemv: one
// launch, offsets read on the device); above it each expert's rows go through `linear` (H200,
// docs/PERFORMANCE.md "4-bit MoE experts in one launch": a launch per expert costs more than the
// grouped kernel's rereads of small experts up to 64 rows each, not of Mixtral's from 16).
inline constexpr int64_t kInt4GroupedMaxRowsPerExpert = 8;
inline constexpr int64_t kInt4GroupedSmallMaxRowsPerExpert = 64;
inline constexpr int64_t kInt4GroupedSmallExpert = int64_t{1} << 24;

// grouped_linear above over ExpertWeights with the offsets on the device: where the experts have
// an int4 table, x is f16/bf16 and contiguous, the device has matrix cores, not in deterministic
// mode, and the path is automatic with few rows per expert (the rule above) or forced gemv (any
// rows), the grouped kernel without host synchronisation; where they have a GGUF block table,
// x and out are contiguous, not in deterministic mode, x has at most
// kernels::kGgufGroupedMaxRows rows and kGgufGemvMaxRows per expert on average (Mixtral's
// experts at 64 rows ran faster expanded) and the path is automatic or gemv, the grouped block
// GEMV (kernels::gguf_grouped_gemv: each expert's rows as linear's GEMV gives them, in one
// launch; 2.4x faster than a launch per expert on Qwen3-30B-A3B's at one token, docs/PERFORMANCE.md);
// otherwise the offsets are read to the host and each expert's rows run through `linear`.
void grouped_linear(Context& ctx, const Tensor& x, const ExpertWeights& experts, ExpertRows& rows, const Tensor& out,
                    GemmPath path = GemmPath::automatic);

}  // namespace lw::ops
