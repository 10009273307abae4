// The host SIMT emulator itself: CUDA semantics of its built-ins, and the basic sanitizer
// reports. Host target only. Kernels here are CUDA C++ compiled by the host compiler.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "gpu/launch.h"
#include "gpu/warp.h"

namespace {

using lw::simt::Fault;
using lw::simt::KernelError;
constexpr int W = lw::simt::kWarpSize;

struct SanitizeScope {
  explicit SanitizeScope(bool on) : before(lw::simt::sanitize()) { lw::simt::set_sanitize(on); }
  ~SanitizeScope() { lw::simt::set_sanitize(before); }
  bool before;
};

// ---- semantics ----

__global__ void shuffle_kernel(int* out, int mode, int arg, int width) {
  const int lane = static_cast<int>(threadIdx.x);
  const int v = 1000 + lane;
  int r = 0;
  switch (mode) {
    case 0: r = __shfl(v, arg, width); break;
    case 1: r = __shfl_up(v, static_cast<unsigned>(arg), width); break;
    case 2: r = __shfl_down(v, static_cast<unsigned>(arg), width); break;
    default: r = __shfl_xor(v, arg, width); break;
  }
  out[lane] = r;
}

int expected_shuffle(int lane, int mode, int arg, int width) {
  const int base = lane / width * width, pos = lane % width;
  switch (mode) {
    case 0: return 1000 + base + arg % width;
    case 1: return 1000 + (pos >= arg ? lane - arg : lane);
    case 2: return 1000 + (pos + arg < width ? lane + arg : lane);
    default: {
      const int src = lane ^ arg;
      return 1000 + (src >= base + width ? lane : src);
    }
  }
}

TEST(Simt, ShufflesFollowCudaSemanticsAtEveryWidth) {
  SanitizeScope s(true);
  std::vector<int> out(W);
  for (int width = 1; width <= W; width *= 2) {
    for (int mode = 0; mode < 4; ++mode) {
      for (int arg : {0, 1, 3, width / 2, width - 1}) {
        if (arg < 0) continue;
        // An XOR mask not below the width is defined (each lane reads itself) but reported by
        // the sanitizer (BadLaneMask, tests/test_sanitizer.cpp): checked here with it off.
        SanitizeScope xor_past_width(!(mode == 3 && arg >= width));
        std::fill(out.begin(), out.end(), -1);
        lw::simt::run("shuffle", shuffle_kernel, dim3(1), dim3(W), 0, out.data(), mode, arg, width);
        for (int lane = 0; lane < W; ++lane) {
          ASSERT_EQ(out[lane], expected_shuffle(lane, mode, arg, width))
              << "mode " << mode << " arg " << arg << " width " << width << " lane " << lane;
        }
      }
    }
  }
}

__global__ void vote_kernel(unsigned long long* ballot, int* any, int* all) {
  const int lane = static_cast<int>(threadIdx.x % warpSize);
  const unsigned long long b = __ballot(lane % 3 == 0);
  const int a = __any(lane == W - 1);
  const int l = __all(lane < W);
  const int none = __all(lane < 5);
  if (threadIdx.x == 0) {
    *ballot = b;
    *any = a;
    *all = l * 2 + none;
  }
}

TEST(Simt, BallotIsAFullWidthMaskAndVotesAgree) {
  unsigned long long ballot = 0;
  int any = -1, all = -1;
  lw::simt::run("vote", vote_kernel, dim3(1), dim3(W), 0, &ballot, &any, &all);
  unsigned long long expect = 0;
  for (int l = 0; l < W; l += 3) expect |= 1ull << l;
  EXPECT_EQ(ballot, expect);
  EXPECT_EQ(any, 1);
  EXPECT_EQ(all, 2);
}

__global__ void reverse_kernel(const float* in, float* out) {
  __shared__ float buf[1024];
  const unsigned n = blockDim.x, t = threadIdx.x;
  buf[t] = in[blockIdx.x * n + t];
  __syncthreads();
  out[blockIdx.x * n + t] = buf[n - 1 - t];
}

TEST(Simt, BarriersOrderSharedMemoryAcrossWarps) {
  SanitizeScope s(true);
  for (unsigned n : {1u, 33u, 100u, 1024u}) {
    const unsigned blocks = 9;
    std::vector<float> in(n * blocks), out(n * blocks, NAN);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
    lw::simt::run("reverse", reverse_kernel, dim3(blocks), dim3(n), 0, in.data(), out.data());
    for (unsigned b = 0; b < blocks; ++b)
      for (unsigned t = 0; t < n; ++t) ASSERT_EQ(out[b * n + t], in[b * n + n - 1 - t]) << "n " << n;
  }
}

__global__ void dyn_shared_kernel(unsigned* first_read, unsigned* after_write) {
  LW_DYNAMIC_SHARED(unsigned, smem);
  const unsigned t = threadIdx.x;
  if (t == 0) *first_read = smem[5];
  __syncthreads();
  smem[t] = t * 7;
  __syncthreads();
  if (t == 0) *after_write = smem[blockDim.x - 1];
}

TEST(Simt, DynamicSharedMemoryIsPoisonedAtBlockStart) {
  SanitizeScope s(false);  // the first read is the uninitialised read the sanitizer reports
  unsigned first = 0, after = 0;
  lw::simt::run("dyn_shared", dyn_shared_kernel, dim3(3), dim3(40), 40 * sizeof(unsigned), &first, &after);
  EXPECT_EQ(first, 0xffffffffu);
  EXPECT_EQ(after, 39u * 7);
}

__global__ void atomic_kernel(int* counter, float* fsum, unsigned long long* mx) {
  atomicAdd(counter, 1);
  atomicAdd(fsum, 1.0f);
  atomicMax(mx, static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x);
}

TEST(Simt, AtomicsAreAtomicAcrossBlocksOnManyOsThreads) {
  int counter = 0;
  float fsum = 0;
  unsigned long long mx = 0;
  lw::simt::run("atomics", atomic_kernel, dim3(500), dim3(64), 0, &counter, &fsum, &mx);
  EXPECT_EQ(counter, 500 * 64);
  EXPECT_EQ(fsum, 500.0f * 64);
  EXPECT_EQ(mx, 500ull * 64 - 1);
}

__global__ void index_kernel(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[block * blockDim.x * blockDim.y * blockDim.z + t] = block * 100000 + t;
}

TEST(Simt, ThreeDimensionalGridsAndBlocks) {
  const dim3 grid(3, 2, 2), block(5, 4, 3);
  std::vector<unsigned> out(12 * 60, 0);
  lw::simt::run("index", index_kernel, grid, block, 0, out.data());
  for (unsigned b = 0; b < 12; ++b)
    for (unsigned t = 0; t < 60; ++t) ASSERT_EQ(out[b * 60 + t], b * 100000 + t);
}

TEST(Simt, HalfConversionsMatchTheCompiler) {
  // Every f16 bit pattern survives half -> float -> half.
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const __half h = __ushort_as_half(static_cast<unsigned short>(bits));
    const float f = __half2float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(__half_as_ushort(__float2half(f)), bits);
    ASSERT_EQ(f, static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(bits))));
  }
  // Random floats of every magnitude round to nearest even, as the compiler's _Float16 does.
  std::mt19937 gen(12345);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(gen()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(__half_as_ushort(__float2half(f)), std::bit_cast<uint16_t>(static_cast<_Float16>(f))) << f;
  }
}

