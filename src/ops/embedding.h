// Embedding lookup.
#pragma once
#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// out [tokens, hidden] = table [vocab, hidden] gathered by ids (i32 or i64 [tokens]); all on
// the device, contiguous, out and table of one float dtype. An id outside the vocabulary
// throws lw::Error naming the position and the id (this waits for the stream). check false:
// the caller has validated the ids and nothing waits (a bad id still gives a zero row).
void embedding(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out, bool check = true);

}  // namespace lw::ops
