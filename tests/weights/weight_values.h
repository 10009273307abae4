// Checks of a loaded ops::Weight against make_fixtures.py's reference values.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "ops/weight.h"
#include "test_util.h"
#include "weights/checkpoint.h"
#include "weights/fixture_values.h"

namespace lw::test {

// One safetensors checkpoint make_fixtures.py wrote under `dir` (`name`: its folder and its key
// in manifest.json), its manifest entries, and the reference values of each tensor that has them.
struct FixtureCheckpoint {
  FixtureCheckpoint(const std::string& dir, const std::string& name)
      : dir(dir), ckpt(weights::open_checkpoint(dir + "/" + name)), manifest([&] {
          std::ifstream f(dir + "/manifest.json");
          EXPECT_TRUE(f.good()) << "run the weights.make_fixtures test first (ctest -L weights)";
          return nlohmann::json::parse(f)[name];
        }()) {}
  std::vector<float> values(const std::string& tensor) const {
    return read_values<float>(dir + "/" + manifest[tensor]["expected"].get<std::string>());
  }
  std::vector<int64_t> shape(const std::string& tensor) const {
    return manifest[tensor]["shape"].get<std::vector<int64_t>>();
  }
  // The tensors with reference values (the broken ones have none).
  std::vector<std::string> cases() const {
    std::vector<std::string> names;
    for (const auto& [tensor, info] : manifest.items())
      if (!info["expected"].is_null()) names.push_back(tensor);
    return names;
  }

  std::string dir;
  std::unique_ptr<weights::Checkpoint> ckpt;
  nlohmann::json manifest;
};

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

// out = x W^T (+ bias) from linear, [m, n] on the host, against float64 over the reference
// weights [n, k]: fp32 sums (K * 2^-24 of sum |x w|), the weights rounded to x's dtype where the
// path expands them (eps of sum |x w|), one rounding of the result and, with a bias, of the
// product. bias: the host [n] tensor, or undefined.
inline void expect_linear_near_reference(const Tensor& out, const Tensor& x, const Tensor& bias, const std::vector<float>& wref,
                                         int64_t n, int64_t k) {
  const int64_t m = x.size(0);
  const DType dt = x.dtype();
  const double eps = epsilon(dt), acc_eps = static_cast<double>(k) * std::ldexp(1.0, -24);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = bias.defined() ? element(bias, j) : 0.0, mag = std::abs(ref), product = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = element(x, i * k + l) * static_cast<double>(wref[j * k + l]);
        product += p;
        mag += std::abs(p);
      }
      ref += product;
      const double v = element(out, i * n + j);
      ASSERT_LE(std::abs(v - ref), eps * (std::abs(ref) + std::abs(product)) + (acc_eps + eps) * mag + 1e-6)
          << "element [" << i << ", " << j << "]: " << v << " vs " << ref;
    }
}

}  // namespace lw::test
