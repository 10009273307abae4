#include "app/generate.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "app/engine_flags.h"
#include "app/parallel.h"
#include "core/context.h"
#include "engine/loaded_model.h"

namespace lw::app {

namespace {

struct GenerateArgs {
  std::string model, prompt, dtype = "bf16", kv_cache_dtype = "auto";
  int max_tokens = 128;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool chat = false, deterministic = false, allow_special_in_content = false;
  ParallelArgs parallel;
} gen;

struct ScoreArgs {
  std::string model, input, out, dtype = "f32";
  bool deterministic = false;
  ParallelArgs parallel;
} score;

int run_generate(int device) {
  Context ctx(device);
  engine::LoadedModel g(ctx, gen.model, parse_dtype(gen.dtype), gen.parallel.placement());
  if (follow_if_not_leader(g.runner())) return 0;
  const std::vector<int32_t> prompt = g.encode_prompt(gen.prompt, gen.chat, gen.allow_special_in_content);
  engine::GenerateOptions opt;
  opt.max_tokens = gen.max_tokens;
  opt.sampling.temperature = gen.temperature;
  opt.sampling.top_k = gen.top_k;
  opt.sampling.top_p = gen.top_p;
  opt.sampling.seed = gen.seed;
  opt.deterministic = gen.deterministic;
  opt.kv_cache_format = ops::parse_kv_cache_format(gen.kv_cache_dtype);
  const engine::Generation result = g.generate(prompt, opt, [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "[%zu prompt tokens, %zu generated, finish: %s]\n", prompt.size(), result.tokens.size(),
               result.finish_reason.c_str());
  return 0;
}

// Input JSON: {"prompts": [[ids...], ...], "greedy_tokens": N}. Writes OUT/logits_<i>.f32 (raw
// little-endian float32, [tokens, vocab]) and OUT/result.json with the vocabulary size and the
// greedy continuation of each prompt.
int run_score(int device) {
  std::ifstream in(score.input);
  LW_CHECK(in, "score: cannot open '" << score.input << "'");
  const nlohmann::json req = nlohmann::json::parse(in);
  const int greedy = req.value("greedy_tokens", 0);
  Context ctx(device);
  engine::LoadedModel g(ctx, score.model, parse_dtype(score.dtype), score.parallel.placement());
  if (follow_if_not_leader(g.runner())) return 0;
  g.runner().set_deterministic(score.deterministic);
  std::filesystem::create_directories(score.out);
  nlohmann::json result;
  result["vocab"] = g.config().vocab;
  result["greedy"] = nlohmann::json::array();
  int i = 0;
  for (const auto& p : req.at("prompts")) {
    const std::vector<int32_t> ids = p.get<std::vector<int32_t>>();
    const std::vector<float> logits = g.score(ids);
    std::ofstream out(score.out + "/logits_" + std::to_string(i++) + ".f32", std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    engine::GenerateOptions opt;
    opt.max_tokens = greedy;
    opt.sampling.temperature = 0.0f;
    opt.stop_at_eos = false;
    opt.deterministic = score.deterministic;
    result["greedy"].push_back(greedy > 0 ? g.generate(ids, opt).tokens : std::vector<int32_t>{});
  }
  std::ofstream(score.out + "/result.json") << result.dump() << "\n";
  return 0;
}

}  // namespace

void add_model_commands(CLI::App& app) {
  auto* g = app.add_subcommand("generate", "Generate text from a prompt with one model");
  g->add_option("--model", gen.model, "Model directory (Hugging Face) or .gguf file")->required();
  g->add_option("--prompt", gen.prompt, "Prompt text")->required();
  g->add_option("--max-tokens", gen.max_tokens, "Most tokens to generate")->check(CLI::NonNegativeNumber);
  g->add_option("--temperature", gen.temperature, "Sampling temperature; 0 is greedy")->check(CLI::Range(0.0, 100.0));
  g->add_option("--top-k", gen.top_k, "Keep the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  g->add_option("--top-p", gen.top_p, "Nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  g->add_option("--seed", gen.seed, "Random seed of the sampler");
  g->add_option("--dtype", gen.dtype, "Compute dtype: bf16, f16 or f32");
  g->add_flag("--chat", gen.chat, "Wrap the prompt in the model's chat template as a user message");
  g->add_flag("--allow-special-in-content", gen.allow_special_in_content,
              "With --chat: read special tokens written in the prompt as special (by default the message is "
              "tokenized as plain text)");
  add_deterministic_flag(g, gen.deterministic);
  add_kv_cache_dtype_option(g, gen.kv_cache_dtype);
  add_parallel_options(g, gen.parallel);

  auto* s = app.add_subcommand("score", "Write the logits and greedy continuations of token prompts (model comparisons)");
  s->add_option("--model", score.model, "Model directory or .gguf file")->required();
  s->add_option("--input", score.input, "JSON file: {\"prompts\": [[ids...]...], \"greedy_tokens\": N}")->required();
  s->add_option("--out", score.out, "Output directory")->required();
  s->add_option("--dtype", score.dtype, "Compute dtype: f32, bf16 or f16");
  add_deterministic_flag(s, score.deterministic);
  add_parallel_options(s, score.parallel);
}

int run_model_command(CLI::App& app, int device) {
  if (app.got_subcommand("generate")) return run_generate(device);
  if (app.got_subcommand("score")) return run_score(device);
  return -1;
}

}  // namespace lw::app
