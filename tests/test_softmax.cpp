// Softmax and log-softmax against float64 references, including fully masked rows.
#include <cmath>

#include "ops/softmax.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const int64_t kCols[] = {1, 7, 33, 100, 1000, 4096, 5003, 40000};

void run_case(DType in, DType out_dt, bool log, float temperature, int64_t rows, int64_t cols) {
  SCOPED_TRACE(::testing::Message() << (log ? "log_softmax " : "softmax ") << dtype_name(in) << " -> "
                                    << dtype_name(out_dt) << ", T " << temperature << ", " << rows << "x" << cols);
  Tensor xh = random_host({rows, cols}, in, -8, 8);
  // Mask some entries of row 0 and the whole of the last row (when there are two or more).
  for (int64_t c = 0; c < cols; c += 3) {
    if (in == DType::f32) xh.data<float>()[c] = -INFINITY;
    if (in == DType::f16) xh.data<half>()[c] = gpu::from_float<half>(-INFINITY);
    if (in == DType::bf16) xh.data<bfloat16>()[c] = gpu::from_float<bfloat16>(-INFINITY);
  }
  if (rows > 1) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = (rows - 1) * cols + c;
      if (in == DType::f32) xh.data<float>()[i] = -INFINITY;
      if (in == DType::f16) xh.data<half>()[i] = gpu::from_float<half>(-INFINITY);
      if (in == DType::bf16) xh.data<bfloat16>()[i] = gpu::from_float<bfloat16>(-INFINITY);
    }
  }
  Tensor x = ctx().to_device(xh), out = ctx().empty({rows, cols}, out_dt);
  auto run = [&] {
    poison(out);
    if (log) ops::log_softmax(ctx(), x, out, temperature);
    else ops::softmax(ctx(), x, out, temperature);
  };
  run();
  Tensor first = ctx().to_host(out);
  const std::vector<double> v = to_doubles(xh);
  std::vector<double> want;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, v[r * cols + c] / temperature);
    double sum = 0;
    if (mx != -INFINITY)
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(v[r * cols + c] / temperature - mx);
    for (int64_t c = 0; c < cols; ++c) {
      const double z = v[r * cols + c] / temperature;
      if (mx == -INFINITY) want.push_back(log ? -INFINITY : 0.0);
      else want.push_back(log ? z - mx - std::log(sum) : std::exp(z - mx) / sum);
    }
  }
  // Softmax: one rounding plus float exp/sum error; log-softmax: absolute error of the shift.
  const double rel = epsilon(out_dt) + 1e-5, abs = log ? 2e-5 : 1e-7;
  EXPECT_TRUE(all_close(first, want, rel, abs));
  run();
  EXPECT_TRUE(bitwise_equal(first, ctx().to_host(out))) << "two runs differ";
}

TEST(Softmax, MatchesFloat64WithMaskedEntriesAndRows) {
  for (DType dt : kFloatTypes)
    for (int64_t c : kCols) {
      run_case(dt, dt, false, 1.0f, 3, c);
      run_case(dt, DType::f32, false, 0.7f, 2, c);
    }
}

TEST(Softmax, LogSoftmax) {
  for (DType dt : kFloatTypes)
    for (int64_t c : kCols) {
      run_case(dt, DType::f32, true, 1.0f, 3, c);
      run_case(dt, dt, true, 2.5f, 2, c);
    }
}

// Launches past the row plan's 2^17 vectors (kernels/row_plan.h), where threads take several
// vectors each; the cases above take one.
TEST(Softmax, ManyRowsTakeSeveralVectorsAThread) {
  run_case(DType::f16, DType::f16, false, 1.0f, 65, 16384);
  run_case(DType::f32, DType::f32, true, 1.3f, 40, 14000);
}

TEST(Softmax, RowsSumToOne) {
  Tensor xh = random_host({4, 50000}, DType::bf16, -20, 20);
  Tensor x = ctx().to_device(xh), out = ctx().empty({4, 50000}, DType::f32);
  ops::softmax(ctx(), x, out, 0.5f);
  const std::vector<double> p = to_doubles(ctx().to_host(out));
  for (int r = 0; r < 4; ++r) {
    double s = 0;
    for (int c = 0; c < 50000; ++c) s += p[r * 50000 + c];
    EXPECT_NEAR(s, 1.0, 1e-4) << "row " << r;
  }
}

TEST(Softmax, RejectsMisuse) {
  Tensor x = ctx().empty({2, 8}, DType::bf16), out = ctx().empty({2, 8}, DType::bf16);
  Tensor out_f16 = ctx().empty({2, 8}, DType::f16), out_short = ctx().empty({2, 7}, DType::bf16);
  EXPECT_THROW(ops::softmax(ctx(), x, out, 0.0f), Error);
  EXPECT_THROW(ops::softmax(ctx(), x, out, -1.0f), Error);
  EXPECT_THROW(ops::softmax(ctx(), x, out, INFINITY), Error);
  EXPECT_THROW(ops::softmax(ctx(), x, out_f16), Error);
  EXPECT_THROW(ops::log_softmax(ctx(), x, out_short), Error);
}

}  // namespace
}  // namespace lw::test
