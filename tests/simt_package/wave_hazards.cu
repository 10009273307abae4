// Wave64 hazards as an outside project writes them, each beside its fixed twin, for the
// installed lw-simt-lint (tests/simt_package/check.py): it must report exactly the lines that
// carry an expect marker, with the rule named there. Not compiled: the sanitizer reports none of these, each gives a wrong
// answer on one warp size.
#include <hip/hip_runtime.h>

// 1. Shuffle offsets for 32 lanes: lanes 32..63 never reach lane 0.
__device__ float warp_sum_broken(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down(v, o);  // expect: shuffle-32
  return v;
}
__device__ float warp_sum_fixed(float v) {
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down(v, o);
  return v;
}

// 2. Lane and warp numbers from 32: two lanes of one wave share a slot.
__global__ void per_warp_broken(float* partial, const float* in) {
  const float s = warp_sum_broken(in[threadIdx.x]);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;  // expect: lane-index-32
}
__global__ void per_warp_fixed(float* partial, const float* in) {
  const float s = warp_sum_fixed(in[threadIdx.x]);
  if (threadIdx.x % warpSize == 0) partial[threadIdx.x / warpSize] = s;
}

// 3. A 64-bit ballot counted in 32 bits: the votes of lanes 32..63 are lost.
__global__ void count_broken(const float* in, int* count) {
  const unsigned long long votes = __ballot(in[threadIdx.x] > 0.0f);
  if (threadIdx.x == 0) *count = __popc(votes);  // expect: ballot-narrowed
}
__global__ void count_fixed(const float* in, int* count) {
  const unsigned long long votes = __ballot(in[threadIdx.x] > 0.0f);
  if (threadIdx.x == 0) *count = __popcll(votes);
}

// 4. An XOR butterfly starting at 32: on a 32-lane warp each lane adds itself first.
__device__ float butterfly_broken(float v) {
  for (int m = 32; m > 0; m >>= 1) v += __shfl_xor(v, m);  // expect: shuffle-beyond-width
  return v;
}
__device__ float butterfly_fixed(float v) {
  for (int m = warpSize / 2; m > 0; m >>= 1) v += __shfl_xor(v, m);
  return v;
}

// A 32-lane "all lanes" mask.
__device__ float masked_broken(float v) {
  return __shfl_down_sync(0xffffffff, v, 1);  // expect: mask-literal
}
__device__ float masked_fixed(float v) {
  return __shfl_down_sync(__activemask(), v, 1);
}
