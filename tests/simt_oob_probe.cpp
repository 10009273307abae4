// A kernel that stores one element past the end of its device buffer, and its fixed twin; and
// a kernel that stores one element past a local array, after a barrier (the device thread's
// fiber has left its stack and come back). Built and run only under AddressSanitizer
// (LW_SANITIZE_ADDRESS=ON), where the broken ones must be reported with the kernel, block and
// thread that made the store.
//     simt_oob_probe broken | fixed | stack
#include <cstdio>
#include <string>

#include "gpu/launch.h"

namespace {

__global__ void oob_store_broken(float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) out[i] = 1.0f;  // i == n is one past the end
}

__global__ void oob_store_fixed(float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = 1.0f;
}

__global__ void oob_stack_broken(float* out, int n, int index) {
  float local[8];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  for (int j = 0; j < 8; ++j) local[j] = static_cast<float>(i + j);
  __syncthreads();
  if (i == 77) local[index] = 0.0f;  // index 8: one past the end
  if (i < n) out[i] = local[i % 8];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "broken" && mode != "fixed" && mode != "stack") {
    std::fprintf(stderr, "usage: simt_oob_probe broken | fixed | stack\n");
    return 2;
  }
  const int n = 1000;
  float* buf = nullptr;
  LW_CUDA_CHECK(cudaMalloc(&buf, n * sizeof(float)));
  const lw::gpu::LaunchConfig cfg{dim3(4), dim3(256), 0, nullptr};  // the emulator runs synchronously
  if (mode == "stack") {
    lw::gpu::launch("oob_stack_broken", oob_stack_broken, cfg, buf, n, 8);
  } else if (mode == "broken") {
    lw::gpu::launch("oob_store_broken", oob_store_broken, cfg, buf, n);
  } else {
    lw::gpu::launch("oob_store_fixed", oob_store_fixed, cfg, buf, n);
  }
  LW_CUDA_CHECK(cudaFree(buf));
  std::printf("%s kernel ran to the end\n", mode.c_str());
  return 0;
}
