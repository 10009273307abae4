// Times Linear (y = x @ W^T) on the device for the Llama-3-8B weight shapes on every path:
// the vendor library, the GEMV kernel (M <= 16), the automatic choice and the deterministic
// mode's (the vendor library's batch-invariant algorithm: Context::deterministic), and prints TFLOP/s
// and the weight-read bandwidth beside the device-to-device copy bandwidth of the same run.
// Each timing covers one back-to-back call per weight set (256 MB of sets, at most 256 of them,
// rotated so that the L2 cache does not hold the weights of shapes of 1 MB or more), divided by
// the number of calls: decode runs its GEMMs back to
// back, so a launch's latency is hidden behind the previous kernel as it is here.
// --l2-resident times one weight set, so that weights smaller than the L2 cache are read from it
// (the dense paths; the int4 kernels' overlapped launches over one set measured slower than over
// rotated sets, docs/PERFORMANCE.md).
// --weights gguf_q4_k (any GGUF block format of ops/weight.h) times the same shapes over weights
// kept in GGML blocks (random bits: the values do not change the time), where "gemv" is the
// fused dequantising GEMV at any M and "vendor" the expansion followed by the vendor GEMM; the
// bandwidth is counted on the packed bytes; --unaligned places the blocks 2 bytes past a 16-byte
// boundary, where the decoders read their fields byte by byte. --weights fp8_e4m3_per_block (_per_channel,
// _per_tensor) or int8_per_channel: 8-bit weights with random codes and scales, where "vendor" is
// the scaled FP8 GEMM over x quantised to e4m3 (W8A8; on a device without one, the expansion and
// the dense GEMM) or the int8 GEMM over x quantised per token, and "gemv" the fused FP8 GEMV.
// --weights int8_per_group: symmetric int8 with scales per 128 input columns (8-bit GPTQ), W8A16:
// "gemv" the fused 8-bit GEMV, "vendor" the expansion and the dense GEMM.
// --weights int4: 4-bit GPTQ weights of group 128 (random values, zero points and scales, packed
// by ops::int4_weight), where "gemv" is the fused matrix-fragment kernel (up to 64 rows) and
// "vendor" the expansion followed by the vendor GEMM; up to 8 rows, "ring" times the fused
// kernel's ring variant (kernels::Int4GemmKernel::ring) where "gemv" runs the streamed one, and
// "streamed" the streamed one forced, both named with their k splits (ops' or each of --splits);
// "hopper" the Hopper kernel forced (Int4GemmKernel::hopper: an sm_90 device and a build for 90)
// at any rows, in one split above 64 rows.
// --act-order (int4): a random g_idx, so that x's columns are permuted: gathered by the streamed
// kernel as it stages x, or into a copy first above 4 rows ("ring" times the kernel alone).
// --paths vendor,gemv,... times only the paths named (vendor, gemv, automatic, deterministic, ring,
// streamed, hopper);
// --shapes 14336x4096,... only these weight shapes (N x K).
// --experts E [--top-k 8]: grouped_linear (mixture-of-experts) instead, dense weights [E, N, K]:
// each of M tokens sends a row to top-k distinct experts drawn at random, and the bandwidth is
// counted on the experts that receive rows; paths tiled, gemv, vendor and automatic. With
// quantised --weights (int4, a GGUF block format, 8-bit) the experts are ops::ExpertWeights: "each"
// reads the offsets to the host and runs each expert's rows through linear, "grouped" is the
// one-launch grouped kernel where the format has one (int4, GGUF blocks; the
// forced gemv path), and automatic.
//     bench_gemm [--dtype bf16] [--weights dense] [--repeats N] [--ms 1,2,4] [--paths P,...] [--shapes NxK,...]
//                [--splits S,...] [--experts E --top-k K] [--json FILE]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/context.h"
#include "kernels/gemv.h"
#include "kernels/quant/int4.h"
#include "kernels/quant/int4_hopper.h"
#include "ops/int4_weight.h"
#include "ops/check.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/quant.h"
#include "ops/weight.h"

