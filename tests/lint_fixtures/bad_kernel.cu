// Fixture for the warp-width lint's self-test: each marked line must be reported with
// exactly the listed rules, and unmarked lines must not be reported.
__global__ void bad(float* out, const float* in, int n) {
  __shared__ float partial[32];  // expect: warp-literal, raw-shared
  const int lane = threadIdx.x % 32;  // expect: warp-literal, lane-arithmetic
  const int warp = threadIdx.x >> 5;  // expect: lane-arithmetic
  const int w2 = threadIdx.x / warpSize;  // expect: warpsize
  float v = in[threadIdx.x];
  v += __shfl_xor_sync(0xffffffff, v, 16);  // expect: mask-literal, raw-intrinsic
  unsigned m = __ballot_sync(0xFFFFFFFFu, v > 0);  // expect: mask-literal, raw-intrinsic
  if (lane == 0) partial[warp] = v + w2 + m;
  const int bytes = 64;  // lint: not-a-warp
  const char* text = "32 lanes % 32";
  // A comment that mentions 32 and warpSize is fine.
  out[threadIdx.x] = partial[lane & 31] + bytes + text[0];  // expect: lane-arithmetic
  const float x = 32.0f + 1e32f + int64_t(3) + n;
  bad<<<1, 1>>>(out, in, n);  // expect: raw-launch
}
