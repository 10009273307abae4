// Moving checkpoint tensors onto the device.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "weights/checkpoint.h"

namespace lw::weights {

// A contiguous device tensor of rec.shape holding rec's values: float and quantized types are
// converted on the device to `compute` (f32, f16 or bf16; quantized blocks are expanded in
// fp32 and rounded once, to nearest even); i8/i32/i64 load as themselves and ignore
// `compute`. Unsupported types throw lw::Error naming the tensor, its type and the supported
// set. Ordered on ctx.stream(); the host bytes may be released once this returns.
Tensor load_tensor(Context& ctx, const TensorRecord& rec, DType compute);

}  // namespace lw::weights
