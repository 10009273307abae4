// Fixture for lw-simt-lint (outside profile), class 2: lane and warp indices from a literal 32
// on thread-derived values. Marked lines must be reported; their fixed twins must not.
#include <hip/hip_runtime.h>

__global__ void partial_sums_broken(float* out, const float* in) {
  const int lane = threadIdx.x % 32;  // expect: lane-index-32
  const int warp = threadIdx.x / 32;  // expect: lane-index-32
  out[warp * 64 + lane] = in[threadIdx.x];
}
__global__ void partial_sums_fixed(float* out, const float* in) {
  const int lane = threadIdx.x % warpSize;
  const int warp = threadIdx.x / warpSize;
  out[warp * 64 + lane] = in[threadIdx.x];
}

__global__ void masks_broken(int* out) {
  const unsigned t = threadIdx.x;
  const unsigned lane_id = t & 31;  // expect: lane-index-32
  const unsigned wid = t >> 5;  // expect: lane-index-32
  out[wid] = lane_id;
}
__global__ void masks_fixed(int* out) {
  const unsigned t = threadIdx.x;
  const unsigned lane_id = t & (warpSize - 1);
  const unsigned wid = t / warpSize;
  out[wid] = lane_id;
}

__global__ void global_warp_broken(int* out) {
  const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / 32;  // expect: lane-index-32
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  out[tid >> 5] = gw;  // expect: lane-index-32
}
__global__ void global_warp_fixed(int* out) {
  const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  out[tid / warpSize] = gw;
}

// Not thread indices: sizes, tiles, bytes. Not reported.
__global__ void other_values(int* out, int n, int bytes) {
  const int tiles = n / 32;
  const int rem = bytes % 32;
  const int words = (bytes + 31) >> 5;
  const int mixed = blockIdx.x / 32;
  out[0] = tiles + rem + words + mixed;
#if __AMDGCN_WAVEFRONT_SIZE == 32
  out[1] = threadIdx.x % 32;
#endif
  out[2] = threadIdx.x % 32;  // lint: not-a-warp
}
