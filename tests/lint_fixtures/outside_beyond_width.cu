// Fixture for lw-simt-lint (outside profile), class 4: a shuffle offset or XOR mask >= the
// width, and 0xffffffff as a lane mask. Marked lines must be reported; their fixed twins must not.
#include <cuda_runtime.h>

__device__ float butterfly_broken(float v) {
  for (int m = 32; m > 0; m /= 2) v += __shfl_xor(v, m);  // expect: shuffle-beyond-width
  return v;
}
__device__ float butterfly_fixed(float v) {
  for (int m = warpSize / 2; m > 0; m /= 2) v += __shfl_xor(v, m);
  return v;
}

__device__ float literal_broken(float v) {
  v += __shfl_xor_sync(__activemask(), v, 32);  // expect: shuffle-beyond-width
  return v;
}
__device__ float literal_fixed(float v) {
  if (warpSize > 32) v += __shfl_xor_sync(__activemask(), v, 32);
  return v;
}

__device__ float guarded_block(float v) {
  if (warpSize == 64) {
    for (int m = 32; m > 0; m >>= 1) v += __shfl_xor(v, m);
  } else {
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor(v, m);
  }
  return v;
}

__device__ float upward_broken(float v) {
  for (int m = 1; m <= 32; m <<= 1) {  // expect: shuffle-beyond-width
    v += __shfl_xor(v, m);
  }
  return v;
}
__device__ float upward_fixed(float v) {
  for (int m = 1; m < warpSize; m <<= 1) {
    v += __shfl_xor(v, m);
  }
  return v;
}

__device__ float sub_width_broken(float v) {
  return __shfl_xor(v, 16, 16);  // expect: shuffle-beyond-width
}
__device__ float sub_width_fixed(float v) {
  return __shfl_xor(v, 8, 16);
}

constexpr unsigned FULL_MASK = 0xffffffff;  // expect: mask-literal
constexpr unsigned long long ALL_LANES = ~0ull;

__device__ float masks_broken(float v) {
  v += __shfl_down_sync(0xffffffff, v, 1);  // expect: mask-literal
  v += __shfl_down_sync(FULL_MASK, v, 2);
  return v + __any_sync(0xFFFFFFFFu, v > 0);  // expect: mask-literal
}
__device__ float masks_fixed(float v) {
  v += __shfl_down_sync(__activemask(), v, 1);
  v += __shfl_down_sync(ALL_LANES, v, 2);
  const unsigned bits = 0xffffffff;  // not a mask: a bit pattern
  return v + __any_sync(ALL_LANES, v > 0) + bits;
}