TEST(Simt, Bfloat16RoundsToNearestEven) {
  std::mt19937 gen(777);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(gen()));
    if (!std::isfinite(f)) continue;
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const float lo = std::bit_cast<float>(u & 0xffff0000u);
    const float hi_f = std::bit_cast<float>((u & 0xffff0000u) + 0x10000u);
    // Past the largest finite bf16 the next step up is 2^128 (which rounds to infinity).
    const double hi = std::isinf(hi_f) ? std::copysign(std::ldexp(1.0, 128), f) : double(hi_f);
    const double dlo = std::abs(double(f) - lo), dhi = std::abs(hi - f);
    const uint16_t lo_bits = static_cast<uint16_t>(u >> 16);
    const uint16_t expect = dlo < dhi ? lo_bits : dhi < dlo ? static_cast<uint16_t>(lo_bits + 1)
                                                          : static_cast<uint16_t>(lo_bits + (lo_bits & 1));
    ASSERT_EQ(__bfloat16_as_ushort(__float2bfloat16(f)), expect) << f;
  }
}

// ---- sanitizer basics (the planted-bug suite lives in test_sanitizer.cpp) ----

__global__ void full_warp_sum_kernel(const float* in, float* out) {
  float v = in[threadIdx.x];
  v = lw::gpu::warp_reduce_sum(v);  // physical-warp width
  if (threadIdx.x == 0) *out = v;
}

