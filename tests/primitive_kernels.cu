#include "primitive_kernels.h"

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"

namespace lw::test {

namespace {

__device__ __forceinline__ unsigned global_index() {
  return blockIdx.x * gpu::block_threads() + gpu::linear_thread_id();
}

template <int Width>
__global__ void warp_reduce_kernel(const float* in, float* out, ReduceOp op) {
  if constexpr (Width <= gpu::kWarpSize) {
    const unsigned i = global_index();
    const float v = in[i];
    float r = op == ReduceOp::sum ? gpu::warp_reduce_sum<Width>(v)
              : op == ReduceOp::max ? gpu::warp_reduce_max<Width>(v)
                                    : gpu::warp_reduce_min<Width>(v);
    out[i] = r;
  }
}

template <int Width>
__global__ void warp_broadcast_kernel(const float* in, float* out, int src) {
  if constexpr (Width <= gpu::kWarpSize) {
    const unsigned i = global_index();
    out[i] = gpu::warp_broadcast<Width>(in[i], src);
  }
}

__global__ void block_reduce_kernel(const float* in, float* out, ReduceOp op) {
  const unsigned i = global_index();
  const float v = in[i];
  out[i] = op == ReduceOp::sum ? gpu::block_reduce_sum(v) : op == ReduceOp::max ? gpu::block_reduce_max(v)
                                                                                 : gpu::block_reduce_min(v);
}

__global__ void device_warp_size_kernel(int* out) { *out = gpu::kWarpSize; }

constexpr int kStaticSharedFloats = 256;
// Stages `in` through 1 KiB of static and `n` floats of dynamic shared memory (every thread a
// strided part of each), then writes both back: out[i] = in[i] for i < kStaticSharedFloats + n.
__global__ void shared_round_trip_kernel(const float* in, float* out, int n) {
  LW_SHARED(float, fixed, [kStaticSharedFloats]);
  LW_DYNAMIC_SHARED(float, dynamic);
  const int t = static_cast<int>(gpu::linear_thread_id()), threads = static_cast<int>(gpu::block_threads());
  for (int i = t; i < kStaticSharedFloats; i += threads) fixed[i] = in[i];
  for (int i = t; i < n; i += threads) dynamic[i] = in[kStaticSharedFloats + i];
  __syncthreads();
  for (int i = t; i < kStaticSharedFloats; i += threads) out[i] = fixed[i];
  for (int i = t; i < n; i += threads) out[kStaticSharedFloats + i] = dynamic[i];
}

__global__ void lane_ids_kernel(int* lane, int* warp) {
  const unsigned t = gpu::linear_thread_id();
  lane[t] = gpu::lane_id();
  warp[t] = gpu::warp_id();
}

static_assert(kNarrowFragmentCols == gpu::mma::kNarrowCols, "the test's narrow columns are the layer's");

template <class T>
__global__ void fragment_mma_kernel(const T* a, const T* b, bool b_transposed, bool via_shared, const float* c,
                                    float* d, float* row_max, int active_lanes, bool narrow, int narrow_rows) {
#if LW_MATRIX_CORES
  namespace mma = gpu::mma;
  const int lane = gpu::lane_id();
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * 256;
  LW_DYNAMIC_SHARED(T, tiles);  // a's tile, then b's, then 8 zeros
  if (via_shared) {
    for (int i = lane; i < 256; i += gpu::kWarpSize) {
      tiles[i] = a[tile + i];
      tiles[256 + i] = b[tile + i];
    }
    if (lane < 8) tiles[512 + lane] = gpu::from_float<T>(0.0f);
    gpu::sync_warp();
  }
  if (lane >= active_lanes) return;
  mma::FragA<T> fa;
  mma::FragB<T> fb;
  mma::FragC fc;
  if (via_shared) {
    mma::load_a_shared(fa, tiles, 16);
    if (narrow_rows > 0) mma::load_b_narrow_transposed_shared(fb, tiles + 256, 16, narrow_rows, tiles + 512);
    else if (b_transposed) mma::load_b_transposed_shared(fb, tiles + 256, 16);
    else mma::load_b_shared(fb, tiles + 256, 16);
  } else {
    mma::load_a(fa, a + tile, 16);
    if (b_transposed) mma::load_b_transposed(fb, b + tile, 16);
    else mma::load_b(fb, b + tile, 16);
  }
#pragma unroll
  for (int i = 0; i < mma::kC; ++i) fc.x[i] = c[tile + mma::c_row(lane, i) * 16 + mma::c_col(lane, i)];
  if (narrow) mma::mma_narrow(fc, fa, fb, fc);
  else mma::mma(fc, fa, fb, fc);
  float m[mma::kRowSlots];
#pragma unroll
  for (int s = 0; s < mma::kRowSlots; ++s) m[s] = -INFINITY;
#pragma unroll
  for (int i = 0; i < mma::kC; ++i) {
    d[tile + mma::c_row(lane, i) * 16 + mma::c_col(lane, i)] = fc.x[i];
    if (!narrow || mma::c_col(lane, i) < mma::kNarrowCols) m[mma::c_slot(i)] = fmaxf(m[mma::c_slot(i)], fc.x[i]);
  }
#pragma unroll
  for (int s = 0; s < mma::kRowSlots; ++s) {
    m[s] = mma::reduce_row(m[s], gpu::MaxOp{});
    row_max[blockIdx.x * 16 + mma::slot_row(lane, s)] = m[s];  // the lanes of a row write one value
  }
#else
  __trap();
#endif
}

template <template <int> class Dispatch, class... Args>
void by_width(int width, int warp_size, Args&&... args) {
  LW_CHECK(width >= 1 && width <= 64 && (width & (width - 1)) == 0, "width " << width << " is not a power of two <= 64");  // lint: not-a-warp (widths under test)
  LW_CHECK(width <= warp_size, "width " << width << " exceeds the device's warp size " << warp_size);
  switch (width) {
    case 1: Dispatch<1>::run(args...); break;
    case 2: Dispatch<2>::run(args...); break;
    case 4: Dispatch<4>::run(args...); break;
    case 8: Dispatch<8>::run(args...); break;
    case 16: Dispatch<16>::run(args...); break;
    case 32: Dispatch<32>::run(args...); break;  // lint: not-a-warp
    default: Dispatch<64>::run(args...); break;  // lint: not-a-warp
  }
}

template <int W>
struct ReduceLaunch {
  static void run(const float* in, float* out, ReduceOp op, unsigned blocks, dim3 block, cudaStream_t stream) {
    gpu::launch("warp_reduce_test", warp_reduce_kernel<W>, {dim3(blocks), block, 0, stream}, in, out, op);
  }
};
template <int W>
struct BroadcastLaunch {
  static void run(const float* in, float* out, int src, unsigned blocks, dim3 block, cudaStream_t stream) {
    gpu::launch("warp_broadcast_test", warp_broadcast_kernel<W>, {dim3(blocks), block, 0, stream}, in, out, src);
  }
};

}  // namespace

void run_warp_reduce(const float* in, float* out, int width, ReduceOp op, unsigned blocks, dim3 block, int warp_size,
                     cudaStream_t stream) {
  by_width<ReduceLaunch>(width, warp_size, in, out, op, blocks, block, stream);
}

void run_warp_broadcast(const float* in, float* out, int width, int src, unsigned blocks, dim3 block, int warp_size,
                        cudaStream_t stream) {
  by_width<BroadcastLaunch>(width, warp_size, in, out, src, blocks, block, stream);
}

void run_block_reduce(const float* in, float* out, ReduceOp op, unsigned blocks, dim3 block, cudaStream_t stream) {
  gpu::launch("block_reduce_test", block_reduce_kernel, {dim3(blocks), block, 0, stream}, in, out, op);
}

void run_device_warp_size(int* out, cudaStream_t stream) {
  gpu::launch("device_warp_size", device_warp_size_kernel, {dim3(1), dim3(1), 0, stream}, out);
}

template <class T>
void run_fragment_mma(const T* a, const T* b, bool b_transposed, bool via_shared, const float* c, float* d,
                      float* row_max, unsigned tiles, int active_lanes, int warp_size, cudaStream_t stream,
                      bool narrow, int narrow_rows) {
  LW_CHECK(narrow_rows == 0 || (narrow && b_transposed && via_shared && narrow_rows <= kNarrowFragmentCols),
           "narrow_rows " << narrow_rows << " needs a narrow product of a transposed B from shared memory");
  gpu::launch("fragment_mma_test", fragment_mma_kernel<T>, {dim3(tiles), dim3(warp_size), 520 * sizeof(T), stream}, a,
              b, b_transposed, via_shared, c, d, row_max, active_lanes, narrow, narrow_rows);
}
template void run_fragment_mma<half>(const half*, const half*, bool, bool, const float*, float*, float*, unsigned, int,
                                     int, cudaStream_t, bool, int);
template void run_fragment_mma<bfloat16>(const bfloat16*, const bfloat16*, bool, bool, const float*, float*, float*,
                                         unsigned, int, int, cudaStream_t, bool, int);

void run_shared_round_trip(const float* in, float* out, int dynamic_floats, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(dynamic_floats) * sizeof(float);
  gpu::allow_dynamic_shared(shared_round_trip_kernel, bytes);
  gpu::launch("shared_round_trip", shared_round_trip_kernel, {dim3(1), dim3(256), bytes, stream}, in, out, dynamic_floats);
}

void run_lane_ids(int* lane, int* warp, dim3 block, cudaStream_t stream) {
  gpu::launch("lane_ids", lane_ids_kernel, {dim3(1), block, 0, stream}, lane, warp);
}

}  // namespace lw::test
