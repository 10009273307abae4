#include "app/bench.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "app/engine_flags.h"
#include "app/parallel.h"
#include "core/context.h"
#include "core/stream.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "weights/random_blocks.h"

namespace lw::app {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model, shape, dtype = "bf16", json, weights = "dense", kv_cache_dtype = "auto";
  int requests = 64, input_len = 512, output_len = 256;
  int64_t max_batch_tokens = 2048, max_sequences = 256;
  double kv_fraction = 0.9;
  uint64_t seed = 1;
  bool skip_latency = false, skip_throughput = false, deterministic = false;
  ParallelArgs parallel;
} args;

// --weights: dense, fp8 (128 x 128 block scales), int8 (per-row scales), int4 (GPTQ, group 128),
// the GGML block type of the random projections (q4_0 ... q6_k), or q4_k_m (llama.cpp's Q4_K_M
// mix of Q4_K and Q6_K by tensor over the shape's layers).
model::RandomProjections random_projections(const std::string& name, int layers) {
  if (name == "dense") return weights::FileDType::f32;
  if (name == "fp8") return weights::FileDType::f8_e4m3;
  if (name == "int8") return weights::FileDType::i8;
  if (name == "int4") return weights::FileDType::i32;  // 4-bit GPTQ words, group 128
  if (name == "q4_k_m") return model::RandomProjections::q4_k_m(layers);
  std::string names = "dense, fp8, int8, int4, q4_k_m";
  for (int t = 0; t < static_cast<int>(weights::FileDType::unsupported); ++t) {
    const auto type = static_cast<weights::FileDType>(t);
    if (!weights::has_random_blocks(type)) continue;
    if (name == weights::file_dtype_name(type)) return type;
    names += std::string(", ") + weights::file_dtype_name(type);
  }
  LW_FAIL("bench: --weights " << name << " is not one of " << names);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Where a run's steps went (engine::StepTimer), printed and as JSON. The rest of the wall is
// what no window covers (negative where a step without sampling ran on while the host went on).
nlohmann::json report_steps(const char* run, const engine::StepTimes& s) {
  auto per = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  const double accounted = s.schedule_ms + s.decode_forward_ms + s.prefill_forward_ms + s.sampling_ms + s.outputs_ms;
  std::printf("%s: %lld steps, %.1f ms of host wall in them\n"
              "  decode-only steps  %6lld, mean %.1f sequences: forward %.1f ms (%.3f ms a step)\n"
              "  steps with prompts %6lld, %lld tokens:       forward %.1f ms (%.3f ms a step)\n"
              "  sampling (the forward pass's end to the tokens on the host) %.1f ms (%.3f ms a step)\n"
              "  host: scheduling %.1f ms, outputs and retirement %.1f ms; forward calls %.1f ms (within the forward "
              "windows); the rest of the wall %.1f ms\n",
              run, static_cast<long long>(s.steps), s.wall_ms, static_cast<long long>(s.decode_steps),
              per(static_cast<double>(s.decode_rows), s.decode_steps), s.decode_forward_ms,
              per(s.decode_forward_ms, s.decode_steps), static_cast<long long>(s.prefill_steps),
              static_cast<long long>(s.prefill_tokens), s.prefill_forward_ms, per(s.prefill_forward_ms, s.prefill_steps),
              s.sampling_ms, per(s.sampling_ms, s.decode_steps + s.prefill_steps), s.schedule_ms, s.outputs_ms,
              s.forward_call_ms, s.wall_ms - accounted);
  return {{"steps", s.steps},
          {"decode_steps", s.decode_steps},
          {"decode_rows", s.decode_rows},
          {"prefill_steps", s.prefill_steps},
          {"prefill_tokens", s.prefill_tokens},
          {"decode_forward_ms", s.decode_forward_ms},
          {"prefill_forward_ms", s.prefill_forward_ms},
          {"sampling_ms", s.sampling_ms},
          {"schedule_ms", s.schedule_ms},
          {"forward_call_ms", s.forward_call_ms},
          {"outputs_ms", s.outputs_ms},
          {"wall_ms", s.wall_ms}};
}

// Device-to-device copy bandwidth (bytes read + written), the roofline's reference.
double copy_gbs(Context& ctx) {
  const int64_t bytes = int64_t{256} << 20;
  Tensor a = ctx.empty({bytes}, DType::i8), b = ctx.empty({bytes}, DType::i8);
  Event start, stop;
  LW_CUDA_CHECK(cudaMemcpyAsync(b.data_ptr(), a.data_ptr(), bytes, cudaMemcpyDeviceToDevice, ctx.stream().get()));
  start.record(ctx.stream());
  const int reps = 10;
  for (int i = 0; i < reps; ++i)
    LW_CUDA_CHECK(cudaMemcpyAsync(b.data_ptr(), a.data_ptr(), bytes, cudaMemcpyDeviceToDevice, ctx.stream().get()));
  stop.record(ctx.stream());
  stop.synchronize();
  return 2.0 * static_cast<double>(bytes) * reps / (static_cast<double>(stop.elapsed_ms_since(start)) * 1e6);
}

struct Timing {
  Clock::time_point added, first, last;
  int tokens = 0;
  bool finished = false;
};

engine::Request random_request(std::mt19937_64& rng, int64_t vocab) {
  engine::Request r;
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  for (int i = 0; i < args.input_len; ++i) r.prompt.push_back(tok(rng));
  r.max_tokens = args.output_len;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

// Runs n requests at once; returns their timings and the wall time.
std::vector<Timing> run_requests(engine::Engine& e, int n, int64_t vocab, std::mt19937_64& rng, double& wall) {
  std::vector<Timing> t(static_cast<size_t>(n));
  const bool bar = isatty(STDERR_FILENO) && n > 1;
  int done = 0;
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    t[static_cast<size_t>(i)].added = Clock::now();
    e.add(random_request(rng, vocab), [&t, i, &done](const engine::RequestOutput& o) {
      Timing& x = t[static_cast<size_t>(i)];
      if (!o.tokens.empty()) {
        if (x.tokens == 0) x.first = Clock::now();
        x.last = Clock::now();
        x.tokens += static_cast<int>(o.tokens.size());
      }
      if (o.finished) x.finished = true, ++done;
    });
  }
  while (e.step()) {
    if (bar) std::fprintf(stderr, "\r%d / %d requests done", done, n);
  }
  if (bar) std::fprintf(stderr, "\n");
  wall = seconds_since(start);
  return t;
}

// Seconds of one batch-1 decode forward pass at context `position`, waited for: the engine's
// step without its scheduling and sampling. It writes K/V into the first blocks of the cache,
// which the engine (idle, without prefix caching) does not keep.
double decode_forward_seconds(engine::ModelRunner& m, int64_t position) {
  const int bs = 16;
  std::vector<int32_t> blocks(static_cast<size_t>(model::KvCache::blocks_for(position + 1, bs)));
  std::iota(blocks.begin(), blocks.end(), 0);
  LW_CHECK(static_cast<int64_t>(blocks.size()) <= m.cache_blocks(), "bench: the KV cache is too small");
  const std::vector<int32_t> token = {1};
  const std::vector<model::SequenceChunk> step = {{token, position, blocks}};
  auto once = [&] {
    m.forward(step);
    m.context().synchronize();
  };
  for (int i = 0; i < 3; ++i) once();
  const int reps = 20;
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) once();
  return seconds_since(start) / reps;
}

