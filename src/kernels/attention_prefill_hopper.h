// Prefill attention on NVIDIA Hopper's warpgroup multiply (gpu/wgmma.h, sm_90a): the plan,
// query tiles, split and merge of kernels/attention_prefill.h, with each 64-row tile one
// warpgroup whose Q.K^T and P.V read Q, K and V straight from 128-byte swizzled shared tiles.
// The scores' softmax, masking and output are the portable kernel's (kernels/attention_tile.h),
// so the two differ only in the order of the products' additions; the portable kernel is its
// oracle. Built where the CUDA architectures include 90 (LW_HOPPER_ATTENTION; the file is
// compiled for sm_90a alone), absent on HIP and the emulator.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/attention_prefill.h"

namespace lw::kernels {

// Head dims the kernel is built for (the keys and values in the model's dtype, not 8-bit).
inline bool hopper_prefill_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }  // lint: not-a-warp

#if defined(LW_HOPPER_ATTENTION)
// As prefill_attention (same arguments, tables and workspace), for a cache in T. Runs on sm_90
// devices only (the caller checks gpu::DeviceCaps::matrix.wgmma).
template <class T>
void hopper_prefill_attention(const PrefillAttentionArgs& a, const T* q, const T* k_cache, const T* v_cache,
                              const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info,
                              float* workspace, T* out, cudaStream_t stream);
#endif

}  // namespace lw::kernels
