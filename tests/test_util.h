// Helpers shared by the tests: the test context, random inputs, float64 references.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "gpu/numeric.h"

namespace lw::test {

// One context for the whole test binary, on device 0 (LW_TEST_DEVICE overrides).
Context& ctx();

// A generator seeded afresh for every test; the seed is printed so a failure can be replayed
// with LW_TEST_SEED=<seed>.
std::mt19937_64& rng();
uint64_t seed();

// Host tensor of uniform values in [lo, hi), rounded to the dtype (so the reference sees
// exactly what the kernel reads).
Tensor random_host(std::vector<int64_t> shape, DType dtype, double lo = -1.0, double hi = 1.0);

// Element i of a host float tensor (f32/f16/bf16), as double; contiguous tensors only.
double element(const Tensor& host, int64_t i);
std::vector<double> to_doubles(const Tensor& host);

// Fills device memory with 0xff bytes: NaN in every float type, so unwritten outputs show.
void poison(Tensor& device);

// ||out - ref|| / ||ref|| (with ||ref|| floored at 1e-30); any NaN or Inf in out gives +inf.
double relative_error(const std::vector<double>& out, const std::vector<double>& ref);

// A copy of contiguous device tensor x whose data starts `elems` elements past an allocation
// (3: off every vector boundary), in the shape of x: for kernels' aligned-load paths.
Tensor offset_copy(const Tensor& x, int64_t elems = 3);

// Bytes of two host tensors are identical.
bool bitwise_equal(const Tensor& a, const Tensor& b);

// Batch-invariant execution on a context for the life of the scope (Context::deterministic).
class DeterministicScope {
 public:
  explicit DeterministicScope(Context& c) : ctx_(c), before_(c.deterministic()) { c.set_deterministic(true); }
  ~DeterministicScope() { ctx_.set_deterministic(before_); }

 private:
  Context& ctx_;
  bool before_;
};

// An environment variable set (value non-null) or unset (null) for the life of the scope, then
// restored: for the path overrides of ops/select.h (LW_GEMM_PATH, LW_ATTENTION_PATH).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) before_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), before_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, before_;
  bool had_ = false;
};

// The message of the lw::Error f throws; "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// f throws an lw::Error whose message contains `part`.
template <class F>
void expect_error(F&& f, const std::string& part) {
  const std::string e = error_of(f);
  if (e.empty()) ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  else EXPECT_NE(e.find(part), std::string::npos) << e;
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// Unit round-off of a float dtype.
double epsilon(DType dtype);

// Every element of `got` (host, float dtype) is finite where ref is, and within
// rel * |ref| + abs of ref; reports the first element that is not, with its index.
::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& ref, double rel, double abs);

}  // namespace lw::test
