// Embedding lookup: rows of a table gathered by token id.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// out[t, :] = table[ids[t] - first, :] for t < tokens; the table holds the `rows` rows of ids
// [first, first + rows), each `hidden` elements (first is 0 for a whole table; a shard of a
// tensor-parallel rank starts further on). An id outside the table writes zeros to its row
// and, when bad_token is not null, stores t + 1 in *bad_token (device int64, written only on
// error, by one of the bad tokens), so the caller can report it.
template <class T, class Id>
void embedding(T* out, const T* table, const Id* ids, int64_t tokens, int64_t first, int64_t rows, int64_t hidden,
               int64_t* bad_token, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
