// Times the memory-bound ops on the device with events and prints achieved bandwidth beside
// the device-to-device copy bandwidth measured in the same run. Inputs are random, and
// several input sets rotate so that the L2 cache is not what is measured.
//     bench_ops [--rows N] [--cols N] [--dtype bf16] [--repeats N] [--json FILE]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/quant.h"
#include "ops/rope.h"
#include "ops/softmax.h"

namespace {

using lw::DType;
using lw::Tensor;

struct Result {
  std::string op;
  double ms;
  double bytes;
};

// Median of `repeats` timed runs (after warm-up); run(i) uses input set i % sets.
double median_ms(lw::Context& ctx, int repeats, int sets, const std::function<void(int)>& run) {
  for (int i = 0; i < sets; ++i) run(i);
  ctx.synchronize();
  std::vector<double> t;
  lw::Event start, stop;
  for (int i = 0; i < repeats; ++i) {
    start.record(ctx.stream());
    run(i % sets);
    stop.record(ctx.stream());
    stop.synchronize();
    t.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_ops: bandwidth of lightwave's memory-bound ops"};
  int64_t rows = 32768, cols = 4096;
  std::string dtype_name = "bf16", json_path;
  int repeats = 50;
  app.add_option("--rows", rows, "rows (tokens)")->check(CLI::PositiveNumber);
  app.add_option("--cols", cols, "columns (hidden size)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype_name, "f32, f16 or bf16");
  app.add_option("--repeats", repeats, "timed runs per op")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    const DType dt = lw::parse_dtype(dtype_name);
    lw::Context ctx;
    const int sets = 2;
    const double elem = static_cast<double>(lw::dtype_size(dt));
    const double n = static_cast<double>(rows) * static_cast<double>(cols);

    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> dist(-2, 2);
    auto random = [&](std::vector<int64_t> shape) {
      Tensor f = Tensor::empty_host(shape, DType::f32);
      for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = dist(rng);
      Tensor d32 = ctx.to_device(f), d = ctx.empty(shape, dt);
      lw::ops::cast(ctx, d32, d);
      return d;
    };
    std::vector<Tensor> x, r, y, g;
    for (int i = 0; i < sets; ++i) {
      x.push_back(random({rows, cols}));
      r.push_back(random({rows, cols}));
      y.push_back(ctx.empty({rows, cols}, dt));
      g.push_back(random({rows, 2 * cols}));
    }
    Tensor w = random({cols});

    std::vector<Result> results;
    // Reference: a device-to-device copy of the same size, bytes read + written.
    results.push_back({"copy (reference)", median_ms(ctx, repeats, sets, [&](int i) {
                         LW_CUDA_CHECK(cudaMemcpyAsync(y[i].data_ptr(), x[i].data_ptr(), x[i].nbytes(),
                                                       cudaMemcpyDeviceToDevice, ctx.stream().get()));
                       }),
                       2 * n * elem});
    results.push_back({"rms_norm", median_ms(ctx, repeats, sets, [&](int i) { lw::ops::rms_norm(ctx, x[i], w, 1e-6f, y[i]); }),
                       2 * n * elem});
    results.push_back({"add_rms_norm (fused)",
                       median_ms(ctx, repeats, sets, [&](int i) { lw::ops::add_rms_norm(ctx, x[i], r[i], w, 1e-6f, y[i]); }),
                       4 * n * elem});
    results.push_back({"layer_norm", median_ms(ctx, repeats, sets, [&](int i) { lw::ops::layer_norm(ctx, x[i], w, w, 1e-5f, y[i]); }),
                       2 * n * elem});
    results.push_back({"softmax", median_ms(ctx, repeats, sets, [&](int i) { lw::ops::softmax(ctx, x[i], y[i]); }),
                       2 * n * elem});
    results.push_back({"silu_mul", median_ms(ctx, repeats, sets, [&](int i) {
                         lw::ops::act_mul(ctx, lw::ops::Activation::silu, g[i], y[i]);
                       }),
                       3 * n * elem});
    results.push_back({"add", median_ms(ctx, repeats, sets, [&](int i) { lw::ops::add(ctx, x[i], r[i], y[i]); }),
                       3 * n * elem});

    Tensor q8 = ctx.empty({rows, cols}, DType::i8), qs = ctx.empty({rows}, DType::f32);
    Tensor gs = ctx.empty({rows, cols / 128}, DType::f32);
    results.push_back({"quantize_per_token (int8)",
                       median_ms(ctx, repeats, sets, [&](int i) { lw::ops::quantize_per_token(ctx, x[i], q8, qs); }),
                       n * elem + n + 4.0 * static_cast<double>(rows)});
    results.push_back({"quantize_per_group 128",
                       median_ms(ctx, repeats, sets, [&](int i) { lw::ops::quantize_per_group(ctx, x[i], 128, q8, gs); }),
                       n * elem + n + 4.0 * n / 128});

    // RoPE on q and k of a Llama-3-8B-shaped fused QKV output: 32 query and 8 key/value heads
    // of 128; q and k are read and written once (v untouched).
    const int64_t qh = 32, kh = 8, hd = 128, width = (qh + 2 * kh) * hd;
    lw::ops::RopeConfig rc;
    rc.rotary_dim = 128;
    rc.theta = 500000;
    lw::ops::Rope rope(ctx, rc);
    Tensor pos_h = Tensor::empty_host({rows}, DType::i64);
    for (int64_t t = 0; t < rows; ++t) pos_h.data<int64_t>()[t] = t % 8192;
    Tensor positions = ctx.to_device(pos_h);
    std::vector<Tensor> qkv;
    for (int i = 0; i < sets; ++i) qkv.push_back(random({rows, width}));
    results.push_back({"rope (q and k, 32+8 heads)", median_ms(ctx, repeats, sets, [&](int i) {
                         rope.apply(ctx, qkv[i].slice(1, 0, qh * hd).unflatten(1, {qh, hd}),
                                    qkv[i].slice(1, qh * hd, (qh + kh) * hd).unflatten(1, {kh, hd}), positions);
                       }),
                       2.0 * static_cast<double>(rows) * static_cast<double>((qh + kh) * hd) * elem});

    // Decode attention, Llama-3-8B heads (32 query, 8 key/value, 128 dims): 16 sequences of
    // 4096 tokens in 16-token blocks spread over the cache; bytes: the K and V read.
    {
      const int seqs = 16, context = 4096, bs = 16, blocks_per_seq = context / bs;
      const int64_t num_blocks = static_cast<int64_t>(seqs) * blocks_per_seq;
      Tensor kc = random({num_blocks, bs, kh, hd}), vc = random({num_blocks, bs, kh, hd});
      Tensor tables_h = Tensor::empty_host({seqs, blocks_per_seq}, DType::i32), lens_h = Tensor::empty_host({seqs}, DType::i32);
      for (int s = 0; s < seqs; ++s) {
        lens_h.data<int32_t>()[s] = context;
        for (int b = 0; b < blocks_per_seq; ++b) tables_h.data<int32_t>()[s * blocks_per_seq + b] = b * seqs + s;  // interleaved
      }
      Tensor tables = ctx.to_device(tables_h), lens = ctx.to_device(lens_h);
      Tensor qd = random({seqs, qh, hd}), od = ctx.empty({seqs, qh, hd}, dt);
      results.push_back({"decode_attention 16x4096", median_ms(ctx, repeats, 1, [&](int) {
                           lw::ops::decode_attention(ctx, qd, kc, vc, tables, lens, context, 0.0883883f, od);
                         }),
                         2.0 * num_blocks * bs * kh * hd * elem});
    }

    const double copy_gbs = results[0].bytes / (results[0].ms * 1e6);
    std::printf("device %s, %s [%lld, %lld], median of %d runs over %d input sets\n", ctx.device_name().c_str(),
                lw::dtype_name(dt), static_cast<long long>(rows), static_cast<long long>(cols), repeats, sets);
    std::printf("%-24s %10s %10s %10s\n", "op", "ms", "GB/s", "% copy");
    for (const Result& res : results) {
      const double gbs = res.bytes / (res.ms * 1e6);
      std::printf("%-24s %10.4f %10.0f %9.1f%%\n", res.op.c_str(), res.ms, gbs, 100 * gbs / copy_gbs);
    }
    if (!json_path.empty()) {
      std::ofstream js(json_path);
      js << "{\"device\": \"" << ctx.device_name() << "\", \"dtype\": \"" << lw::dtype_name(dt) << "\", \"rows\": " << rows
         << ", \"cols\": " << cols << ", \"results\": [";
      for (size_t i = 0; i < results.size(); ++i) {
        js << (i ? ", " : "") << "{\"op\": \"" << results[i].op << "\", \"ms\": " << results[i].ms
           << ", \"gbs\": " << results[i].bytes / (results[i].ms * 1e6) << "}";
      }
      js << "]}\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
