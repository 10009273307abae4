// The vendor libraries (GPU targets): linked, callable, and giving right answers.
#include <algorithm>

#include "test_util.h"
#include "vendor_shims.h"

namespace lw::test {
namespace {

TEST(Vendor, BlasLtHandle) { EXPECT_TRUE(blaslt_handle_roundtrip()); }

TEST(Vendor, RandomUniformsAreInTheUnitInterval) {
  const size_t n = 4096;
  Tensor out = ctx().empty({static_cast<int64_t>(n)}, DType::f32);
  poison(out);
  ASSERT_TRUE(curand_uniform(out.data<float>(), n, seed(), ctx().stream().get()));
  const std::vector<double> v = to_doubles(ctx().to_host(out));
  double mean = 0;
  for (double x : v) {
    ASSERT_GT(x, 0.0);
    ASSERT_LE(x, 1.0);
    mean += x / n;
  }
  EXPECT_NEAR(mean, 0.5, 0.05);
}

TEST(Vendor, CubWarpReduction) {
  const int ws = ctx().warp_size();
  Tensor in_h = random_host({ws}, DType::f32);
  Tensor in = ctx().to_device(in_h), out = ctx().empty({1}, DType::f32);
  poison(out);
  cub_warp_sum(in.data<float>(), out.data<float>(), ws, ctx().stream().get());
  double ref = 0;
  for (double x : to_doubles(in_h)) ref += x;
  EXPECT_NEAR(to_doubles(ctx().to_host(out))[0], ref, 1e-5);
}

TEST(Vendor, CollectivesLibrary) {
  const int v = nccl_version();
  if (v == 0) GTEST_SKIP() << "built without NCCL";
  EXPECT_GT(v, 0);
  std::printf("NCCL/RCCL version code %d\n", v);
}

}  // namespace
}  // namespace lw::test
