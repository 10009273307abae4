// The device capability record (gpu/device_caps.h) and the selection of an op's implementation
// (ops/select.h): the automatic choice, overrides by argument and by environment, unknown names
// and unavailable paths refused; GEMM and attention through their environment variables.
#include <algorithm>
#include <string>

#include "gpu/compat.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/select.h"
#include "test_util.h"

namespace lw::test {
namespace {



TEST(DeviceCaps, DescribesTheContextsDevice) {
  const gpu::DeviceCaps& c = ctx().caps();
  EXPECT_EQ(c.warp_size, ctx().warp_size());
  EXPECT_EQ(c.device, ctx().device());
  EXPECT_EQ(c.name, ctx().device_name());
  EXPECT_GT(c.multiprocessors, 0);
  EXPECT_GT(c.global_memory, 0u);
  EXPECT_GT(c.shared_memory_per_block, 0u);
  EXPECT_GE(c.shared_memory_per_block_optin, c.shared_memory_per_block);
  EXPECT_FALSE(c.arch.empty());
  EXPECT_CONTAINS(c.describe(), c.arch);
  EXPECT_CONTAINS(c.describe(), "warp " + std::to_string(c.warp_size));
#if defined(LW_TARGET_HOST)
  EXPECT_EQ(c.warp_size, LW_WARP_SIZE);
  EXPECT_EQ(c.vendor, gpu::Vendor::emulator);
  EXPECT_TRUE(c.emulator());
  EXPECT_EQ(c.arch, "simt");
  EXPECT_EQ(c.arch_number, 0);
  EXPECT_FALSE(c.matrix.any());
  EXPECT_EQ(c.matrix.describe(), "none");
  EXPECT_EQ(c.peak_bandwidth_gb_per_s(), 0.0);  // no bus or clock to report
#else
  EXPECT_FALSE(c.emulator());
  EXPECT_GT(c.arch_number, 0);
  EXPECT_EQ(c.matrix.mma_sync || c.matrix.wgmma, c.vendor == gpu::Vendor::cuda && c.arch_number >= 80);
#endif
}

TEST(DeviceCaps, ArchitectureNumbersAndMatrixCores) {
  using gpu::Vendor;
  EXPECT_EQ(gpu::arch_number_of(Vendor::cuda, "sm_90"), 90);
  EXPECT_EQ(gpu::arch_number_of(Vendor::cuda, "sm_120"), 120);
  EXPECT_EQ(gpu::arch_number_of(Vendor::hip, "gfx942"), 942);
  EXPECT_EQ(gpu::arch_number_of(Vendor::hip, "gfx90a"), 910);
  EXPECT_EQ(gpu::arch_number_of(Vendor::hip, "gfx1100"), 1100);
  EXPECT_EQ(gpu::arch_number_of(Vendor::emulator, "simt"), 0);

  auto cores = [](Vendor v, const char* arch) { return gpu::matrix_cores_of(v, arch).describe(); };
  EXPECT_EQ(cores(Vendor::cuda, "sm_75"), "none");
  EXPECT_EQ(cores(Vendor::cuda, "sm_80"), "mma.sync");
  EXPECT_EQ(cores(Vendor::cuda, "sm_89"), "mma.sync");
  EXPECT_EQ(cores(Vendor::cuda, "sm_90"), "mma.sync wgmma");
  EXPECT_EQ(cores(Vendor::cuda, "sm_100"), "mma.sync");
  EXPECT_EQ(cores(Vendor::hip, "gfx908"), "none");
  EXPECT_EQ(cores(Vendor::hip, "gfx90a"), "mfma");
  EXPECT_EQ(cores(Vendor::hip, "gfx942"), "mfma");
  EXPECT_EQ(cores(Vendor::hip, "gfx1030"), "none");
  EXPECT_EQ(cores(Vendor::hip, "gfx1100"), "wmma");
  EXPECT_EQ(cores(Vendor::emulator, "simt"), "none");
}

// An op with three implementations, one of which this device never has.
enum class FakePath { automatic, simple, fast, special };
struct FakeShape {
  int64_t rows = 0;
};
struct FakePaths {
  using Path = FakePath;
  using Shape = FakeShape;
  static constexpr const char* op = "fake";
  static constexpr const char* env = "LW_FAKE_PATH";
  static constexpr ops::PathName<FakePath> names[] = {
      {FakePath::automatic, "automatic"}, {FakePath::simple, "simple"}, {FakePath::fast, "fast"}, {FakePath::special, "special"}};
  static ops::Availability available(const gpu::DeviceCaps&, FakePath path) {
    if (path == FakePath::special) return ops::Availability::no("needs the imaginary instructions");
    return ops::Availability::yes();
  }
  static FakePath choose(const gpu::DeviceCaps&, const FakeShape& shape) {
    return shape.rows > 8 ? FakePath::fast : FakePath::simple;
  }
};

TEST(Select, AutomaticChoiceArgumentAndEnvironment) {
  const gpu::DeviceCaps& caps = ctx().caps();
  ScopedEnv none("LW_FAKE_PATH", nullptr);
  auto s = ops::select<FakePaths>(caps, {4}, FakePath::automatic);
  EXPECT_EQ(s.path, FakePath::simple);
  EXPECT_FALSE(s.forced());
  EXPECT_EQ(ops::select<FakePaths>(caps, {100}, FakePath::automatic).path, FakePath::fast);

  s = ops::select<FakePaths>(caps, {4}, FakePath::fast);  // the caller's argument
  EXPECT_EQ(s.path, FakePath::fast);
  EXPECT_EQ(s.origin, ops::PathOrigin::argument);

  {
    ScopedEnv env("LW_FAKE_PATH", "fast");
    s = ops::select<FakePaths>(caps, {4}, FakePath::automatic);
    EXPECT_EQ(s.path, FakePath::fast);
    EXPECT_EQ(s.origin, ops::PathOrigin::environment);
    EXPECT_CONTAINS(ops::origin_note<FakePaths>(s), "LW_FAKE_PATH");
    // An explicit argument is not overridden: tests that run each path keep doing so.
    EXPECT_EQ(ops::select<FakePaths>(caps, {4}, FakePath::simple).path, FakePath::simple);
  }
  {
    ScopedEnv env("LW_FAKE_PATH", "automatic");  // the op's own choice, as when unset
    EXPECT_EQ(ops::select<FakePaths>(caps, {100}, FakePath::automatic).path, FakePath::fast);
    EXPECT_FALSE(ops::select<FakePaths>(caps, {100}, FakePath::automatic).forced());
  }
}

TEST(Select, UnknownNamesAndUnavailablePathsAreRefused) {
  const gpu::DeviceCaps& caps = ctx().caps();
  {
    ScopedEnv env("LW_FAKE_PATH", "fastest");
    const std::string e = error_of([&] { ops::select<FakePaths>(caps, {4}, FakePath::automatic); });
    EXPECT_CONTAINS(e, "LW_FAKE_PATH=fastest");
    EXPECT_CONTAINS(e, "unknown fake path 'fastest'");
    EXPECT_CONTAINS(e, "valid: automatic, simple, fast, special");
  }
  {
    ScopedEnv env("LW_FAKE_PATH", "special");
    const std::string e = error_of([&] { ops::select<FakePaths>(caps, {4}, FakePath::automatic); });
    EXPECT_CONTAINS(e, "LW_FAKE_PATH=special");
    EXPECT_CONTAINS(e, "needs the imaginary instructions");
  }
  ScopedEnv none("LW_FAKE_PATH", nullptr);
  const std::string e = error_of([&] { ops::select<FakePaths>(caps, {4}, FakePath::special); });
  EXPECT_CONTAINS(e, "'special' cannot run");
  EXPECT_CONTAINS(e, "needs the imaginary instructions");

  EXPECT_EQ(ops::available_paths<FakePaths>(caps), (std::vector<FakePath>{FakePath::simple, FakePath::fast}));
  EXPECT_EQ(ops::parse_path<FakePaths>("fast", "test"), FakePath::fast);
  EXPECT_STREQ(ops::path_name<FakePaths>(FakePath::special), "special");
}

// grouped_linear: the grouped GEMV at up to half a row per expert, and up to eight for small
// experts (Qwen3-30B-A3B's 1536 x 2048), the vendor GEMM per expert beyond (Mixtral's 28672 x
// 4096 from one row); never a choice by size in deterministic mode.
TEST(Select, GroupedLinearTakesTheGemvAtFewRowsPerExpert) {
  ScopedEnv none("LW_GEMM_PATH", nullptr);
  auto choice = [](int64_t tokens, int64_t n, int64_t k, int64_t experts, bool deterministic = false) {
    const ops::GemmShape shape{ops::GemmOp::grouped_linear, tokens, n, k, experts, deterministic};
    return ops::select<ops::GemmPaths>(ctx().caps(), shape, ops::GemmPath::automatic).path;
  };
  EXPECT_EQ(choice(8, 1536, 2048, 128), ops::GemmPath::gemv);
  EXPECT_EQ(choice(1024, 1536, 2048, 128), ops::GemmPath::gemv);
  EXPECT_EQ(choice(1025, 1536, 2048, 128), ops::GemmPath::vendor);
  EXPECT_EQ(choice(2, 28672, 4096, 8), ops::GemmPath::gemv);
  EXPECT_EQ(choice(4, 28672, 4096, 8), ops::GemmPath::gemv);
  EXPECT_EQ(choice(5, 28672, 4096, 8), ops::GemmPath::vendor);
  EXPECT_EQ(choice(8, 1536, 2048, 128, true), ops::GemmPath::vendor);
}

TEST(Select, GemmPathFromTheEnvironment) {
  const DType dt = DType::f32;
  Tensor xh = random_host({17, 24}, dt), wh = random_host({8, 24}, dt);
  Tensor x = ctx().to_device(xh), w = ctx().to_device(wh), out = ctx().empty({17, 8}, dt);
  {
    ScopedEnv env("LW_GEMM_PATH", "tiled");
    const ops::GemmShape shape{ops::GemmOp::linear, 17, 8, 24};
    EXPECT_EQ(ops::select<ops::GemmPaths>(ctx().caps(), shape, ops::GemmPath::automatic).path, ops::GemmPath::tiled);
    EXPECT_NO_THROW(ops::linear(ctx(), x, w, Tensor(), out));
  }
  {
    // Forced gemv beyond its rows is refused (no quiet fall back to another path), naming the variable.
    ScopedEnv env("LW_GEMM_PATH", "gemv");
    const std::string e = error_of([&] { ops::linear(ctx(), x, w, Tensor(), out); });
    EXPECT_CONTAINS(e, "at most 16 rows");
    EXPECT_CONTAINS(e, "LW_GEMM_PATH");
    EXPECT_CONTAINS(error_of([&] {
                      ops::batched_matmul(ctx(), x.view({1, 17, 24}), w.view({1, 8, 24}), true, 1.0f, out.view({1, 17, 8}));
                    }),
                    "the gemv path is for linear and grouped_linear only");
  }
  {
    ScopedEnv env("LW_GEMM_PATH", "cublas");
    EXPECT_CONTAINS(error_of([&] { ops::linear(ctx(), x, w, Tensor(), out); }), "valid: automatic, vendor, gemv, tiled");
  }
  // Every GEMM path runs on every target today.
  EXPECT_EQ(ops::available_paths<ops::GemmPaths>(ctx().caps()),
            (std::vector<ops::GemmPath>{ops::GemmPath::vendor, ops::GemmPath::gemv, ops::GemmPath::tiled}));
}

TEST(Select, AttentionPathFromTheEnvironment) {
  // rows, sequences, q heads, kv heads, head dim, max context, dtype, prefill, deterministic
  const ops::AttentionShape decode{4, 4, 4, 2, 64, 16, DType::bf16, false, false};
  const ops::AttentionShape prefill{40, 2, 4, 2, 64, 40, DType::bf16, true, false};
  {
    ScopedEnv env("LW_ATTENTION_PATH", "portable");
    const auto s = ops::select<ops::AttentionPaths>(ctx().caps(), prefill, ops::AttentionPath::automatic);
    EXPECT_EQ(s.path, ops::AttentionPath::portable);
    EXPECT_TRUE(s.forced());
  }
  {
    ScopedEnv env("LW_ATTENTION_PATH", "mma");
    const std::string e =
        error_of([&] { ops::select<ops::AttentionPaths>(ctx().caps(), decode, ops::AttentionPath::automatic); });
    EXPECT_CONTAINS(e, "unknown attention path 'mma'");
    EXPECT_CONTAINS(e, "valid: automatic, portable, matrix");
  }
  ScopedEnv none("LW_ATTENTION_PATH", nullptr);
  const auto paths = ops::available_paths<ops::AttentionPaths>(ctx().caps());
  EXPECT_NE(std::find(paths.begin(), paths.end(), ops::AttentionPath::portable), paths.end()) << "portable runs everywhere";
  const bool matrix = std::find(paths.begin(), paths.end(), ops::AttentionPath::matrix) != paths.end();
  if (ctx().caps().emulator()) EXPECT_TRUE(matrix) << "the emulator emulates the matrix cores";
  auto chosen = [&](const ops::AttentionShape& s) {
    return ops::select<ops::AttentionPaths>(ctx().caps(), s, ops::AttentionPath::automatic).path;
  };
  // decode_attention (no plan) stays portable; every prefill_attention batch the matrix kernel
  // takes goes to the matrix cores, single-token (decode) batches and deterministic mode included.
  // On a Hopper GPU (a build with its kernel) the head dims that kernel has go to it instead.
  const bool hopper = std::find(paths.begin(), paths.end(), ops::AttentionPath::hopper) != paths.end();
  if (ctx().caps().emulator()) EXPECT_FALSE(hopper) << "the emulator has no warpgroup multiply";
  const ops::AttentionPath fast = matrix ? ops::AttentionPath::matrix : ops::AttentionPath::portable;
  const ops::AttentionPath fastest = hopper ? ops::AttentionPath::hopper : fast;
  EXPECT_EQ(chosen(decode), ops::AttentionPath::portable);
  EXPECT_EQ(chosen({4, 4, 4, 2, 64, 16, DType::bf16, true, false}), fastest);
  EXPECT_EQ(chosen(prefill), fastest);
  EXPECT_EQ(chosen({4, 4, 4, 2, 64, 16, DType::bf16, true, true}), fastest);
  EXPECT_EQ(chosen({40, 2, 4, 2, 96, 40, DType::bf16, true, false}), fast);  // head dim 96: no Hopper kernel
  EXPECT_EQ(chosen({40, 2, 4, 2, 64, 40, DType::bf16, true, false, true}), fast);  // 8-bit cache
  EXPECT_FALSE(ops::hopper_attention_supports({40, 2, 4, 2, 64, 40, DType::bf16, true, false, true}).ok);
  EXPECT_CONTAINS(ops::hopper_attention_supports({40, 2, 4, 2, 80, 40, DType::bf16, true, false}).reason,
                  "head dims 64 and 128");
  EXPECT_CONTAINS(ops::hopper_attention_supports(decode).reason, "takes no plan");
  // What it cannot take stays portable: f32, a head dim not built.
  EXPECT_EQ(chosen({40, 2, 4, 2, 64, 40, DType::f32, true, false}), ops::AttentionPath::portable);
  EXPECT_EQ(chosen({40, 2, 4, 2, 112, 40, DType::bf16, true, false}), ops::AttentionPath::portable);
  EXPECT_FALSE(ops::matrix_attention_supports(decode).ok);
  EXPECT_CONTAINS(ops::matrix_attention_supports({40, 2, 4, 2, 48, 40, DType::f16, true, false}).reason, "head dims");
}

}  // namespace
}  // namespace lw::test