namespace {

using lw::DType;
using lw::Tensor;
using lw::ops::GemmPath;

constexpr int kMostSets = 256;  // weight sets a case rotates through

double median_ms(lw::Context& ctx, int repeats, int sets, const std::function<void(int)>& run) {
  for (int i = 0; i < sets; ++i) run(i);
  ctx.synchronize();
  std::vector<double> t;
  lw::Event start, stop;
  for (int i = 0; i < repeats; ++i) {
    start.record(ctx.stream());
    for (int s = 0; s < sets; ++s) run(s);
    stop.record(ctx.stream());
    stop.synchronize();
    t.push_back(stop.elapsed_ms_since(start) / sets);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void print_row(int64_t m, int64_t n, int64_t k, const char* path, double ms, double flops, double bytes, double copy_gbs) {
  const double gbs = bytes / (ms * 1e6);
  std::printf("%6lld %7lld %6lld  %-10s %9.4f %8.1f %8.0f %6.1f%%\n", static_cast<long long>(m), static_cast<long long>(n),
              static_cast<long long>(k), path, ms, flops / (ms * 1e9), gbs, 100 * gbs / copy_gbs);
}

// grouped_linear over [experts, N, K] with M tokens routed to top_k experts each.
// quantised (optional): makes one expert's [N, K] weight, timed as ops::ExpertWeights.
void bench_grouped(lw::Context& ctx, DType dt, const std::vector<std::array<int64_t, 2>>& shapes,
                   const std::vector<int64_t>& ms, int64_t experts, int64_t top_k, int repeats, double copy_gbs,
                   const std::function<Tensor(std::vector<int64_t>)>& random,
                   const std::function<lw::ops::Weight(int64_t, int64_t)>& quantised) {
  std::mt19937_64 rng(11);
  std::printf("%6s %7s %6s  %-10s %9s %8s %8s %7s   (%lld experts, top %lld; M counts tokens)\n", "M", "N", "K", "path",
              "ms", "TFLOP/s", "W GB/s", "% copy", static_cast<long long>(experts), static_cast<long long>(top_k));
  for (const auto& s : shapes) {
    const int64_t n = s[0], k = s[1];
    const double expert_bytes = quantised ? static_cast<double>(quantised(n, k).device_bytes())
                                          : static_cast<double>(n * k) * static_cast<double>(lw::dtype_size(dt));
    const int sets = std::clamp(static_cast<int>(std::ceil(256e6 / (expert_bytes * static_cast<double>(experts)))), 2, kMostSets);
    std::vector<Tensor> w;
    std::vector<lw::ops::ExpertWeights> wq;
    for (int i = 0; i < sets; ++i) {
      if (!quantised) {
        w.push_back(random({experts, n, k}));
        continue;
      }
      std::vector<lw::ops::Weight> each;
      for (int64_t e = 0; e < experts; ++e) each.push_back(quantised(n, k));
      wq.emplace_back(ctx, std::move(each));
    }
    for (int64_t m : ms) {
      std::vector<int32_t> counts(experts, 0), pick(experts);
      for (int64_t t = 0; t < m; ++t) {
        std::iota(pick.begin(), pick.end(), 0);
        for (int64_t j = 0; j < top_k; ++j) {  // a partial Fisher-Yates shuffle: top_k distinct experts
          std::swap(pick[j], pick[j + static_cast<int64_t>(rng() % static_cast<uint64_t>(experts - j))]);
          ++counts[pick[j]];
        }
      }
      Tensor off = Tensor::empty_host({experts + 1}, DType::i32);
      off.data<int32_t>()[0] = 0;
      int64_t active = 0;
      for (int64_t e = 0; e < experts; ++e) {
        off.data<int32_t>()[e + 1] = off.data<int32_t>()[e] + counts[e];
        active += counts[e] > 0;
      }
      const int64_t rows = m * top_k;
      const Tensor offsets = ctx.to_device(off), x = random({rows, k});
      Tensor y = ctx.empty({rows, n}, dt);
      const double flops = 2.0 * static_cast<double>(rows * n * k), bytes = expert_bytes * static_cast<double>(active);
      if (quantised) {
        const double each = median_ms(ctx, repeats, sets, [&](int i) {
          lw::ops::ExpertRows r(offsets);
          lw::ops::grouped_linear(ctx, x, wq[static_cast<size_t>(i)].weights(), r.host(ctx), y);
        });
        print_row(m, n, k, "each", each, flops, bytes, copy_gbs);
        for (GemmPath p : {GemmPath::gemv, GemmPath::automatic}) {
          const double t = median_ms(ctx, repeats, sets, [&](int i) {
            lw::ops::ExpertRows r(offsets);
            lw::ops::grouped_linear(ctx, x, wq[static_cast<size_t>(i)], r, y, p);
          });
          print_row(m, n, k, p == GemmPath::gemv ? "grouped" : "automatic", t, flops, bytes, copy_gbs);
        }
        continue;
      }
      for (GemmPath p : {GemmPath::tiled, GemmPath::gemv, GemmPath::vendor, GemmPath::automatic}) {
        const double t = median_ms(ctx, repeats, sets, [&](int i) { lw::ops::grouped_linear(ctx, x, w[i], offsets, y, p); });
        print_row(m, n, k, lw::ops::gemm_path_name(p), t, flops, bytes, copy_gbs);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gemm: Linear on the Llama-3-8B shapes, vendor library vs GEMV"};
  std::string dtype_name = "bf16", json_path, weights_name = "dense";
  int repeats = 30;
  std::vector<int64_t> ms = {1, 2, 4, 8, 16, 64, 256, 4096};
  app.add_option("--dtype", dtype_name, "f32, f16 or bf16");
  app.add_option("--repeats", repeats, "timed runs per case")->check(CLI::PositiveNumber);
  app.add_option("--ms", ms, "rows of x (tokens)")->delimiter(',');
  app.add_option("--json", json_path, "also write the results as JSON");
  std::vector<std::string> only_paths;
  app.add_option("--paths", only_paths, "time only these paths: vendor, gemv, automatic, deterministic, ring, streamed, hopper")
      ->delimiter(',')
      ->check(CLI::IsMember({"vendor", "gemv", "automatic", "deterministic", "ring", "streamed", "hopper"}));
  std::vector<int> forced_splits;
  app.add_option("--splits", forced_splits, "with --weights int4: the k splits of the ring and streamed paths (default: ops')")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app.add_option("--weights", weights_name,
                 "dense, int4, fp8_e4m3_per_block, fp8_e4m3_per_channel, fp8_e4m3_per_tensor, int8_per_channel, "
                 "int8_per_group or a GGUF "
                 "block format (gguf_q4_0 ... gguf_q6_k)");
  std::vector<std::string> shape_names = {"4096x4096", "14336x4096", "4096x14336", "128256x4096"};
  app.add_option("--shapes", shape_names, "weight shapes N x K (default: Llama-3-8B's)")->delimiter(',');
  bool unaligned = false;
  app.add_flag("--unaligned", unaligned,
               "with a GGUF block format: the blocks 2 bytes past a 16-byte boundary (the decoders' byte loads)");
  bool l2_resident = false;
  app.add_flag("--l2-resident", l2_resident,
               "one weight set per case, so that weights that fit the L2 cache are read from it (dense weights: "
               "int4's overlapped launches are slower over one set)");
  bool act_order = false;
  app.add_flag("--act-order", act_order, "with --weights int4: GPTQ act order (a random g_idx, x's columns permuted)");
  int64_t experts = 0, top_k = 8;
  app.add_option("--experts", experts, "time grouped_linear over this many experts' dense weights")
      ->check(CLI::Range(int64_t{1}, int64_t{65535}));
  app.add_option("--top-k", top_k, "experts per token (with --experts)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (experts > 0 && top_k > experts) {
    std::fprintf(stderr, "bench_gemm: --top-k %lld exceeds --experts %lld\n", static_cast<long long>(top_k),
                 static_cast<long long>(experts));
    return 2;
  }
  if (experts > 0 && (!only_paths.empty() || !json_path.empty())) {
    std::fprintf(stderr, "bench_gemm: --experts times every grouped path; drop --paths and --json\n");
    return 2;
  }
  std::vector<std::array<int64_t, 2>> shapes;
  for (const std::string& name : shape_names) {
    int64_t n = 0, k = 0;
    char x = 0, rest = 0;
    if (std::sscanf(name.c_str(), "%" SCNd64 "%c%" SCNd64 "%c", &n, &x, &k, &rest) != 3 || x != 'x' || n <= 0 || k <= 0) {
      std::fprintf(stderr, "bench_gemm: --shapes %s: expected NxK with positive N and K, e.g. 14336x4096\n", name.c_str());
      return 2;
    }
    shapes.push_back({n, k});
  }

  try {
    const DType dt = lw::parse_dtype(dtype_name);
    const double elem = static_cast<double>(lw::dtype_size(dt));
    lw::Context ctx;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> dist(-1, 1);
    // Filled on the device: the dense weight sets of the largest shape are half a billion values.
    uint64_t seed = 7;
    auto random = [&](std::vector<int64_t> shape) {
      Tensor d = ctx.empty(shape, dt);
      lw::ops::fill_uniform(ctx, d, -1.0f, 1.0f, seed++);
      return d;
    };

    // Reference: a 1 GiB device-to-device copy, bytes read + written.
    const int64_t copy_elems = (int64_t{1} << 30) / static_cast<int64_t>(elem);
    Tensor src = ctx.empty({copy_elems}, dt), dst = ctx.empty({copy_elems}, dt);
    const double copy_ms = median_ms(ctx, repeats, 1, [&](int) {
      LW_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToDevice, ctx.stream().get()));
    });
    const double copy_gbs = 2.0 * static_cast<double>(src.nbytes()) / (copy_ms * 1e6);
    src = Tensor();
    dst = Tensor();

    std::optional<lw::ops::WeightFormat> format;
    for (int f = 0; f <= static_cast<int>(lw::ops::WeightFormat::gguf_q6_k); ++f) {
      const auto wf = static_cast<lw::ops::WeightFormat>(f);
      if (weights_name == lw::ops::weight_format_name(wf) &&
          (wf == lw::ops::WeightFormat::dense || wf == lw::ops::WeightFormat::int4 || lw::ops::is_gguf_block_format(wf) ||
           lw::ops::is_scaled_8bit_format(wf)))
        format = wf;
    }
    if (!format)
      throw std::runtime_error("--weights " + weights_name + " is not dense, int4, an 8-bit format or a GGUF block format");
    if (act_order && *format != lw::ops::WeightFormat::int4)
      throw std::runtime_error("--act-order needs --weights int4, not " + weights_name);
    const bool grouped = *format == lw::ops::WeightFormat::int8_per_group;
    const bool int8 = *format == lw::ops::WeightFormat::int8_per_channel;
    auto random_weight = [&](int64_t n, int64_t k) {
      if (*format == lw::ops::WeightFormat::dense) return lw::ops::Weight::dense(random({n, k}));
      if (*format == lw::ops::WeightFormat::int4) {
        const int64_t group = std::min<int64_t>(128, k);
        lw::ops::Int4Tensors t;
        t.n = n, t.k = k, t.group = group;
        auto words = [&](int64_t rows, int64_t cols) {
          Tensor h = Tensor::empty_host({rows, cols}, DType::i32);
          for (int64_t i = 0; i < h.numel(); ++i) h.data<int32_t>()[i] = static_cast<int32_t>(rng());
          return ctx.to_device(h);
        };
        t.qweight = words(k / 8, n);
        t.qzeros = words((k + group - 1) / group, n / 8);
        Tensor sc = Tensor::empty_host({(k + group - 1) / group, n}, DType::f32);
        for (int64_t i = 0; i < sc.numel(); ++i) sc.data<float>()[i] = (1.0f + 0.5f * dist(rng)) / 64.0f;
        t.scales = ctx.to_device(sc);
        if (act_order) {  // every group `group` columns, scattered over K
          std::vector<int64_t> cols(static_cast<size_t>(k));
          std::iota(cols.begin(), cols.end(), 0);
          std::shuffle(cols.begin(), cols.end(), rng);
          Tensor g = Tensor::empty_host({k}, DType::i32);
          for (int64_t i = 0; i < k; ++i) g.data<int32_t>()[cols[static_cast<size_t>(i)]] = static_cast<int32_t>(i / group);
          t.g_idx = ctx.to_device(g);
        }
        return lw::ops::int4_weight(ctx, t);
      }
      if (lw::ops::is_scaled_8bit_format(*format)) {
        // Random codes (no FP8 NaN: 0x7F and 0xFF become 0x7E and 0xFE) and scales near 1/448.
        Tensor q = Tensor::empty_host({n, k}, DType::i8);
        for (int64_t i = 0; i < n * k; ++i) {
          uint8_t b = static_cast<uint8_t>(rng() & 0xff);
          if (!int8 && !grouped && (b & 0x7f) == 0x7f) b ^= 1;
          q.data<int8_t>()[i] = static_cast<int8_t>(b);
        }
        const bool block = *format == lw::ops::WeightFormat::fp8_e4m3_per_block;
        const bool tensor = *format == lw::ops::WeightFormat::fp8_e4m3_per_tensor;
        const std::vector<int64_t> sshape = block     ? std::vector<int64_t>{(n + 127) / 128, (k + 127) / 128}
                                            : tensor  ? std::vector<int64_t>{1}
                                            : grouped ? std::vector<int64_t>{n, (k + 127) / 128}
                                                      : std::vector<int64_t>{n};
        Tensor sc = Tensor::empty_host(sshape, DType::f32);
        for (int64_t i = 0; i < sc.numel(); ++i) sc.data<float>()[i] = (1.0f + 0.5f * dist(rng)) / 448.0f;
        Tensor qd = ctx.to_device(q), sd = ctx.to_device(sc);
        if (block) return lw::ops::Weight::fp8_per_block(qd, sd, {128, 128});
        if (tensor) return lw::ops::Weight::fp8_per_tensor(qd, sd);
        if (grouped) return lw::ops::Weight::int8_per_group(qd, sd, 128);
        if (int8) return lw::ops::Weight::int8_per_channel(qd, sd);
        return lw::ops::Weight::fp8_per_channel(qd, sd);
      }
      const int64_t bytes = n * k / lw::ops::gguf_block_elems(*format) * lw::ops::gguf_block_bytes(*format);
      Tensor h = Tensor::empty_host({bytes}, DType::i8);
      for (int64_t i = 0; i < bytes; ++i) h.data<int8_t>()[i] = static_cast<int8_t>(rng() & 0xff);
      if (!unaligned) return lw::ops::Weight::gguf(*format, n, k, ctx.to_device(h));
      Tensor moved = ctx.empty({bytes + 2}, DType::i8).slice(0, 2, bytes + 2);
      moved.copy_from(h, ctx.stream().get());
      return lw::ops::Weight::gguf(*format, n, k, moved);
    };

    if (experts > 0) {
      std::printf("device %s, %s, %s experts, median of %d runs; copy %.0f GB/s\n", ctx.device_name().c_str(),
                  lw::dtype_name(dt), weights_name.c_str(), repeats, copy_gbs);
      bench_grouped(ctx, dt, shapes, ms, experts, top_k, repeats, copy_gbs, random,
                    *format != lw::ops::WeightFormat::dense ? std::function<lw::ops::Weight(int64_t, int64_t)>(random_weight)
                                                            : nullptr);
      return 0;
    }
    std::printf("device %s, %s, %s weights, median of %d runs; copy %.0f GB/s\n", ctx.device_name().c_str(),
                lw::dtype_name(dt), weights_name.c_str(), repeats, copy_gbs);
    std::printf("%6s %7s %6s  %-10s %9s %8s %8s %7s\n", "M", "N", "K", "path", "ms", "TFLOP/s", "W GB/s", "% copy");
    std::ofstream js;
    if (!json_path.empty()) js.open(json_path), js << "{\"device\": \"" << ctx.device_name() << "\", \"copy_gbs\": " << copy_gbs << ", \"results\": [";
    bool first = true;
    for (const auto& s : shapes) {
      const int64_t n = s[0], k = s[1];
      std::vector<lw::ops::Weight> w = {random_weight(n, k)};
      const double wbytes = static_cast<double>(w[0].device_bytes());
      // Enough weight sets to exceed the L2 cache several times over (at most kMostSets: a weight
      // under 1 MB is mostly served from the L2 whatever the count).
      const int sets = l2_resident ? 1 : std::clamp(static_cast<int>(std::ceil(256e6 / wbytes)), 2, kMostSets);
      while (static_cast<int>(w.size()) < sets) w.push_back(random_weight(n, k));
      for (int64_t m : ms) {
        Tensor x = random({m, k}), y = ctx.empty({m, n}, dt);
        std::vector<GemmPath> paths = {GemmPath::vendor};
        if (!int8 && (m <= lw::kernels::kGemvMaxRows || (*format != lw::ops::WeightFormat::dense && m <= 64)))
          paths.insert(paths.end(), {GemmPath::gemv, GemmPath::automatic});
        else if (int8)
          paths.push_back(GemmPath::automatic);
        paths.push_back(GemmPath::automatic);  // once more, last, in deterministic mode
        auto wanted = [&](const std::string& name) {
          return only_paths.empty() || std::find(only_paths.begin(), only_paths.end(), name) != only_paths.end();
        };
        // The fused int4 kernels forced (ring, streamed) where the streamed one serves, at ops'
        // splits or each of --splits, with a workspace and (up to 4 rows) counters; the Hopper
        // kernel (which adds its splits by a second launch, counters or not) where it is built
        // and the device has it.
        const lw::kernels::Int4Matrix shape{nullptr, nullptr, nullptr, n, k, std::min<int64_t>(128, k)};
        std::vector<int> split_counts = forced_splits;
        if (*format == lw::ops::WeightFormat::int4 && split_counts.empty())
          split_counts.push_back(lw::kernels::int4_gemm_splits(shape, ctx.caps().multiprocessors));
        if (*format != lw::ops::WeightFormat::int4) split_counts.clear();
        for (const auto& [forced_name, forced] : {std::pair{"ring", lw::kernels::Int4GemmKernel::ring},
                                                   std::pair{"streamed", lw::kernels::Int4GemmKernel::streamed},
                                                   std::pair{"hopper", lw::kernels::Int4GemmKernel::hopper}}) {
          const bool hopper = forced == lw::kernels::Int4GemmKernel::hopper;
          for (const int listed : split_counts) {
            if (!wanted(forced_name)) continue;
            const bool one_split = hopper && m > lw::kernels::kInt4GemmMaxRows;
            if (one_split && listed != split_counts.front()) continue;
            const int splits = one_split ? 1 : listed;
            if (hopper ? !(lw::kernels::kInt4HopperBuilt && ctx.caps().matrix.wgmma && lw::kernels::int4_hopper_serves(shape))
                       : !lw::kernels::int4_gemv_serves(shape, m, splits))
              continue;
            Tensor ws = ctx.empty({splits * m * n}, DType::f32);
            Tensor counters = ctx.to_device(Tensor::empty_host({lw::kernels::int4_gemm_counters(shape, m)}, DType::i32));
            LW_CUDA_CHECK(cudaMemsetAsync(counters.data_ptr(), 0, counters.nbytes(), ctx.stream().get()));
            const double t = median_ms(ctx, repeats, sets, [&](int i) {
              lw::kernels::Int4Matrix wm{w[i].data().data_ptr(), w[i].scales().data<float>(),
                                         static_cast<const uint8_t*>(w[i].zeros().data_ptr()), n, k, shape.group};
              lw::ops::dispatch_float(dt, "bench_gemm", [&]<class T>() {
                if constexpr (!std::is_same_v<T, float>)
                  lw::kernels::int4_gemm<T>(y.data<T>(), x.data<T>(), wm, nullptr, m, k, n, splits,
                                            splits > 1 ? ws.data<float>() : nullptr,
                                            splits > 1 && m <= 4 ? counters.data<int32_t>() : nullptr, ctx.warp_size(),
                                            ctx.stream().get(), forced);
              });
            });
            const double gbs = wbytes / (t * 1e6);
            const std::string name = std::string(forced_name) + "/" + std::to_string(splits);
            std::printf("%6lld %7lld %6lld  %-10s %9.4f %8.1f %8.0f %6.1f%%\n", static_cast<long long>(m),
                        static_cast<long long>(n), static_cast<long long>(k), name.c_str(), t,
                        2.0 * static_cast<double>(m * n * k) / (t * 1e9), gbs, 100 * gbs / copy_gbs);
          }
        }
        for (size_t pi = 0; pi < paths.size(); ++pi) {
          const GemmPath p = paths[pi];
          const bool deterministic = pi + 1 == paths.size();
          if (!wanted(deterministic ? "deterministic" : p == GemmPath::vendor ? "vendor" : lw::ops::gemm_path_name(p))) continue;
          ctx.set_deterministic(deterministic);
          const double t = median_ms(ctx, repeats, sets, [&](int i) { lw::ops::linear(ctx, x, w[i], Tensor(), y, p); });
          ctx.set_deterministic(false);
          const char* name = deterministic ? "determin." : lw::ops::gemm_path_name(p);
          const double tflops = 2.0 * static_cast<double>(m * n * k) / (t * 1e9);
          const double gbs = wbytes / (t * 1e6);
          std::printf("%6lld %7lld %6lld  %-10s %9.4f %8.1f %8.0f %6.1f%%\n", static_cast<long long>(m), static_cast<long long>(n),
                      static_cast<long long>(k), name, t, tflops, gbs, 100 * gbs / copy_gbs);
          if (js.is_open()) {
            js << (first ? "" : ", ") << "{\"m\": " << m << ", \"n\": " << n << ", \"k\": " << k << ", \"path\": \""
               << (deterministic ? "deterministic" : lw::ops::gemm_path_name(p)) << "\", \"ms\": " << t << ", \"tflops\": " << tflops << ", \"weight_gbs\": " << gbs << "}";
            first = false;
          }
        }
        if (lw::ops::is_scaled_8bit_format(*format) && !int8 && !grouped) {
          // The W8A8 path's share: x quantised to e4m3 alone (per 128 columns for block weights).
          const int64_t group = *format == lw::ops::WeightFormat::fp8_e4m3_per_block ? 128 : k;
          Tensor xq = ctx.empty({m, k}, DType::i8), xs = ctx.empty({k / group, m}, DType::f32);
          const double t = median_ms(ctx, repeats, sets, [&](int) { lw::ops::quantize_fp8(ctx, x, group, xq, xs); });
          std::printf("%6lld %7lld %6lld  %-10s %9.4f\n", static_cast<long long>(m), static_cast<long long>(n),
                      static_cast<long long>(k), "quantize", t);
        }
      }
    }
    if (js.is_open()) js << "]}\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