TEST(Simt, FullWarpReductionOverA32ThreadBlock) {
  SanitizeScope s(true);
  std::vector<float> in(32, 1.0f);
  float out = 0;
  if (W == 32) {
    lw::simt::run("full_warp_sum", full_warp_sum_kernel, dim3(1), dim3(32), 0, in.data(), &out);
    EXPECT_EQ(out, 32.0f);
    return;
  }
  try {
    lw::simt::run("full_warp_sum", full_warp_sum_kernel, dim3(2), dim3(32), 0, in.data(), &out);
    FAIL() << "a 32-thread block reduced over a 64-lane warp was not reported";
  } catch (const KernelError& e) {
    ASSERT_TRUE(e.has(Fault::InactiveLaneRead)) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find("full_warp_sum"), std::string::npos) << msg;
    EXPECT_NE(msg.find("never launched"), std::string::npos) << msg;
    EXPECT_NE(msg.find("block ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("thread ("), std::string::npos) << msg;
  }
}

TEST(Simt, WithoutTheSanitizerInactiveLanesReadZeroAsOnAmdHardware) {
  SanitizeScope s(false);
  std::vector<float> in(32, 1.0f);
  float out = 0;
  lw::simt::run("full_warp_sum", full_warp_sum_kernel, dim3(1), dim3(32), 0, in.data(), &out);
  EXPECT_EQ(out, 32.0f);  // the wrong reduction still gives the right sum: why outputs cannot find it
}

__global__ void barrier_in_branch_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 1;
  }
}

TEST(Simt, BarrierInDivergentCodeIsReportedNotHung) {
  SanitizeScope s(true);
  std::vector<int> out(64);
  try {
    lw::simt::run("barrier_in_branch", barrier_in_branch_kernel, dim3(1), dim3(64), 0, out.data());
    FAIL() << "divergent barrier not reported";
  } catch (const KernelError& e) {
    EXPECT_TRUE(e.has(Fault::DivergentBarrier)) << e.what();
  }
}

__global__ void bad_width_kernel(int* out, int width) { out[threadIdx.x] = __shfl_xor(1, 1, width); }

TEST(Simt, BadShuffleWidths) {
  SanitizeScope s(true);
  std::vector<int> out(W);
  for (int width : {3, 0, 2 * W}) {
    try {
      lw::simt::run("bad_width", bad_width_kernel, dim3(1), dim3(W), 0, out.data(), width);
      FAIL() << "width " << width << " not reported";
    } catch (const KernelError& e) {
      EXPECT_TRUE(e.has(Fault::BadWidth)) << e.what();
    }
  }
}

__global__ void masked_sum_kernel(float* out) {
  float v = 1.0f;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) *out = v;
}

