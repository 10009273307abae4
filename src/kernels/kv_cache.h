// The paged KV cache: per layer, K and V caches of [num_blocks, block_size, kv_heads, head_dim];
// token t of a sequence lives in slot block_table[t / block_size] * block_size + t % block_size.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

struct KvWriteArgs {
  int64_t tokens;
  int kv_heads;
  int head_dim;
  int64_t k_token_stride;  // elements between tokens of k (>= kv_heads * head_dim)
  int64_t v_token_stride;
  int64_t num_slots;       // num_blocks * block_size
};

// k_cache/v_cache[slot_mapping[t]] = k[t], v[t]; a slot of -1 skips the token (padding).
// A slot outside [-1, num_slots) stores t + 1 in *bad_token instead of writing.
template <class T>
void kv_write(const KvWriteArgs& a, const T* k, const T* v, const int64_t* slot_mapping, T* k_cache, T* v_cache,
              int64_t* bad_token, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