int run() {
  Context ctx;
  const DType dtype = parse_dtype(args.dtype);
  std::unique_ptr<engine::LoadedModel> gen;
  std::unique_ptr<engine::ModelRunner> random_model;
  engine::ModelRunner* m = nullptr;
  std::string what;
  const int tp = args.parallel.tensor_parallel;
  if (!args.shape.empty()) {
    const model::ModelConfig config = model::ModelConfig::named(args.shape);
    const model::RandomProjections blocks = random_projections(args.weights, static_cast<int>(config.layers));
    random_model = engine::make_runner(ctx, args.parallel.placement(), [&](Context& c, const model::Shard& shard) {
      return model::Model::random(c, config, dtype, args.seed, shard, blocks);
    });
    m = random_model.get();
    what = args.shape + " (random " + (args.weights == "dense" ? std::string("") : args.weights + " ") + "weights)";
  } else {
    LW_CHECK(!args.model.empty(), "bench: give --model PATH or --shape NAME");
    LW_CHECK(args.weights == "dense", "bench: --weights " << args.weights
                                                          << " applies to the random weights of --shape; a model's "
                                                             "weights are as its files store them (LW_WEIGHT_STORAGE)");
    gen = std::make_unique<engine::LoadedModel>(ctx, args.model, dtype, args.parallel.placement());
    m = &gen->runner();
    what = args.model;
  }
  if (follow_if_not_leader(*m)) return 0;
  if (tp > 1) what += ", tensor parallel " + std::to_string(tp);
  const model::ModelConfig& c = m->config();
  const double bw = copy_gbs(ctx);
  engine::EngineOptions opt;
  opt.memory_fraction = args.kv_fraction;
  opt.max_batch_tokens = args.max_batch_tokens;
  opt.max_sequences = args.max_sequences;
  opt.time_steps = true;
  opt.prefix_caching = false;  // random prompts share nothing; keep the measurement pure
  opt.deterministic = args.deterministic;
  opt.kv_cache_format = ops::parse_kv_cache_format(args.kv_cache_dtype);
  engine::Engine e(*m, nullptr, {}, opt);
  std::mt19937_64 rng(args.seed);
  nlohmann::json out = {{"model", what}, {"device", ctx.device_name()}, {"dtype", args.dtype},
                        {"copy_gbs", bw}, {"kv_blocks", e.num_blocks()}, {"input_len", args.input_len},
                        {"output_len", args.output_len}, {"tensor_parallel", tp},
                        {"deterministic", args.deterministic},
                        {"kv_cache_dtype", ops::kv_cache_format_name(opt.kv_cache_format)}};
  std::printf("lightwave bench: %s, %s on %s%s; copy %.0f GB/s; KV cache %lld blocks of 16 (%s)\n", what.c_str(),
              args.dtype.c_str(), ctx.device_name().c_str(), args.deterministic ? ", deterministic" : "", bw,
              static_cast<long long>(e.num_blocks()), ops::kv_cache_format_name(opt.kv_cache_format));

  // Warm-up: library heuristics, the GEMM path choice and first-use allocations are not timed;
  // prompts of the measured length, so that the shapes of their prefill are among them.
  double wall = 0;
  {
    const int outl = args.output_len;
    args.output_len = std::min(outl, 4);
    run_requests(e, 2, c.vocab, rng, wall);
    args.output_len = outl;
  }

  if (!args.skip_latency) {
    e.reset_step_times();
    const std::vector<Timing> t = run_requests(e, 1, c.vocab, rng, wall);
    const double ttft = std::chrono::duration<double>(t[0].first - t[0].added).count();
    const double tpot = std::chrono::duration<double>(t[0].last - t[0].first).count() / std::max(1, t[0].tokens - 1);
    // Bytes one decode step reads: every weight but the embedding table (one row of it) and
    // the routed experts the token does not choose, and the K/V of the context at its mean
    // length (in the cache's format); with tensor parallelism each rank reads its share over
    // its own copy bandwidth.
    const double embed = c.tie_embeddings ? 0.0 : static_cast<double>(c.vocab * c.hidden) * static_cast<double>(dtype_size(dtype));
    const double unrouted = c.experts == 0 ? 0.0
                                           : static_cast<double>(m->routed_expert_bytes()) *
                                                 (1.0 - static_cast<double>(c.experts_per_token) / c.experts);
    const double kv = static_cast<double>(model::KvCache::block_bytes(c, dtype, 1, opt.kv_cache_format)) *
                      (args.input_len + args.output_len / 2.0);
    const double step_bytes = static_cast<double>(m->weight_bytes()) - embed - unrouted + kv;
    const double roofline = bw * 1e9 * tp / step_bytes;
    std::printf("batch 1: TTFT %.1f ms (%d prompt tokens), TPOT %.2f ms = %.1f tokens/s; roofline %.1f tokens/s "
                "(%.2f GB per step) -> %.1f%%\n",
                ttft * 1e3, args.input_len, tpot * 1e3, 1.0 / tpot, roofline, step_bytes / 1e9, 100.0 / tpot / roofline);
    const double forward = decode_forward_seconds(*m, args.input_len + args.output_len / 2);
    std::printf("batch 1: the forward pass alone %.2f ms (%.0f%% of the step; the rest is scheduling, sampling and "
                "streaming)\n",
                forward * 1e3, 100.0 * forward / tpot);
    out["latency"] = {{"ttft_ms", ttft * 1e3}, {"tpot_ms", tpot * 1e3}, {"tokens_per_s", 1.0 / tpot},
                      {"roofline_tokens_per_s", roofline}, {"roofline_percent", 100.0 / tpot / roofline},
                      {"bytes_per_step", step_bytes}, {"forward_ms", forward * 1e3}};
    out["latency"]["steps"] = report_steps("batch 1 steps", e.step_times());
  }
  if (!args.skip_throughput) {
    const auto steps0 = e.stats().steps;
    e.reset_step_times();
    const std::vector<Timing> t = run_requests(e, args.requests, c.vocab, rng, wall);
    double ttft = 0, tpot = 0;
    int64_t generated = 0;
    for (const Timing& x : t) {
      ttft += std::chrono::duration<double>(x.first - x.added).count();
      tpot += std::chrono::duration<double>(x.last - x.first).count() / std::max(1, x.tokens - 1);
      generated += x.tokens;
    }
    const double n = static_cast<double>(t.size());
    const double total = static_cast<double>(generated) + n * args.input_len;
    std::printf("%d requests at once: %.1f s, %.1f output tokens/s, %.1f total tokens/s; mean TTFT %.0f ms, mean TPOT "
                "%.1f ms; %lld steps, %lld preemptions\n",
                args.requests, wall, static_cast<double>(generated) / wall, total / wall, ttft / n * 1e3, tpot / n * 1e3,
                static_cast<long long>(e.stats().steps - steps0), static_cast<long long>(e.stats().preemptions));
    out["throughput"] = {{"requests", args.requests}, {"seconds", wall}, {"output_tokens_per_s", generated / wall},
                         {"total_tokens_per_s", total / wall}, {"mean_ttft_ms", ttft / n * 1e3},
                         {"mean_tpot_ms", tpot / n * 1e3}, {"preemptions", e.stats().preemptions}};
    out["throughput"]["steps"] = report_steps("throughput steps", e.step_times());
  }
  if (!args.json.empty()) std::ofstream(args.json) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* b = app.add_subcommand("bench", "Latency at batch 1 and throughput of many requests, on a model or a named shape");
  b->add_option("--model", args.model, "Model directory or .gguf file");
  std::string shapes;
  for (const std::string& s : model::ModelConfig::shape_names()) shapes += (shapes.empty() ? "" : ", ") + s;
  b->add_option("--shape", args.shape, "A named model shape with random weights: " + shapes);
  b->add_option("--dtype", args.dtype, "Compute dtype: bf16, f16 or f32");
  b->add_option("--requests", args.requests, "Concurrent requests of the throughput run")->check(CLI::PositiveNumber);
  b->add_option("--input-len", args.input_len, "Prompt tokens per request")->check(CLI::PositiveNumber);
  b->add_option("--output-len", args.output_len, "Generated tokens per request")->check(CLI::PositiveNumber);
  b->add_option("--max-batch-tokens", args.max_batch_tokens, "Tokens per engine step")->check(CLI::PositiveNumber);
  b->add_option("--max-sequences", args.max_sequences, "Running sequences per engine step")->check(CLI::PositiveNumber);
  b->add_option("--kv-fraction", args.kv_fraction, "Fraction of free device memory for the KV cache")->check(CLI::Range(0.01, 1.0));
  b->add_option("--seed", args.seed, "Seed of the random weights and prompts");
  b->add_option("--weights", args.weights,
                "With --shape: dense; fp8 (E4M3, 128 x 128 block scales) or int8 (per-row scales); int4 (GPTQ, group "
                "128); the GGML block type of the random projections (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k ... "
                "q6_k); or q4_k_m (llama.cpp's Q4_K_M mix of Q4_K and Q6_K); kept so on the device");
  b->add_flag("--no-latency", args.skip_latency, "Skip the batch-1 run");
  b->add_flag("--no-throughput", args.skip_throughput, "Skip the many-request run");
  b->add_option("--json", args.json, "Also write the results as JSON");
  add_deterministic_flag(b, args.deterministic);
  add_kv_cache_dtype_option(b, args.kv_cache_dtype);
  add_parallel_options(b, args.parallel);
}

int run_bench_command(CLI::App& app, int device) {
  if (!app.got_subcommand("bench")) return -1;
  LW_CHECK(device == 0, "bench: runs on device 0");
  return run();
}

}  // namespace lw::app
