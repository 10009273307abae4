#include "test_util.h"

#include <cstdlib>
#include <cstring>

namespace lw::test {

Context& ctx() {
  static Context context([] {
    const char* env = std::getenv("LW_TEST_DEVICE");
    return env ? std::atoi(env) : 0;
  }());
  return context;
}

namespace {
uint64_t g_seed = 0;
std::mt19937_64 g_rng;

// Reseeds before every test and prints the seed with the test's result.
class SeedListener : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    const char* env = std::getenv("LW_TEST_SEED");
    g_seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}() * 0x9e3779b97f4a7c15ull ^ std::random_device{}();
    g_rng.seed(g_seed);
    ::testing::Test::RecordProperty("seed", std::to_string(g_seed));
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) std::printf("  (replay with LW_TEST_SEED=%llu)\n", static_cast<unsigned long long>(g_seed));
  }
};
[[maybe_unused]] const bool g_registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedListener);
  return true;
}();
}  // namespace

std::mt19937_64& rng() { return g_rng; }
uint64_t seed() { return g_seed; }

Tensor random_host(std::vector<int64_t> shape, DType dtype, double lo, double hi) {
  Tensor t = Tensor::empty_host(std::move(shape), dtype);
  std::uniform_real_distribution<double> dist(lo, hi);
  const int64_t n = t.numel();
  switch (dtype) {
    case DType::f32: for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(dist(rng())); break;
    case DType::f16: for (int64_t i = 0; i < n; ++i) t.data<half>()[i] = gpu::from_float<half>(static_cast<float>(dist(rng()))); break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) t.data<bfloat16>()[i] = gpu::from_float<bfloat16>(static_cast<float>(dist(rng())));
      break;
    case DType::i32: {
      std::uniform_int_distribution<int32_t> idist(static_cast<int32_t>(lo), static_cast<int32_t>(hi));
      for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = idist(rng());
      break;
    }
    default: LW_FAIL("random_host: dtype " << dtype_name(dtype) << " not supported");
  }
  return t;
}

double element(const Tensor& host, int64_t i) {
  switch (host.dtype()) {
    case DType::f32: return host.data<float>()[i];
    case DType::f16: return gpu::to_float(host.data<half>()[i]);
    case DType::bf16: return gpu::to_float(host.data<bfloat16>()[i]);
    case DType::i32: return host.data<int32_t>()[i];
    default: LW_FAIL("element: dtype " << dtype_name(host.dtype()) << " not supported");
  }
}

std::vector<double> to_doubles(const Tensor& host) {
  LW_CHECK(host.device() == Device::host && host.is_contiguous(), "to_doubles needs a contiguous host tensor");
  std::vector<double> v(static_cast<size_t>(host.numel()));
  for (int64_t i = 0; i < host.numel(); ++i) v[i] = element(host, i);
  return v;
}

void poison(Tensor& device) {
  LW_CUDA_CHECK(cudaMemsetAsync(device.data_ptr(), 0xff, device.nbytes(), ctx().stream().get()));
}

double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

Tensor offset_copy(const Tensor& x, int64_t elems) {
  LW_CHECK(x.device() != Device::host && x.is_contiguous(), "offset_copy needs a contiguous device tensor");
  Tensor buffer = ctx().empty({x.numel() + elems}, x.dtype());
  Tensor shifted = buffer.slice(0, elems, elems + x.numel()).view(x.shape());
  LW_CUDA_CHECK(cudaMemcpyAsync(shifted.data_ptr(), x.data_ptr(), x.nbytes(), cudaMemcpyDeviceToDevice,
                                ctx().stream().get()));
  return shifted;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

double epsilon(DType dtype) {
  switch (dtype) {
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    default: return 0;
  }
}

::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& ref, double rel, double abs) {
  if (got.numel() != static_cast<int64_t>(ref.size())) {
    return ::testing::AssertionFailure() << "size " << got.numel() << " != reference size " << ref.size();
  }
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = element(got, i), r = ref[static_cast<size_t>(i)];
    if (std::isnan(g) && !std::isnan(r)) return ::testing::AssertionFailure() << "element " << i << " is NaN (ref " << r << ")";
    if (std::isinf(r) || std::isinf(g)) {
      if (g != r) return ::testing::AssertionFailure() << "element " << i << ": " << g << " vs ref " << r;
      continue;
    }
    if (std::abs(g - r) > rel * std::abs(r) + abs) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g << " vs ref " << r << " (error "
                                           << std::abs(g - r) << " > bound " << rel * std::abs(r) + abs << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lw::test
