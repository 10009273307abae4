// A kernel that stores one element past the end of its device buffer, and its fixed twin.
// Built and run only under AddressSanitizer (LW_SANITIZE_ADDRESS=ON), where the broken one
// must be reported with the kernel, block and thread that made the store.
//     simt_oob_probe broken | fixed
#include <cstdio>
#include <cstring>

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

}  // namespace

int main(int argc, char** argv) {
  const bool broken = argc > 1 && std::strcmp(argv[1], "broken") == 0;
  const int n = 1000;
  float* buf = nullptr;
  LW_CUDA_CHECK(cudaMalloc(&buf, n * sizeof(float)));
  const lw::gpu::LaunchConfig cfg{dim3(4), dim3(256), 0, nullptr};  // the emulator runs synchronously
  if (broken) {
    lw::gpu::launch("oob_store_broken", oob_store_broken, cfg, buf, n);
  } else {
    lw::gpu::launch("oob_store_fixed", oob_store_fixed, cfg, buf, n);
  }
  LW_CUDA_CHECK(cudaFree(buf));
  std::printf("%s kernel ran to the end\n", broken ? "broken" : "fixed");
  return 0;
}
