// Embedding lookup: rows of a table gathered by token id.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// out[t, :] = table[ids[t], :] for t < tokens; a row of the table is `hidden` elements. An id
// outside [0, vocab) writes zeros to its row and stores t + 1 in *bad_token (device int64,
// written only on error, by one of the bad tokens), so the caller can report it.
template <class T, class Id>
void embedding(T* out, const T* table, const Id* ids, int64_t tokens, int64_t vocab, int64_t hidden,
               int64_t* bad_token, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
