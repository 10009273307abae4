// The planted-bug suite of the wave-portability sanitizer. Each broken kernel is the smallest
// kernel that shows one bug class, with a fixed twin beside it. A broken kernel must be
// reported with its class at the warp size where it is wrong (and, where it is right at the
// other warp size, run clean there); every fixed twin must run clean at both warp sizes and
// give the right answer. Host target only; the build's warp size is LW_WARP_SIZE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"

namespace {

using lw::simt::Fault;
using lw::simt::KernelError;
constexpr int W = lw::simt::kWarpSize;

// Runs a kernel with the sanitizer on; returns the fault reports (empty when it ran clean).
template <class... KArgs, class... Args>
std::vector<lw::simt::Report> sanitized(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                        Args... args) {
  const bool before = lw::simt::sanitize();
  lw::simt::set_sanitize(true);
  std::vector<lw::simt::Report> reports;
  try {
    lw::simt::run(name, kernel, grid, block, 0, args...);
  } catch (const KernelError& e) {
    reports = e.reports();
  }
  lw::simt::set_sanitize(before);
  return reports;
}

std::string text(const std::vector<lw::simt::Report>& reports) {
  std::string s;
  for (const auto& r : reports) s += r.to_string() + "\n";
  return s.empty() ? "(no report)" : s;
}

// The first report has class f and names the kernel, a block and a thread.
void expect_fault(const std::vector<lw::simt::Report>& reports, Fault f, const char* kernel) {
  ASSERT_FALSE(reports.empty()) << "no fault reported for " << kernel;
  EXPECT_EQ(reports.front().fault, f) << text(reports);
  EXPECT_EQ(reports.front().kernel, kernel);
  const std::string msg = reports.front().to_string();
  EXPECT_NE(msg.find(std::string("kernel ") + kernel), std::string::npos) << msg;
  EXPECT_NE(msg.find("block ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("thread ("), std::string::npos) << msg;
}

void expect_clean(const std::vector<lw::simt::Report>& reports) { EXPECT_TRUE(reports.empty()) << text(reports); }

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) + 1.0f;
  return v;
}

// ---- 1. full-warp reduction over a 32-thread block ----

__global__ void full_warp_sum_broken(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_xor(v, o);  // assumes 32 threads fill the warp
  if (threadIdx.x == 0) *out = v;
}
__global__ void full_warp_sum_fixed(const float* in, float* out) {
  float v = in[threadIdx.x];
  v = lw::gpu::warp_reduce_sum<32>(v);  // the reduction is as wide as the data, not the warp
  if (threadIdx.x == 0) *out = v;
}

TEST(PlantedBugs, FullWarpReductionOverA32ThreadBlock) {
  std::vector<float> in = iota_floats(32);
  const float want = std::accumulate(in.begin(), in.end(), 0.0f);
  float out = 0;
  auto broken = sanitized("full_warp_sum_broken", full_warp_sum_broken, dim3(1), dim3(32), in.data(), &out);
  if (W == 64) {
    expect_fault(broken, Fault::InactiveLaneRead, "full_warp_sum_broken");
    EXPECT_NE(broken.front().detail.find("never launched"), std::string::npos) << text(broken);
  } else {
    expect_clean(broken);
    EXPECT_EQ(out, want);
  }
  out = 0;
  expect_clean(sanitized("full_warp_sum_fixed", full_warp_sum_fixed, dim3(1), dim3(32), in.data(), &out));
  EXPECT_EQ(out, want);
}

// ---- 2. a dim3(32,32) block that assumes one row per warp ----

__global__ void row_mean_broken(const float* in, float* out) {
  const int row = threadIdx.y;
  float v = in[row * 32 + threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const float row_total = __shfl_sync(0xffffffffu, v, 0);  // "lane 0 of my row": only on a 32-lane warp
  out[row * 32 + threadIdx.x] = row_total / 32;
}
__global__ void row_mean_fixed(const float* in, float* out) {
  const int row = threadIdx.y;
  float v = in[row * 32 + threadIdx.x];
  v = lw::gpu::warp_reduce_sum<32>(v);
  const float row_total = lw::gpu::warp_broadcast<32>(v, 0);
  out[row * 32 + threadIdx.x] = row_total / 32;
}

TEST(PlantedBugs, RowPerWarpAssumptionOnA32x32Block) {
  std::vector<float> in(1024), out(1024, NAN);
  for (int i = 0; i < 1024; ++i) in[i] = static_cast<float>(i / 32);  // row r holds r
  auto broken = sanitized("row_mean_broken", row_mean_broken, dim3(1), dim3(32, 32), in.data(), out.data());
  if (W == 64) {
    expect_fault(broken, Fault::MaskMismatch, "row_mean_broken");
  } else {
    expect_clean(broken);
    for (int i = 0; i < 1024; ++i) ASSERT_EQ(out[i], static_cast<float>(i / 32));
  }
  std::fill(out.begin(), out.end(), NAN);
  expect_clean(sanitized("row_mean_fixed", row_mean_fixed, dim3(1), dim3(32, 32), in.data(), out.data()));
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(out[i], static_cast<float>(i / 32));
}

// ---- 3. a 0xffffffff-mask reduction on a 64-lane warp ----

__global__ void masked_sum_broken(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % warpSize == 0) out[threadIdx.x / warpSize] = v;
}
__global__ void masked_sum_fixed(const float* in, float* out) {
  float v = lw::gpu::warp_reduce_sum(in[threadIdx.x]);
  if (lw::gpu::lane_id() == 0) out[lw::gpu::warp_id()] = v;
}

TEST(PlantedBugs, ThirtyTwoBitMaskOnA64LaneWarp) {
  std::vector<float> in = iota_floats(128), out(4, NAN);
  auto broken = sanitized("masked_sum_broken", masked_sum_broken, dim3(1), dim3(128), in.data(), out.data());
  if (W == 64) {
    expect_fault(broken, Fault::MaskMismatch, "masked_sum_broken");
    EXPECT_NE(broken.front().detail.find("32-bit mask used on a 64-lane warp"), std::string::npos) << text(broken);
  } else {
    expect_clean(broken);
  }
  std::fill(out.begin(), out.end(), NAN);
  expect_clean(sanitized("masked_sum_fixed", masked_sum_fixed, dim3(1), dim3(128), in.data(), out.data()));
  for (int w = 0; w < 128 / W; ++w) {
    EXPECT_EQ(out[w], std::accumulate(in.begin() + w * W, in.begin() + (w + 1) * W, 0.0f));
  }
}

// ---- 4. block-reduction scratch for 32 partial sums, indexed from blockDim.x / 32 ----

__global__ void block_sum_broken(const float* in, float* out) {
  LW_SHARED(float, partial, [32]);
  const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  float v = lw::gpu::warp_reduce_sum(in[threadIdx.x]);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? static_cast<float>(partial[lane]) : 0.0f;  // 32 lanes per warp
    v = lw::gpu::warp_reduce_sum(v);
    if (lane == 0) *out = v;
  }
}
__global__ void block_sum_fixed(const float* in, float* out) {
  const float v = lw::gpu::block_reduce_sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = v;
}

TEST(PlantedBugs, ScratchSizedFor32PartialSums) {
  std::vector<float> in = iota_floats(1024);
  const float want = std::accumulate(in.begin(), in.end(), 0.0f);
  float out = 0;
  auto broken = sanitized("block_sum_broken", block_sum_broken, dim3(1), dim3(1024), in.data(), &out);
  if (W == 64) {
    expect_fault(broken, Fault::UninitSharedRead, "block_sum_broken");
    EXPECT_NE(broken.front().detail.find("partial"), std::string::npos) << text(broken);
  } else {
    expect_clean(broken);
    EXPECT_EQ(out, want);
  }
  out = 0;
  expect_clean(sanitized("block_sum_fixed", block_sum_fixed, dim3(1), dim3(1024), in.data(), &out));
  EXPECT_EQ(out, want);
}

// ---- 5. a ballot stored in 32 bits and counted with __popc ----

__global__ void count_positive_broken(const float* in, int* out) {
  const unsigned mask = __ballot(in[threadIdx.x] > 0);  // 32 bits hold a 32-lane ballot only
  if (threadIdx.x == 0) *out = __popc(mask);
}
__global__ void count_positive_fixed(const float* in, int* out) {
  const unsigned long long mask = __ballot(in[threadIdx.x] > 0);
  if (threadIdx.x == 0) *out = __popcll(mask);
}

TEST(PlantedBugs, BallotStoredIn32Bits) {
  std::vector<float> in(W);
  for (int i = 0; i < W; ++i) in[i] = (i % 3 == 0) ? 1.0f : -1.0f;
  int want = 0;
  for (float x : in) want += x > 0;
  int out = -1;
  auto broken = sanitized("count_positive_broken", count_positive_broken, dim3(1), dim3(W), in.data(), &out);
  if (W == 64) {
    expect_fault(broken, Fault::BallotTruncated, "count_positive_broken");
  } else {
    expect_clean(broken);
    EXPECT_EQ(out, want);
  }
  out = -1;
  expect_clean(sanitized("count_positive_fixed", count_positive_fixed, dim3(1), dim3(W), in.data(), &out));
  EXPECT_EQ(out, want);
}

// ---- 6. a barrier inside if (threadIdx.x < n) ----

__global__ void prefix_broken(const float* in, float* out, int n) {
  LW_SHARED(float, s, [256]);
  if (static_cast<int>(threadIdx.x) < n) {
    s[threadIdx.x] = in[threadIdx.x];
    __syncthreads();  // threads >= n never arrive
    out[threadIdx.x] = s[n - 1 - threadIdx.x];
  }
}
__global__ void prefix_fixed(const float* in, float* out, int n) {
  LW_SHARED(float, s, [256]);
  const bool active = static_cast<int>(threadIdx.x) < n;
  if (active) s[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  if (active) out[threadIdx.x] = s[n - 1 - threadIdx.x];
}

TEST(PlantedBugs, BarrierInsideABranch) {
  std::vector<float> in = iota_floats(256), out(256, NAN);
  const int n = 100;
  expect_fault(sanitized("prefix_broken", prefix_broken, dim3(1), dim3(256), in.data(), out.data(), n),
               Fault::DivergentBarrier, "prefix_broken");
  expect_clean(sanitized("prefix_fixed", prefix_fixed, dim3(1), dim3(256), in.data(), out.data(), n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(out[i], in[n - 1 - i]);
}

// ---- 7. a shared-memory read before any write ----

__global__ void shift_broken(const float* in, float* out) {
  LW_SHARED(float, s, [128]);
  s[threadIdx.x] = in[threadIdx.x];
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];  // the neighbour may not have written yet
  __syncthreads();
}
__global__ void shift_fixed(const float* in, float* out) {
  LW_SHARED(float, s, [128]);
  s[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

TEST(PlantedBugs, SharedReadBeforeWrite) {
  std::vector<float> in = iota_floats(128), out(128, NAN);
  expect_fault(sanitized("shift_broken", shift_broken, dim3(2), dim3(128), in.data(), out.data()),
               Fault::UninitSharedRead, "shift_broken");
  expect_clean(sanitized("shift_fixed", shift_fixed, dim3(2), dim3(128), in.data(), out.data()));
  for (int i = 0; i < 128; ++i) EXPECT_EQ(out[i], in[(i + 1) % 128]);
}

// ---- 8. a shared-memory race: a write and a read of one address with no barrier between ----

__global__ void smooth_broken(const float* in, float* out) {
  LW_SHARED(float, s, [128]);
  const unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = in[t];
  __syncthreads();
  s[t] = s[t] * 2;                // updates its own element...
  out[t] = s[(t + 1) % n];        // ...while the neighbour reads it: old or new value, by timing
}
__global__ void smooth_fixed(const float* in, float* out) {
  LW_SHARED(float, s, [128]);
  const unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = in[t];
  __syncthreads();
  s[t] = s[t] * 2;
  __syncthreads();
  out[t] = s[(t + 1) % n];
}

TEST(PlantedBugs, SharedMemoryRace) {
  std::vector<float> in = iota_floats(128), out(128, NAN);
  expect_fault(sanitized("smooth_broken", smooth_broken, dim3(1), dim3(128), in.data(), out.data()),
               Fault::SharedRace, "smooth_broken");
  expect_clean(sanitized("smooth_fixed", smooth_fixed, dim3(1), dim3(128), in.data(), out.data()));
  for (int i = 0; i < 128; ++i) EXPECT_EQ(out[i], 2 * in[(i + 1) % 128]);
}

// ---- 9. reading a lane on the other side of a divergent branch ----

__global__ void half_warp_broken(const float* in, float* out) {
  const int lane = lw::gpu::lane_id();
  float v = in[threadIdx.x];
  if (lane < 16) v += __shfl_xor(v, 16);  // lanes 16.. took the other path
  __syncthreads();
  out[threadIdx.x] = v;
}
__global__ void half_warp_fixed(const float* in, float* out) {
  const int lane = lw::gpu::lane_id();
  float v = in[threadIdx.x];
  const float other = __shfl_xor(v, 16);  // every lane takes part, then some use the value
  if (lane < 16) v += other;
  __syncthreads();
  out[threadIdx.x] = v;
}

TEST(PlantedBugs, ShuffleAcrossADivergentBranch) {
  std::vector<float> in = iota_floats(64), out(64, NAN);
  auto broken = sanitized("half_warp_broken", half_warp_broken, dim3(1), dim3(64), in.data(), out.data());
  expect_fault(broken, Fault::InactiveLaneRead, "half_warp_broken");
  EXPECT_NE(broken.front().detail.find("diverged"), std::string::npos) << text(broken);
  expect_clean(sanitized("half_warp_fixed", half_warp_fixed, dim3(1), dim3(64), in.data(), out.data()));
}

// ---- 9b. a collective in a helper called from both sides of a divergent branch ----
// CUDA (independent thread scheduling) merges the two calls into one warp-wide shuffle; a 64-lane
// wavefront runs each side under its own EXEC mask, so each call sums the lanes of its side only
// (reads of the other side's lanes return 0 on the hardware).

__device__ float warp_total(float v) {
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_xor(v, o);
  return v;
}
__device__ float warp_total_synced(float v) {
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_xor_sync(lw::gpu::full_warp_mask(), v, o);
  return v;
}
template <float (*Total)(float)>
__global__ void helper_in_both_branches_broken(const float* in, float* out) {
  const int t = threadIdx.x;
  const float v = in[t];
  if (lw::gpu::lane_id() < 16) {
    out[t] = Total(v);
  } else {
    const float scaled = 2.0f * Total(v);
    out[t] = scaled + in[0] - in[0];
  }
}
__global__ void helper_in_both_branches_fixed(const float* in, float* out) {
  const int t = threadIdx.x;
  const float total = warp_total(in[t]);  // every lane, before the branch
  if (lw::gpu::lane_id() < 16) {
    out[t] = total;
  } else {
    out[t] = 2.0f * total + in[0] - in[0];
  }
}

// What a wavefront computes for helper_in_both_branches_broken with unmasked shuffles: each side's
// butterfly reads 0 from the lanes of the other side.
std::vector<float> per_branch_totals(const std::vector<float>& in) {
  std::vector<float> v(in.begin(), in.begin() + W), next(W);
  auto side = [](int lane) { return lane < 16; };
  for (int o = W / 2; o > 0; o /= 2) {
    for (int l = 0; l < W; ++l) next[l] = v[l] + (side(l ^ o) == side(l) ? v[l ^ o] : 0.0f);
    v = next;
  }
  for (int l = 16; l < W; ++l) v[l] *= 2.0f;
  return v;
}

TEST(PlantedBugs, CollectiveInAHelperCalledFromBothSidesOfABranch) {
  std::vector<float> in = iota_floats(W), out(W, NAN);
  const float total = std::accumulate(in.begin(), in.end(), 0.0f);
  std::vector<float> convergent(W, total);
  for (int l = 16; l < W; ++l) convergent[l] = 2.0f * total;

  auto broken = sanitized("helper_in_both_branches_broken", helper_in_both_branches_broken<warp_total>, dim3(1),
                          dim3(W), in.data(), out.data());
  auto synced = sanitized("helper_in_both_branches_broken", helper_in_both_branches_broken<warp_total_synced>,
                          dim3(1), dim3(W), in.data(), out.data());
  if (W == 64) {
    expect_fault(broken, Fault::InactiveLaneRead, "helper_in_both_branches_broken");
    EXPECT_NE(broken.front().detail.find("another call path"), std::string::npos) << text(broken);
    expect_fault(synced, Fault::MaskMismatch, "helper_in_both_branches_broken");
    EXPECT_NE(synced.front().detail.find("another call path"), std::string::npos) << text(synced);
    // Without the sanitizer the emulator computes what the wavefront does.
    std::fill(out.begin(), out.end(), NAN);
    const bool before = lw::simt::sanitize();
    lw::simt::set_sanitize(false);
    lw::simt::run("helper_in_both_branches_broken", helper_in_both_branches_broken<warp_total>, dim3(1), dim3(W), 0,
                  in.data(), out.data());
    lw::simt::set_sanitize(before);
    EXPECT_EQ(out, per_branch_totals(in));
    EXPECT_NE(out, convergent);
  } else {
    expect_clean(broken);
    EXPECT_EQ(out, convergent);  // CUDA: the two calls form one warp-wide collective
    expect_clean(synced);
  }
  std::fill(out.begin(), out.end(), NAN);
  expect_clean(sanitized("helper_in_both_branches_fixed", helper_in_both_branches_fixed, dim3(1), dim3(W), in.data(),
                         out.data()));
  EXPECT_EQ(out, convergent);
}

// ---- 10. a shuffle width that is not a power of two or exceeds the warp ----

__global__ void width_broken(const float* in, float* out, int width) {
  out[threadIdx.x] = __shfl_down(in[threadIdx.x], 1u, width);
}

TEST(PlantedBugs, ShuffleWidths) {
  std::vector<float> in = iota_floats(W), out(W, NAN);
  expect_fault(sanitized("width_broken", width_broken, dim3(1), dim3(W), in.data(), out.data(), 24),
               Fault::BadWidth, "width_broken");
  auto wide = sanitized("width_broken", width_broken, dim3(1), dim3(W), in.data(), out.data(), 64);
  if (W == 32) {
    expect_fault(wide, Fault::BadWidth, "width_broken");
  } else {
    expect_clean(wide);
  }
  expect_clean(sanitized("width_broken", width_broken, dim3(1), dim3(W), in.data(), out.data(), 16));
}

// ---- 11. a mask naming lanes that never arrive, and lanes that disagree on the mask ----

__global__ void mask_missing_lane(float* out) {
  float v = 1.0f;
  if (threadIdx.x < 8) v = __shfl_sync(0xffu | (1u << 9), v, 0);  // lane 9 is not in the branch
  out[threadIdx.x] = v;
}
__global__ void mask_disagree(float* out) {
  const unsigned mask = threadIdx.x == 3 ? 0xfu : 0xffu;
  float v = 1.0f;
  if (threadIdx.x < 8) v = __shfl_sync(mask, v, 0);
  out[threadIdx.x] = v;
}

TEST(PlantedBugs, MaskNamesAbsentLanesOrDisagrees) {
  std::vector<float> out(W, NAN);
  auto missing = sanitized("mask_missing_lane", mask_missing_lane, dim3(1), dim3(W), out.data());
  expect_fault(missing, Fault::MaskMismatch, "mask_missing_lane");
  EXPECT_NE(missing.front().detail.find("names lane 9"), std::string::npos) << text(missing);
  expect_fault(sanitized("mask_disagree", mask_disagree, dim3(1), dim3(W), out.data()), Fault::CollectiveMismatch,
               "mask_disagree");
}

// ---- 12. shared index out of bounds ----

__global__ void shared_oob(float* out) {
  LW_SHARED(float, s, [64]);
  s[threadIdx.x] = 1.0f;  // a 65-thread block overruns it
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(PlantedBugs, SharedIndexOutOfBounds) {
  std::vector<float> out(65, NAN);
  expect_fault(sanitized("shared_oob", shared_oob, dim3(1), dim3(65), out.data()), Fault::SharedOutOfBounds,
               "shared_oob");
  expect_clean(sanitized("shared_oob", shared_oob, dim3(1), dim3(64), out.data()));
}

// ---- 13. a 64-lane ballot counted with the 32-bit __popc after it left the ballot type ----

__global__ void count_wide_broken(const float* in, int* out) {
  const unsigned long long votes = __ballot(in[threadIdx.x] > 0.0f);  // 64 bits: right so far
  if (threadIdx.x == 0) *out = __popc(votes);  // the 32-bit count drops lanes 32..63
}
__global__ void count_wide_fixed(const float* in, int* out) {
  const unsigned long long votes = __ballot(in[threadIdx.x] > 0.0f);
  if (threadIdx.x == 0) *out = __popcll(votes);
}

TEST(PlantedBugs, BallotCountedIn32BitsAfterLeavingItsType) {
  std::vector<float> in(W);
  for (int i = 0; i < W; ++i) in[i] = (i % 5 == 1) ? 1.0f : -1.0f;
  int want = 0;
  for (float x : in) want += x > 0;
  int out = -1;
  auto broken = sanitized("count_wide_broken", count_wide_broken, dim3(1), dim3(W), in.data(), &out);
  if (W == 64) {
    expect_fault(broken, Fault::BallotTruncated, "count_wide_broken");
    EXPECT_NE(broken.front().to_string().find("__popcll"), std::string::npos) << text(broken);
  } else {
    expect_clean(broken);
    EXPECT_EQ(out, want);
  }
  out = -1;
  expect_clean(sanitized("count_wide_fixed", count_wide_fixed, dim3(1), dim3(W), in.data(), &out));
  EXPECT_EQ(out, want);
}

// ---- 14. an XOR butterfly written for 64 lanes, run on a 32-lane warp ----

__global__ void butterfly_broken(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = 32; o > 0; o /= 2) v += __shfl_xor(v, o);  // lane ^ 32 is outside a 32-lane warp
  out[threadIdx.x] = v;
}
__global__ void butterfly_fixed(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_xor(v, o);
  out[threadIdx.x] = v;
}

TEST(PlantedBugs, XorMaskNotBelowTheWidth) {
  std::vector<float> in = iota_floats(W), out(W, NAN);
  const float want = std::accumulate(in.begin(), in.end(), 0.0f);
  auto broken = sanitized("butterfly_broken", butterfly_broken, dim3(1), dim3(W), in.data(), out.data());
  if (W == 32) {
    expect_fault(broken, Fault::BadLaneMask, "butterfly_broken");
  } else {
    expect_clean(broken);
    for (float x : out) EXPECT_EQ(x, want);
  }
  out.assign(W, NAN);
  expect_clean(sanitized("butterfly_fixed", butterfly_fixed, dim3(1), dim3(W), in.data(), out.data()));
  for (float x : out) EXPECT_EQ(x, want);
}

// ---- intra-warp communication ordered by a warp collective is not a race ----

__global__ void warp_handoff(const float* in, float* out) {
  LW_SHARED(float, s, [128]);
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  __syncwarp();  // orders the lanes of this warp
  const unsigned partner = (t & ~static_cast<unsigned>(warpSize - 1)) + ((t + 1) % warpSize);
  out[t] = s[partner];
}

TEST(PlantedBugs, WarpSynchronisedHandoffIsClean) {
  std::vector<float> in = iota_floats(128), out(128, NAN);
  expect_clean(sanitized("warp_handoff", warp_handoff, dim3(1), dim3(128), in.data(), out.data()));
}

// ---- 15. CUB's guarded partial-warp reduction reads lanes that do not exist, and discards them ----

// cub::WarpReduce over valid items: every lane shuffles, and a lane adds its partner's value
// only when the partner holds data. Partners past the end were never launched (a block
// smaller than the warp) or have left: their values are undefined, and never used.
template <class T>
__global__ void guarded_partial_sum(const T* in, T* out, int valid) {
  const int lane = static_cast<int>(threadIdx.x % warpSize);
  if (static_cast<int>(threadIdx.x) >= valid) return;  // lanes past the data leave
  T v = in[threadIdx.x];
  for (int o = 1; o < warpSize; o *= 2) {
    const T other = __shfl_down(v, static_cast<unsigned>(o));
    if (lane + o < valid) v += other;
  }
  if (lane == 0) *out = v;
}
// A tree reduction without the guard, assuming the block fills the warp: on a 64-lane warp the
// 32-thread block's lanes add what lanes 32..63 returned, and lane 0's sum is made of it.
__global__ void unguarded_partial_sum(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down(v, static_cast<unsigned>(o));
  if (threadIdx.x == 0) *out = v;
}

TEST(PlantedBugs, GuardedPartialWarpReductionIsClean) {
  std::vector<float> in = iota_floats(W);
  std::vector<int> ints(W);
  for (int i = 0; i < W; ++i) ints[i] = 3 * i - 40;
  // (block, valid): a 32-thread block (never-launched lanes on a 64-lane warp), a 20-thread
  // block (never launched at both), a full warp with 20 items (exited lanes), 1 item.
  const std::pair<int, int> cases[] = {{32, 32}, {20, 20}, {W, 20}, {W, 1}};
  for (const auto& [block, valid] : cases) {
    float out = NAN;
    expect_clean(sanitized("guarded_partial_sum", guarded_partial_sum<float>, dim3(1), dim3(block), in.data(), &out,
                           valid));
    EXPECT_EQ(out, std::accumulate(in.begin(), in.begin() + valid, 0.0f)) << block << " threads, " << valid;
    int iout = -1;
    expect_clean(sanitized("guarded_partial_sum", guarded_partial_sum<int>, dim3(1), dim3(block), ints.data(), &iout,
                           valid));
    EXPECT_EQ(iout, std::accumulate(ints.begin(), ints.begin() + valid, 0)) << block << " threads, " << valid;
  }
}

TEST(PlantedBugs, UnguardedPartialWarpReductionUsesUndefinedValues) {
  std::vector<float> in = iota_floats(32);
  const float want = std::accumulate(in.begin(), in.end(), 0.0f);
  float out = NAN;
  auto broken = sanitized("unguarded_partial_sum", unguarded_partial_sum, dim3(1), dim3(32), in.data(), &out);
  if (W == 64) {
    expect_fault(broken, Fault::InactiveLaneRead, "unguarded_partial_sum");
    EXPECT_NE(broken.front().detail.find("never launched"), std::string::npos) << text(broken);
    EXPECT_NE(broken.front().detail.find("undefined"), std::string::npos) << text(broken);
  } else {
    expect_clean(broken);
    EXPECT_EQ(out, want);
  }
  out = NAN;
  expect_clean(sanitized("guarded_partial_sum", guarded_partial_sum<float>, dim3(1), dim3(32), in.data(), &out, 32));
  EXPECT_EQ(out, want);
}

// ---- 16. an undefined shuffle result stored to shared memory ----

__global__ void fold_halves_broken(const float* in, float* out) {
  LW_SHARED(float, s, [16]);
  const unsigned t = threadIdx.x;
  const float other = __shfl_down(in[t], static_cast<unsigned>(warpSize / 2));  // half the block only on 32 lanes
  if (t < 16) s[t] = in[t] + other;
  __syncthreads();
  if (t == 0) {
    float total = 0;
    for (int i = 0; i < 16; ++i) total += s[i];
    *out = total;
  }
}
__global__ void fold_halves_fixed(const float* in, float* out) {
  LW_SHARED(float, s, [16]);
  const unsigned t = threadIdx.x;
  const float other = __shfl_down(in[t], 16u);  // half the 32-thread block
  if (t < 16) s[t] = in[t] + other;
  __syncthreads();
  if (t == 0) {
    float total = 0;
    for (int i = 0; i < 16; ++i) total += s[i];
    *out = total;
  }
}

TEST(PlantedBugs, UndefinedShuffleResultStoredToSharedMemory) {
  std::vector<float> in = iota_floats(32);
  const float want = std::accumulate(in.begin(), in.end(), 0.0f);
  float out = NAN;
  auto broken = sanitized("fold_halves_broken", fold_halves_broken, dim3(1), dim3(32), in.data(), &out);
  if (W == 64) {
    expect_fault(broken, Fault::InactiveLaneRead, "fold_halves_broken");
    EXPECT_NE(broken.front().detail.find("stores to s"), std::string::npos) << text(broken);
    EXPECT_NE(broken.front().detail.find("never launched"), std::string::npos) << text(broken);
  } else {
    expect_clean(broken);
    EXPECT_EQ(out, want);
  }
  out = NAN;
  expect_clean(sanitized("fold_halves_fixed", fold_halves_fixed, dim3(1), dim3(32), in.data(), &out));
  EXPECT_EQ(out, want);
}

// ---- 17. shared atomics on a counter that was never zeroed ----

__global__ void count_shared_broken(const float* in, int* out) {
  LW_SHARED(int, counter, [1]);
  if (in[threadIdx.x] > 0.0f) atomicAdd(&counter[0], 1);  // counts up from the poison
  __syncthreads();
  if (threadIdx.x == 0) *out = counter[0];
}
__global__ void count_shared_fixed(const float* in, int* out) {
  LW_SHARED(int, counter, [1]);
  if (threadIdx.x == 0) counter[0] = 0;
  __syncthreads();
  if (in[threadIdx.x] > 0.0f) atomicAdd(&counter[0], 1);
  __syncthreads();
  if (threadIdx.x == 0) *out = counter[0];
}

// Dynamic shared memory: the largest value of each of 4 bins (atomicMax), and a flag per bin
// set once (atomicCAS).
__global__ void bin_max_broken(const unsigned* in, unsigned* out) {
  LW_DYNAMIC_SHARED(unsigned, bins);
  const unsigned t = threadIdx.x;
  atomicMax(&bins[t % 4], in[t]);  // the bins hold the poison (0xffffffff): every max is that
  atomicCAS(&bins[4 + t % 4], 0u, 1u);
  __syncthreads();
  if (t < 8) out[t] = bins[t];
}
__global__ void bin_max_fixed(const unsigned* in, unsigned* out) {
  LW_DYNAMIC_SHARED(unsigned, bins);
  const unsigned t = threadIdx.x;
  if (t < 8) bins[t] = 0;
  __syncthreads();
  atomicMax(&bins[t % 4], in[t]);
  atomicCAS(&bins[4 + t % 4], 0u, 1u);
  __syncthreads();
  if (t < 8) out[t] = bins[t];
}

std::vector<lw::simt::Report> sanitized_dynamic(const char* name, void (*kernel)(const unsigned*, unsigned*),
                                                size_t bytes, const unsigned* in, unsigned* out) {
  const bool before = lw::simt::sanitize();
  lw::simt::set_sanitize(true);
  std::vector<lw::simt::Report> reports;
  try {
    lw::simt::run(name, kernel, dim3(2), dim3(W), bytes, in, out);
  } catch (const KernelError& e) {
    reports = e.reports();
  }
  lw::simt::set_sanitize(before);
  return reports;
}

TEST(PlantedBugs, SharedAtomicsOnUninitialisedMemory) {
  std::vector<float> in(W);
  for (int i = 0; i < W; ++i) in[i] = (i % 3 == 0) ? 1.0f : -1.0f;
  int want = 0;
  for (float x : in) want += x > 0;
  int out = -1;
  auto broken = sanitized("count_shared_broken", count_shared_broken, dim3(2), dim3(W), in.data(), &out);
  expect_fault(broken, Fault::UninitSharedRead, "count_shared_broken");
  EXPECT_NE(broken.front().detail.find("atomicAdd on counter (byte 0 of 4)"), std::string::npos) << text(broken);
  out = -1;
  expect_clean(sanitized("count_shared_fixed", count_shared_fixed, dim3(2), dim3(W), in.data(), &out));
  EXPECT_EQ(out, want);

  std::vector<unsigned> vals(W), bins(8, 7);
  for (int i = 0; i < W; ++i) vals[i] = static_cast<unsigned>((i * 37) % 101);
  auto dyn = sanitized_dynamic("bin_max_broken", bin_max_broken, 8 * sizeof(unsigned), vals.data(), bins.data());
  expect_fault(dyn, Fault::UninitSharedRead, "bin_max_broken");
  EXPECT_NE(dyn.front().detail.find("atomicMax on dynamic shared memory (byte 0 of 32)"), std::string::npos)
      << text(dyn);
  expect_clean(sanitized_dynamic("bin_max_fixed", bin_max_fixed, 8 * sizeof(unsigned), vals.data(), bins.data()));
  for (unsigned b = 0; b < 4; ++b) {
    unsigned want_max = 0;
    for (int i = static_cast<int>(b); i < W; i += 4) want_max = std::max(want_max, vals[i]);
    EXPECT_EQ(bins[b], want_max) << "bin " << b;
    EXPECT_EQ(bins[4 + b], 1u) << "flag " << b;
  }
}

// Atomics of different threads on one address are not a race; a plain read of it beside them is.
__global__ void atomic_then_plain_read(int* out, bool barrier) {
  LW_SHARED(int, counter, [1]);
  const unsigned t = threadIdx.x, last = blockDim.x - 1;
  if (t == 0) counter[0] = 0;
  __syncthreads();
  if (t != last) atomicAdd(&counter[0], 2);
  if (barrier) __syncthreads();
  if (t == last) *out = counter[0];  // without the barrier: while the others add
}

TEST(PlantedBugs, SharedAtomicsAreOrderedAmongThemselvesOnly) {
  int out = -1;
  expect_clean(sanitized("atomic_then_plain_read", atomic_then_plain_read, dim3(1), dim3(W), &out, true));
  EXPECT_EQ(out, 2 * (W - 1));
  expect_fault(sanitized("atomic_then_plain_read", atomic_then_plain_read, dim3(1), dim3(W), &out, false),
               Fault::SharedRace, "atomic_then_plain_read");
}

// A raw pointer that served an atomic and was kept: what it wrote is not reported as unwritten.
__global__ void atomic_pointer_kept(int* out) {
  LW_SHARED(int, s, [2]);
  if (threadIdx.x == 0) {
    int* p = &s[0];
    p[0] = 0;  // through the pointer, before the atomic
    atomicAdd(p, 3);
    p[1] = 4;  // and after it
  }
  __syncthreads();
  if (threadIdx.x == 1) *out = s[0] + s[1];
}

TEST(PlantedBugs, SharedPointerKeptAfterAnAtomicIsNotReported) {
  int out = -1;
  expect_clean(sanitized("atomic_pointer_kept", atomic_pointer_kept, dim3(1), dim3(W), &out));
  EXPECT_EQ(out, 7);
}

// ---- 18. a matrix-fragment op inside divergent code, and a kernel that assumes NVIDIA's layout ----

namespace mma = lw::gpu::mma;

// Each block multiplies one 16x16 tile of ones by itself (every element of the result is 16)
// and writes the first `rows` rows.
__global__ void tile_rows_broken(float* out, int rows) {
  const int lane = lw::gpu::lane_id();
  if (lane / 2 >= rows) return;  // the lanes of the other rows skip the multiplication
  mma::FragA<lw::half> a;
  mma::FragB<lw::half> b;
  mma::FragC c;
  for (int i = 0; i < mma::kA; ++i) a.x[i] = lw::half(1.0f);
  for (int i = 0; i < mma::kB; ++i) b.x[i] = lw::half(1.0f);
  mma::fill(c, 0.0f);
  mma::mma(c, a, b, c);
  for (int i = 0; i < mma::kC; ++i) {
    if (mma::c_row(lane, i) < rows) out[mma::c_row(lane, i) * 16 + mma::c_col(lane, i)] = c.x[i];
  }
}
__global__ void tile_rows_fixed(float* out, int rows) {
  const int lane = lw::gpu::lane_id();
  mma::FragA<lw::half> a;
  mma::FragB<lw::half> b;
  mma::FragC c;
  for (int i = 0; i < mma::kA; ++i) a.x[i] = lw::half(1.0f);
  for (int i = 0; i < mma::kB; ++i) b.x[i] = lw::half(1.0f);
  mma::fill(c, 0.0f);
  mma::mma(c, a, b, c);  // every lane multiplies; the predicate guards the stores only
  for (int i = 0; i < mma::kC; ++i) {
    if (mma::c_row(lane, i) < rows) out[mma::c_row(lane, i) * 16 + mma::c_col(lane, i)] = c.x[i];
  }
}

TEST(PlantedBugs, MatrixOpReachedByPartOfTheWarp) {
  std::vector<float> out(256, -1.0f);
  expect_fault(sanitized("tile_rows_broken", tile_rows_broken, dim3(1), dim3(W), out.data(), 4), Fault::PartialWarpMatrix,
               "tile_rows_broken");
  expect_clean(sanitized("tile_rows_fixed", tile_rows_fixed, dim3(1), dim3(W), out.data(), 4));
  for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], i < 4 * 16 ? 16.0f : -1.0f) << "element " << i;
}

// d = a.b with a = I (identity) and b(k, n) = 16k + n, so d(r, n) = 16r + n. The broken kernel
// places the elements where NVIDIA's mma.sync puts them (groups of four lanes per row);
// the fixed one asks the layer.
__global__ void identity_product_broken(float* out) {
  const int lane = lw::gpu::lane_id();
  mma::FragA<lw::half> a;
  mma::FragB<lw::half> b;
  mma::FragC c;
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < mma::kA; ++i) {
    const int r = g + 8 * ((i >> 1) & 1), k = 2 * t + (i & 1) + 8 * (i >> 2);
    a.x[i] = lw::half(r == k ? 1.0f : 0.0f);
  }
  for (int i = 0; i < mma::kB; ++i) {
    const int k = 2 * t + (i & 1) + 8 * ((i >> 1) & 1), n = g + 8 * (i >> 2);
    b.x[i] = lw::half(static_cast<float>(16 * k + n));
  }
  mma::fill(c, 0.0f);
  mma::mma(c, a, b, c);
  for (int i = 0; i < mma::kC; ++i) {
    const int r = g + 8 * ((i >> 1) & 1), n = 2 * t + (i & 1) + 8 * (i >> 2);
    if (r < 16 && n < 16) out[r * 16 + n] = c.x[i];
  }
}
__global__ void identity_product_fixed(float* out) {
  const int lane = lw::gpu::lane_id();
  mma::FragA<lw::half> a;
  mma::FragB<lw::half> b;
  mma::FragC c;
  for (int i = 0; i < mma::kA; ++i) a.x[i] = lw::half(mma::a_row(lane, i) == mma::a_col(lane, i) ? 1.0f : 0.0f);
  for (int i = 0; i < mma::kB; ++i) b.x[i] = lw::half(static_cast<float>(16 * mma::b_row(lane, i) + mma::b_col(lane, i)));
  mma::fill(c, 0.0f);
  mma::mma(c, a, b, c);
  for (int i = 0; i < mma::kC; ++i) out[mma::c_row(lane, i) * 16 + mma::c_col(lane, i)] = c.x[i];
}

TEST(PlantedBugs, KernelAssumingNvidiaFragmentLayout) {
  auto wrong = [](const std::vector<float>& out) {
    int n = 0;
    for (int i = 0; i < 256; ++i) n += out[i] != static_cast<float>(i);
    return n;
  };
  std::vector<float> out(256, -1.0f);
  expect_clean(sanitized("identity_product_fixed", identity_product_fixed, dim3(1), dim3(W), out.data()));
  EXPECT_EQ(wrong(out), 0);
  std::fill(out.begin(), out.end(), -1.0f);
  expect_clean(sanitized("identity_product_broken", identity_product_broken, dim3(1), dim3(W), out.data()));
  if (mma::kLayout == mma::Layout::nvidia_m16n8k16) {
    EXPECT_EQ(wrong(out), 0);  // right where the assumption holds
  } else {
    EXPECT_GT(wrong(out), 0) << "the MFMA/WMMA layout places the elements elsewhere";
  }
}

}  // namespace
