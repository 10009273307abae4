// Fixture for lw-simt-lint (outside profile), class 3: a 64-bit ballot narrowed to 32 bits.
// Marked lines must be reported; their fixed twins must not.
#include <hip/hip_runtime.h>

__global__ void count_broken(const float* in, int* out) {
  const unsigned long long b = __ballot(in[threadIdx.x] > 0.0f);
  out[0] = __popc(b);  // expect: ballot-narrowed
}
__global__ void count_fixed(const float* in, int* out) {
  const unsigned long long b = __ballot(in[threadIdx.x] > 0.0f);
  out[0] = __popcll(b);
}

__global__ void stored_broken(const float* in, unsigned* out) {
  unsigned votes = __ballot(in[threadIdx.x] > 0.0f);  // expect: ballot-narrowed
  out[0] = votes;
}
__global__ void stored_fixed(const float* in, unsigned long long* out) {
  unsigned long long votes = __ballot(in[threadIdx.x] > 0.0f);
  out[0] = votes;
}

__global__ void auto_broken(const float* in, int* out) {
  auto mask = __ballot_sync(__activemask(), in[threadIdx.x] > 0.0f);
  const uint32_t low = mask;  // expect: ballot-narrowed
  const int first = __ffs(mask);  // expect: ballot-narrowed
  out[0] = static_cast<int>(low) + first + (int)mask;  // expect: ballot-narrowed
}
__global__ void auto_fixed(const float* in, int* out) {
  auto mask = __ballot_sync(__activemask(), in[threadIdx.x] > 0.0f);
  const uint64_t all = mask;
  const int first = __ffsll(mask);
  out[0] = static_cast<int>(__popcll(all)) + first;
}

__global__ void direct_broken(const float* in, int* out) {
  out[0] = __popc(__ballot(in[threadIdx.x] > 0.0f));  // expect: ballot-narrowed
  out[1] = static_cast<unsigned>(__ballot(in[threadIdx.x] < 0.0f));  // expect: ballot-narrowed
}
__global__ void direct_fixed(const float* in, int* out) {
  out[0] = __popcll(__ballot(in[threadIdx.x] > 0.0f));
  out[1] = static_cast<unsigned long long>(__ballot(in[threadIdx.x] < 0.0f));
}

// Split into halves on purpose: not reported.
__global__ void halves(const float* in, unsigned* out) {
  const unsigned long long v = __ballot(in[threadIdx.x] > 0.0f);
  out[0] = (unsigned)v;
  out[1] = (unsigned)(v >> 32);
}
