// Checks of a loaded ops::Weight against make_fixtures.py's reference values.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/weight.h"
#include "test_util.h"
#include "weights/fixture_values.h"

namespace lw::test {

// The weight expanded to f32 equals rows [r0, r1) and columns [c0, c1) of the reference [*, k]
// exactly.
inline void expect_values(const ops::Weight& w, const std::vector<float>& ref, int64_t k, int64_t r0, int64_t r1,
                          int64_t c0, int64_t c1) {
  ASSERT_EQ(w.out_features(), r1 - r0);
  ASSERT_EQ(w.in_features(), c1 - c0);
  const Tensor got = ctx().to_host(ops::expand(ctx(), w, DType::f32));
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = c0; j < c1; ++j)
      ASSERT_EQ(got.data<float>()[(i - r0) * (c1 - c0) + (j - c0)], ref[i * k + j]) << "element [" << i << ", " << j << "]";
}

// The whole weight (kept quantised) and its dense load hold the reference exactly, and each
// 16-bit compute dtype holds it rounded once.
inline void expect_kept_and_dense(const ops::Weight& kept, const ops::Weight& dense, const std::vector<float>& ref) {
  const int64_t n = kept.out_features(), k = kept.in_features();
  expect_values(kept, ref, k, 0, n, 0, k);
  EXPECT_EQ(dense.format(), ops::WeightFormat::dense);
  expect_values(dense, ref, k, 0, n, 0, k);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor got = ctx().to_host(ops::expand(ctx(), kept, dt));
    for (int64_t i = 0; i < n * k; ++i)
      ASSERT_EQ(element(got, i), rounded_to(ref[i], dt)) << dtype_name(dt) << " element " << i;
  }
}

}  // namespace lw::test
