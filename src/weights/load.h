// Moving checkpoint tensors onto the device.
#pragma once
#include <optional>

#include "core/context.h"
#include "core/tensor.h"
#include "kernels/quant/dequant.h"
#include "weights/checkpoint.h"

namespace lw::weights {

// A contiguous device tensor of rec.shape holding rec's values: float and quantized types are
// converted on the device to `compute` (f32, f16 or bf16; quantized blocks are expanded in
// fp32 and rounded once, to nearest even); i8/i32/i64 load as themselves and ignore
// `compute`. Unsupported types throw lw::Error naming the tensor, its type and the supported
// set. Ordered on ctx.stream(); the host bytes may be released once this returns.
Tensor load_tensor(Context& ctx, const TensorRecord& rec, DType compute);

// The device format a file type is stored in (float types and GGML blocks); none for the
// integer and unsupported types.
std::optional<kernels::BlockFormat> block_format(FileDType t);

// A 2-D tensor's stored bytes as they are in the file, rows [r0, r1) and bytes [b0, b1) of
// each row (a shard's part): a contiguous i8 [r1 - r0, b1 - b0] on the device.
Tensor load_raw(Context& ctx, const TensorRecord& rec, int64_t r0, int64_t r1, int64_t b0, int64_t b1);

}  // namespace lw::weights
