// Reductions against float64 references.
#include "ops/reduce.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

TEST(RowSum, MatchesFloat64Reference) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},  {3, 1},   {5, 31},   {7, 33},   {4, 63},
                                                           {2, 65}, {3, 1000}, {2, 4097}, {1, 100000}, {33, 257}};
  for (DType dt : kFloatTypes) {
    for (auto [rows, cols] : shapes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", " << rows << "x" << cols);
      Tensor xh = random_host({rows, cols}, dt);
      Tensor x = ctx().to_device(xh), out = ctx().empty({rows}, DType::f32);
      poison(out);
      ops::row_sum(ctx(), x, out);
      Tensor first = ctx().to_host(out);
      const std::vector<double> v = to_doubles(xh), got = to_doubles(first);
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ref += v[r * cols + c];
          mag += std::abs(v[r * cols + c]);
        }
        // fp32 accumulation: error grows at most with the number of additions.
        ASSERT_LE(std::abs(got[r] - ref), 2 * std::ldexp(1.0, -24) * std::log2(double(cols) + 2) * 4 * mag + 1e-6)
            << "row " << r;
      }
      poison(out);
      ops::row_sum(ctx(), x, out);
      EXPECT_TRUE(bitwise_equal(first, ctx().to_host(out))) << "two runs differ";
    }
  }
}

TEST(RowSum, StridedRows) {
  Tensor xh = random_host({6, 100}, DType::f32);
  Tensor x = ctx().to_device(xh).slice(1, 10, 73);  // rows of 63 with a row stride of 100
  Tensor out = ctx().empty({6}, DType::f32);
  poison(out);
  ops::row_sum(ctx(), x, out);
  const std::vector<double> got = to_doubles(ctx().to_host(out));
  for (int r = 0; r < 6; ++r) {
    double ref = 0;
    for (int c = 10; c < 73; ++c) ref += xh.data<float>()[r * 100 + c];
    EXPECT_NEAR(got[r], ref, 1e-4) << "row " << r;
  }
}

TEST(RowSum, RejectsBadArguments) {
  Tensor x = ctx().empty({3, 4}, DType::f32);
  Tensor wrong_len = ctx().empty({4}, DType::f32), wrong_type = ctx().empty({3}, DType::f16);
  EXPECT_THROW(ops::row_sum(ctx(), x, wrong_len), Error);
  EXPECT_THROW(ops::row_sum(ctx(), x, wrong_type), Error);
  Tensor cube = ctx().empty({2, 3, 4}, DType::f32), out = ctx().empty({2}, DType::f32);
  EXPECT_THROW(ops::row_sum(ctx(), cube, out), Error);
  Tensor transposed = x.transpose(0, 1);
  Tensor out4 = ctx().empty({4}, DType::f32);
  EXPECT_THROW(ops::row_sum(ctx(), transposed, out4), Error);
}

}  // namespace
}  // namespace lw::test
