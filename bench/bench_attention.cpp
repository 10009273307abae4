// Times attention on the device with events and prints a table: causal prefill of one sequence
// (TFLOP/s, FLOPs = 2 * 2 * L^2 * head_dim * q_heads / 2) and paged decode as the model runs it
// (prefill_attention with one new token per sequence; GB/s of K and V read, and % of a
// device-to-device copy measured in the same run), for each attention path the
// device has. Llama-3-8B heads: 32 query, 8 key/value, 128 dims, bf16, 16-token cache blocks;
// the cache in bf16 or 8-bit codes (--kv-cache-dtype: GB/s then count the codes and scales).
//     bench_attention [--repeats N] [--prefill 512,2048,8192] [--decode 1x4096,16x4096,64x640,128x2048]
//                     [--kv-cache-dtype auto|fp8|int8] [--json FILE]
// --decode: SEQUENCESxCONTEXT cases (the batch-1 decode step at 8k context is 1x8192).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/context.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

namespace {

using lw::DType;
using lw::Tensor;
namespace ops = lw::ops;

double median_ms(lw::Context& ctx, int repeats, const std::function<void()>& run) {
  run();
  ctx.synchronize();
  std::vector<double> t;
  lw::Event start, stop;
  for (int i = 0; i < repeats; ++i) {
    start.record(ctx.stream());
    run();
    stop.record(ctx.stream());
    stop.synchronize();
    t.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// "16x4096" -> {16, 4096}; anything else is refused with the case named.
std::pair<int, int> parse_decode_case(const std::string& s) {
  const size_t x = s.find('x');
  size_t used_seqs = 0, used_ctx = 0;
  int seqs = 0, context = 0;
  try {
    if (x != std::string::npos) {
      seqs = std::stoi(s.substr(0, x), &used_seqs);
      context = std::stoi(s.substr(x + 1), &used_ctx);
    }
  } catch (const std::exception&) {
    seqs = 0;
  }
  if (x == std::string::npos || used_seqs != x || used_ctx != s.size() - x - 1 || seqs < 1 || context < 1)
    throw std::invalid_argument("--decode case '" + s + "': expected SEQUENCESxCONTEXT with both positive, e.g. 16x4096");
  return {seqs, context};
}

struct Row {
  std::string what, path;
  double ms, tflops, gbs;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_attention: prefill and decode attention, every path"};
  int repeats = 20;
  std::vector<int> prefill = {512, 2048, 8192};
  std::vector<std::string> decode = {"1x4096", "16x4096", "64x640", "128x2048"};
  std::string json_path, kv_dtype = "auto";
  app.add_option("--repeats", repeats, "timed runs per case")->check(CLI::PositiveNumber);
  app.add_option("--kv-cache-dtype", kv_dtype, "the cache's format: auto (bf16), fp8 or int8");
  app.add_option("--prefill", prefill, "prompt lengths of the prefill cases")->delimiter(',');
  app.add_option("--decode", decode, "decode cases, SEQUENCESxCONTEXT (one new token per sequence)")->delimiter(',');
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<std::pair<int, int>> decode_cases;  // checked before any device work
    for (const std::string& d : decode) decode_cases.push_back(parse_decode_case(d));
    const DType dt = DType::bf16;
    const int qh = 32, kh = 8, hd = 128, bs = 16;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    lw::Context ctx;
    const ops::KvCacheFormat format = ops::parse_kv_cache_format(kv_dtype);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> dist(-2, 2);
    auto random = [&](std::vector<int64_t> shape) {
      Tensor f = Tensor::empty_host(shape, DType::f32);
      for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = dist(rng);
      Tensor d32 = ctx.to_device(f), d = ctx.empty(shape, dt);
      ops::cast(ctx, d32, d);
      return d;
    };
    // A cache of `seqs` sequences of `context` tokens, blocks interleaved across sequences; 8-bit
    // caches written from random values through kv_write (e4m3 scales 1 per head).
    struct Cache {
      ops::PagedKv kv;
      Tensor tables;
    };
    auto make_cache = [&](int seqs, int context) {
      const int per = (context + bs - 1) / bs;
      const int64_t blocks = int64_t(seqs) * per;
      Cache c;
      if (format == ops::KvCacheFormat::model) {
        c.kv = {random({blocks, bs, kh, hd}), random({blocks, bs, kh, hd})};
      } else {
        c.kv = {ctx.empty({blocks, bs, kh, hd}, DType::i8), ctx.empty({blocks, bs, kh, hd}, DType::i8), format};
        const std::vector<int64_t> scale_shape =
            format == ops::KvCacheFormat::int8 ? std::vector<int64_t>{blocks, bs, kh} : std::vector<int64_t>{kh};
        Tensor ones = Tensor::empty_host(scale_shape, DType::f32);
        std::fill_n(ones.data<float>(), ones.numel(), 1.0f);
        c.kv.k_scale = ctx.to_device(ones);
        c.kv.v_scale = ctx.to_device(ones);
        Tensor slots = Tensor::empty_host({blocks * bs}, DType::i64);
        for (int64_t i = 0; i < blocks * bs; ++i) slots.data<int64_t>()[i] = i;
        const Tensor slots_d = ctx.to_device(slots);
        for (int64_t t0 = 0; t0 < blocks * bs; t0 += 65536) {  // values for 64k tokens at a time
          const int64_t n = std::min<int64_t>(65536, blocks * bs - t0);
          ops::kv_write(ctx, random({n, kh, hd}), random({n, kh, hd}), slots_d.slice(0, t0, t0 + n), c.kv);
        }
      }
      Tensor t = Tensor::empty_host({seqs, per}, DType::i32);
      for (int s = 0; s < seqs; ++s)
        for (int b = 0; b < per; ++b) t.data<int32_t>()[s * per + b] = b * seqs + s;
      c.tables = ctx.to_device(t);
      return c;
    };
    // Bytes of one token's keys and values in the cache (with int8's scales).
    const double token_bytes = 2.0 * kh * (hd * double(ops::kv_cache_element_bytes(format, dt)) +
                                           (format == ops::KvCacheFormat::int8 ? 4 : 0));
    const auto paths = ops::available_paths<ops::AttentionPaths>(ctx.caps());
    std::vector<Row> rows;

    // Reference copy bandwidth: 1 GiB read + written.
    const int64_t copy_n = int64_t(1) << 29;
    Tensor src = ctx.empty({copy_n}, dt), dst = ctx.empty({copy_n}, dt);
    LW_CUDA_CHECK(cudaMemsetAsync(src.data_ptr(), 0, src.nbytes(), ctx.stream().get()));
    const double copy_ms = median_ms(ctx, repeats, [&] {
      LW_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                    ctx.stream().get()));
    });
    const double copy_gbs = 2.0 * static_cast<double>(src.nbytes()) / (copy_ms * 1e6);
    src = Tensor();
    dst = Tensor();

    for (int len : prefill) {
      Cache c = make_cache(1, len);
      Tensor q = random({len, qh, hd}), out = ctx.empty({len, qh, hd}, dt);
      const ops::PrefillPlan plan = ops::plan_prefill(ctx, {len}, {len}, qh / kh);
      const double flops = 4.0 * double(len) * double(len) * hd * qh / 2;
      for (ops::AttentionPath path : paths) {
        const int reps = path == ops::AttentionPath::portable && len > 2048 ? 3 : repeats;
        const double ms = median_ms(ctx, reps, [&] {
          ops::prefill_attention(ctx, q, c.kv, c.tables, plan, scale, out, {}, path);
        });
        rows.push_back({"prefill causal 1x" + std::to_string(len), ops::path_name<ops::AttentionPaths>(path), ms,
                        flops / (ms * 1e9), 0});
      }
    }
    for (auto [seqs, context] : decode_cases) {
      Cache c = make_cache(seqs, context);
      Tensor q = random({seqs, qh, hd}), out = ctx.empty({seqs, qh, hd}, dt);
      const double bytes = seqs * double(context) * token_bytes;
      // As the model runs a decode step: prefill_attention with one new token per sequence.
      const ops::PrefillPlan plan =
          ops::plan_prefill(ctx, std::vector<int32_t>(seqs, 1), std::vector<int32_t>(seqs, context), qh / kh);
      for (ops::AttentionPath path : paths) {
        const double ms = median_ms(ctx, repeats, [&] {
          ops::prefill_attention(ctx, q, c.kv, c.tables, plan, scale, out, {}, path);
        });
        rows.push_back({"decode " + std::to_string(seqs) + "x" + std::to_string(context),
                        ops::path_name<ops::AttentionPaths>(path), ms, 0, bytes / (ms * 1e6)});
      }
    }

    std::printf("device %s, bf16, 32 q / 8 kv heads of 128, KV cache %s; copy %.0f GB/s; median of %d runs\n",
                ctx.device_name().c_str(), ops::kv_cache_format_name(format), copy_gbs, repeats);
    std::printf("%-24s %-9s %10s %9s %9s %8s\n", "case", "path", "ms", "TFLOP/s", "GB/s", "% copy");
    for (const Row& r : rows) {
      std::printf("%-24s %-9s %10.4f %9.1f %9.0f %7.1f%%\n", r.what.c_str(), r.path.c_str(), r.ms, r.tflops, r.gbs,
                  100 * r.gbs / copy_gbs);
    }
    if (!json_path.empty()) {
      std::ofstream js(json_path);
      js << "{\"device\": \"" << ctx.device_name() << "\", \"kv_cache_dtype\": \"" << ops::kv_cache_format_name(format)
         << "\", \"copy_gbs\": " << copy_gbs << ", \"results\": [";
      for (size_t i = 0; i < rows.size(); ++i) {
        js << (i ? ", " : "") << "{\"case\": \"" << rows[i].what << "\", \"path\": \"" << rows[i].path
           << "\", \"ms\": " << rows[i].ms << ", \"tflops\": " << rows[i].tflops << ", \"gbs\": " << rows[i].gbs << "}";
      }
      js << "]}\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}
