// 4-bit checkpoints as ops::Weight::int4: GPTQ (AutoGPTQ / GPTQModel, v1 and v2 zero points,
// act-order g_idx), AWQ (AutoAWQ's GEMM packing) and compressed-tensors pack-quantized
// (W4A16, symmetric or with zero points). The int32 words are unpacked on the device, a rank's
// part taken, act-order columns sorted by group, and the values packed into the target's
// matrix-fragment tiles.
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "ops/weight.h"

namespace lw::ops {

enum class Int4Layout : uint8_t {
  gptq,         // qweight i32 [K/8, N] (packed along K), qzeros i32 [G, N/8] holding zero - 1, scales [G, N]
  gptq_v2,      // the same with the zero points themselves in qzeros
  awq,          // qweight i32 [K, N/8], qzeros i32 [G, N/8], both packed along N in the order 0 2 4 6 1 3 5 7
  packed_rows,  // compressed-tensors: weight_packed i32 [N, K/8] (value + 8), weight_scale [N, G], and
                // zero points (+ 8) in weight_zero_point i32 [ceil(N/8), G] packed along N (else 8)
};
const char* int4_layout_name(Int4Layout layout);

// A checkpoint's tensors on the device, as stored (scales f16, bf16 or f32).
struct Int4Tensors {
  Int4Layout layout = Int4Layout::gptq;
  int64_t n = 0, k = 0;
  int64_t group = 0;  // input columns per scale (K for one per row)
  Tensor qweight, qzeros, scales;  // qzeros optional for packed_rows
  Tensor g_idx;  // i32 [K], optional (gptq, packed_rows): the group of each input column
};

// Rows [start, end) of dimension `dim` (0: output rows, 1: input columns), or the whole matrix
// (dim < 0).
struct Int4Part {
  int dim = -1;
  int64_t start = 0, end = 0;
};

// The tensors' shapes, dtypes and group checked (every message names the tensor and what was
// expected), the values and zero points unpacked, `part` taken, and the weight packed into
// tiles. Returns an undefined Weight where the part cannot stay 4-bit: input columns that cut a
// group, or any column part of an act-order weight (its groups are scattered over K); g_idx
// values outside the groups, or groups of other sizes than `group`, are errors.
Weight int4_weight(Context& ctx, const Int4Tensors& t, Int4Part part = {});

// int4 weights stacked by rows into one [sum N, K] (fused q/k/v, gate/up): undefined where they
// do not stack (different groups or permutations, or a part other than the last with rows that
// are not whole tiles).
Weight int4_stack_rows(Context& ctx, const std::vector<Weight>& parts);

}  // namespace lw::ops
