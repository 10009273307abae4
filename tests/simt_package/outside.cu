// A kernel source as an outside project writes it: checked shared memory (LW_SHARED), CUDA's
// device min/max, and a ballot count with a wave64 bug beside its fixed twin. Prints one line
// per kernel: its result, and the sanitizer's fault class or "clean".
#include <cuda_runtime.h>
#include <lw_simt/portable.h>

#include <cstdio>
#include <string>

// The block's sum, through checked shared memory.
__device__ float block_sum(const float* in) {
  LW_SHARED(float, partial, [1024]);
  const unsigned t = threadIdx.x;
  partial[t] = in[t];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (t < s) partial[t] = partial[t] + partial[t + s];
    __syncthreads();
  }
  return partial[0];
}

__global__ void count_and_sum_broken(const float* in, int* count, float* sum) {
  const float total = block_sum(in);
  const unsigned long long votes = __ballot(in[threadIdx.x] > 0.0f);
  if (threadIdx.x == 0) {
    *count = __popc(votes);  // drops the votes of lanes 32..63 on a 64-lane warp
    *sum = max(total, 0.0f) + min(0, -1) + 1;
  }
}

__global__ void count_and_sum_fixed(const float* in, int* count, float* sum) {
  const float total = block_sum(in);
  const unsigned long long votes = __ballot(in[threadIdx.x] > 0.0f);
  if (threadIdx.x == 0) {
    *count = __popcll(votes);
    *sum = max(total, 0.0f) + min(0, -1) + 1;
  }
}

template <class Kernel>
void run(const char* name, Kernel kernel, const float* in, int n) {
  int count = -1;
  float sum = -1.0f;
  std::string verdict = "clean";
  try {
    lw::simt::run(name, kernel, dim3(1), dim3(n), 0, in, &count, &sum);
  } catch (const lw::simt::KernelError& e) {
    verdict = lw::simt::fault_name(e.reports().front().fault);
  }
  std::printf("%s: count %d, sum %.1f, %s\n", name, count, sum, verdict.c_str());
}

int main() {
  lw::simt::set_sanitize(true);
  constexpr int n = 128;
  float in[n];
  for (int i = 0; i < n; ++i) in[i] = (i % 4 == 0) ? 2.0f : -0.5f;  // 32 positive: count 32, sum 16
  std::printf("warp size %d\n", warpSize);
  run("count_and_sum_broken", count_and_sum_broken, in, n);
  run("count_and_sum_fixed", count_and_sum_fixed, in, n);
  return 0;
}
