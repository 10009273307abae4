// The vendor libraries behind CUDA's names: cuBLASLt, cuRAND, CUB and NCCL on CUDA; hipBLASLt,
// hipRAND, hipCUB and RCCL on HIP through the forwarding headers (the same include lines).
#include "vendor_shims.h"

#include <cub/cub.cuh>
#include <cublasLt.h>
#include <curand.h>
#if defined(LW_HAVE_NCCL)
#include <nccl.h>
#endif

#include "gpu/launch.h"

namespace lw::test {

namespace {

// One CUB warp reduction per block of one physical warp.
__global__ void cub_warp_sum_kernel(const float* in, float* out) {
  using WarpReduce = cub::WarpReduce<float>;
  LW_SHARED(typename WarpReduce::TempStorage, temp, [1]);
  const float v = in[threadIdx.x];
  const float total = WarpReduce(temp[0]).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

}  // namespace

bool blaslt_handle_roundtrip() {
  cublasLtHandle_t handle = nullptr;
  if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) return false;
  return cublasLtDestroy(handle) == CUBLAS_STATUS_SUCCESS;
}

bool curand_uniform(float* out, size_t n, unsigned long long seed, cudaStream_t stream) {
  curandGenerator_t gen = nullptr;
  if (curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_DEFAULT) != CURAND_STATUS_SUCCESS) return false;
  const bool ok = curandSetStream(gen, stream) == CURAND_STATUS_SUCCESS &&
                  curandSetPseudoRandomGeneratorSeed(gen, seed) == CURAND_STATUS_SUCCESS &&
                  curandGenerateUniform(gen, out, n) == CURAND_STATUS_SUCCESS;
  return curandDestroyGenerator(gen) == CURAND_STATUS_SUCCESS && ok;
}

void cub_warp_sum(const float* in, float* out, int warp_size, cudaStream_t stream) {
  gpu::launch("cub_warp_sum", cub_warp_sum_kernel, {dim3(1), dim3(warp_size), 0, stream}, in, out);
}

int nccl_version() {
#if defined(LW_HAVE_NCCL)
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : -1;
#else
  return 0;
#endif
}

}  // namespace lw::test
