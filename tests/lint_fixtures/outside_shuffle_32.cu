// Fixture for lw-simt-lint (outside profile), class 1: shuffle offsets laid out for 32 lanes.
// Each marked line must be reported with exactly the listed rules; its fixed twin beside it
// (unmarked) must not be reported.
#include <hip/hip_runtime.h>

__device__ float sum_down_broken(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down(v, o);  // expect: shuffle-32
  return v;
}
__device__ float sum_down_fixed(float v) {
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down(v, o);
  return v;
}

__device__ float sum_xor_shift_broken(float v) {
  for (int offset = 16; offset; offset >>= 1) {  // expect: shuffle-32
    v += __shfl_xor(v, offset);
  }
  return v;
}
__device__ float sum_xor_shift_fixed(float v) {
  for (int offset = warpSize >> 1; offset; offset >>= 1) {
    v += __shfl_xor(v, offset);
  }
  return v;
}

__device__ float scan_up_broken(float v, int lane) {
  for (unsigned d = 1; d < 32; d *= 2) {  // expect: shuffle-32
    const float t = __shfl_up(v, d);
    if (lane >= d) v += t;
  }
  return v;
}
__device__ float scan_up_fixed(float v, int lane) {
  for (unsigned d = 1; d < warpSize; d *= 2) {
    const float t = __shfl_up(v, d);
    if (lane >= d) v += t;
  }
  return v;
}

__device__ float unrolled_broken(float v) {
  v += __shfl_down(v, 16);  // expect: shuffle-32
  v += __shfl_down(v, 8);
  return v;
}
__device__ float unrolled_fixed(float v) {
  if (warpSize == 64) v += __shfl_down(v, 32);
  v += __shfl_down(v, 16);
  v += __shfl_down(v, 8);
  return v;
}

__device__ float sync_form_broken(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(__activemask(), v, o);  // expect: shuffle-32
  return v;
}
__device__ float sync_form_fixed(float v) {
  for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_down_sync(__activemask(), v, o);
  return v;
}

// A width says that a 32-lane group is meant: not reported.
__device__ float half_wave_group(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor(v, o, 32);
  return v + __shfl_down(v, 16, 32);
}

// Offsets that do not feed a shuffle, and a guarded wave32 path.
__device__ float not_a_shuffle(float* s, int t) {
  for (int o = 16; o > 0; o /= 2) s[t] += s[t + o];
  if (warpSize == 32) {
    for (int o = 16; o > 0; o /= 2) s[t] += __shfl_xor(s[t], o);
  }
  const char* text = "__shfl_down(v, 16)";  // __shfl_down(v, 16) in a comment
  return s[t] + text[0];
}

__device__ float allowed(float v) {
  return __shfl_down(v, 16);  // lint: not-a-warp
}
