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

// The lookup into one tensor-parallel shard of a vocabulary: table [rows, hidden] holds the
// rows of ids [first, first + rows); every other id gets a zero row (another rank holds it),
// so the ranks' outputs summed are the whole lookup.
void embedding_shard(Context& ctx, const Tensor& table, int64_t first, const Tensor& ids, const Tensor& out);

}  // namespace lw::ops
