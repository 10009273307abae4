// Test kernels over the warp and block primitives of gpu/. Pointers are device pointers; each
// launch is ordered on `stream` (the test context's), like the copies around it.
#pragma once
#include "gpu/compat.h"

namespace lw::test {

enum class ReduceOp { sum, max, min };

// Every thread of every block writes warp_reduce<width>(in[i]) to out[i], i = its global index.
// Throws lw::Error when width exceeds the device's warp size.
void run_warp_reduce(const float* in, float* out, int width, ReduceOp op, unsigned blocks, dim3 block, int warp_size,
                     cudaStream_t stream);

// Every thread writes warp_broadcast<width>(in[i], src) to out[i].
void run_warp_broadcast(const float* in, float* out, int width, int src, unsigned blocks, dim3 block, int warp_size,
                        cudaStream_t stream);

// Every thread writes block_reduce(in[i]) to out[i] (so each thread's copy of the result is checked).
void run_block_reduce(const float* in, float* out, ReduceOp op, unsigned blocks, dim3 block, cudaStream_t stream);

// Writes the compile-time physical warp size seen by device code to *out.
void run_device_warp_size(int* out, cudaStream_t stream);

// One block copies in[0, 256 + dynamic_floats) to out through 1 KiB of static shared memory and
// dynamic_floats floats of dynamic shared memory (gpu::allow_dynamic_shared raises the limit).
void run_shared_round_trip(const float* in, float* out, int dynamic_floats, cudaStream_t stream);

// Writes the lane and warp of each thread (lane_id, warp_id) for a block of shape `block`.
void run_lane_ids(int* lane, int* warp, dim3 block, cudaStream_t stream);

// The columns a narrow product computes: mma::kNarrowCols (checked where the kernel is built).
inline constexpr int kNarrowFragmentCols = 8;

// One warp per block, one 16x16 tile per block (gpu/matrix_fragment.h): d = a.b + c, with a
// [16][16] row-major, b [16][16] row-major or (b_transposed) its transpose row-major, c and d
// fp32 [16][16]; row_max[16] gets each row's maximum of d through reduce_row. via_shared: the
// tiles are copied to shared memory and loaded with the *_shared loads (ldmatrix on NVIDIA).
// Only the first `active_lanes` lanes of the warp go on to the multiplication (the rest
// return). narrow: mma_narrow instead of mma (d's first kNarrowFragmentCols columns are the
// product's, row_max their maxima). narrow_rows > 0 (narrow, b_transposed and via_shared only):
// B from load_b_narrow_transposed_shared with only the transpose's first narrow_rows rows, so
// d's columns from narrow_rows on are c's. T: half or bfloat16.
template <class T>
void run_fragment_mma(const T* a, const T* b, bool b_transposed, bool via_shared, const float* c, float* d,
                      float* row_max, unsigned tiles, int active_lanes, int warp_size, cudaStream_t stream,
                      bool narrow = false, int narrow_rows = 0);

}  // namespace lw::test