TEST(Simt, ThirtyTwoBitMaskOnA64LaneWarp) {
  SanitizeScope s(true);
  float out = 0;
  if (W == 32) {
    lw::simt::run("masked_sum", masked_sum_kernel, dim3(1), dim3(64), 0, &out);
    EXPECT_EQ(out, 32.0f);
    return;
  }
  try {
    lw::simt::run("masked_sum", masked_sum_kernel, dim3(1), dim3(64), 0, &out);
    FAIL() << "0xffffffff mask on a 64-lane warp not reported";
  } catch (const KernelError& e) {
    EXPECT_TRUE(e.has(Fault::MaskMismatch)) << e.what();
    EXPECT_NE(std::string(e.what()).find("32-bit mask"), std::string::npos) << e.what();
  }
}

// Lanes 0..15 read lanes 16..31, which have exited: the value is undefined (not the read an
// error, as in CUDA); passing it on to another shuffle uses it, and that is reported.
__global__ void read_exited_lane_kernel(int* out, bool use) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane >= 16) return;
  const int other = __shfl_down(lane, 16u, 32);
  const int kept = use ? other : lane;
  out[lane] = __shfl(kept, (lane + 1) % 16, 16);
}

TEST(Simt, ReadingAnExitedLane) {
  SanitizeScope s(true);
  std::vector<int> out(32, -1);
  try {
    lw::simt::run("read_exited", read_exited_lane_kernel, dim3(1), dim3(32), 0, out.data(), true);
    FAIL() << "use of a value read from an exited lane not reported";
  } catch (const KernelError& e) {
    EXPECT_TRUE(e.has(Fault::InactiveLaneRead)) << e.what();
    EXPECT_NE(std::string(e.what()).find("exited"), std::string::npos) << e.what();
  }
  // Read and discarded: clean.
  lw::simt::run("read_exited", read_exited_lane_kernel, dim3(1), dim3(32), 0, out.data(), false);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], (i + 1) % 16);
}

__global__ void throwing_kernel(int n) {
  if (threadIdx.x == 3) throw std::runtime_error("boom " + std::to_string(n));
  __syncthreads();
}

TEST(Simt, ExceptionsAndBadLaunchesBecomeReports) {
  try {
    lw::simt::run("throwing", throwing_kernel, dim3(2), dim3(8), 0, 7);
    FAIL();
  } catch (const KernelError& e) {
    EXPECT_TRUE(e.has(Fault::Exception)) << e.what();
    EXPECT_NE(std::string(e.what()).find("boom 7"), std::string::npos) << e.what();
  }
  try {
    lw::simt::run("too_big", throwing_kernel, dim3(1), dim3(2048), 0, 0);
    FAIL();
  } catch (const KernelError& e) {
    EXPECT_TRUE(e.has(Fault::InvalidLaunch)) << e.what();
  }
}

__global__ void trap_after_barrier_kernel() {
  if (threadIdx.x == 1) __trap();  // thread 0 is already waiting at the barrier
  __syncthreads();
}

TEST(Simt, AFaultWhileOthersWaitIsReportedOnce) {
  SanitizeScope s(true);
  try {
    lw::simt::run("trap_after_barrier", trap_after_barrier_kernel, dim3(1), dim3(64), 0);
    FAIL();
  } catch (const KernelError& e) {
    ASSERT_EQ(e.reports().size(), 1u) << e.what();
    EXPECT_EQ(e.reports().front().fault, Fault::Trap) << e.what();
  }
}

TEST(Simt, LaunchHelperTurnsFaultsIntoLwErrors) {
  SanitizeScope s(true);
  try {
    lw::gpu::launch("barrier_in_branch", barrier_in_branch_kernel, {dim3(1), dim3(64), 0, nullptr},
                    static_cast<int*>(nullptr));
    FAIL();
  } catch (const lw::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SIMT emulator"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("divergent barrier"), std::string::npos) << e.what();
  }
}

TEST(Simt, ThreadIdxOutsideAKernelIsAnError) { EXPECT_THROW((void)threadIdx.x, std::logic_error); }

}  // namespace
