// Thin calls into the vendor libraries, for the test that they are linked and work.
#pragma once
#include <cstddef>

#include "gpu/compat.h"

namespace lw::test {

bool blaslt_handle_roundtrip();
bool curand_uniform(float* out, size_t n, unsigned long long seed, cudaStream_t stream);
void cub_warp_sum(const float* in, float* out, int warp_size, cudaStream_t stream);
int nccl_version();  // 0 when built without NCCL, -1 on error

}  // namespace lw::test
