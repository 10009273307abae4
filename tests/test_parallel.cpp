// Tensor parallelism: a model split over ranks of the in-process group gives the logits and
// the greedy tokens of the whole model (dense, grouped-query with KV heads replicated, biased,
// mixture-of-experts with and without a shared expert, a vocabulary that does not divide), and a
// failing rank stops the group with its message instead of hanging it; the commands node 0
// sends its followers survive their codec, and a truncated one is refused.
#include <chrono>
#include <cstdlib>
#include <future>
#include <numeric>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "parallel/command_codec.h"
#include "parallel/local_group.h"
#include "parallel/rendezvous.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "gpu/runtime.h"
#include "model/arch/registry.h"
#include "model/model_weights.h"
#include "model/weight_loader.h"
#include "model_fixture.h"
#include "ops/elementwise.h"
#include "test_util.h"
#include "weights/load.h"

namespace lw::test {
namespace {

using engine::ModelRunner;
using model::ModelConfig;
using model::SequenceChunk;

// The host target runs any number of ranks on its one emulated device; a GPU target needs a
// GPU per rank.
bool have_ranks(int n) {
#if defined(LW_TARGET_HOST)
  (void)n;
  return true;
#else
  return gpu::device_count() >= n;
#endif
}
#define LW_NEED_RANKS(n) \
  if (!have_ranks(n)) GTEST_SKIP() << "needs " << (n) << " GPUs"
#if defined(LW_TARGET_HOST)
#define LW_NEED_HOST()
#else
#define LW_NEED_HOST() GTEST_SKIP() << "the in-process group runs on the host target"
#endif

// Logits of two sequences of different lengths (every position), then of one decode token
// each, as f32 on the host.
std::vector<float> two_step_logits(ModelRunner& runner) {
  const std::vector<int32_t> a = {3, 17, 42, 5, 9, 77, 1, 2, 60, 33, 12}, b = {8, 91, 4, 4, 50};
  const std::vector<int32_t> ta = {0, 1}, tb = {2};
  runner.allocate_cache(4, 8, ops::KvCacheFormat::model);
  std::vector<float> out;
  auto take = [&](const Tensor& logits) {
    Context& ctx = runner.context();
    Tensor f = ctx.empty(logits.shape(), DType::f32);
    ops::cast(ctx, logits, f);
    const Tensor h = ctx.to_host(f);
    out.insert(out.end(), h.data<float>(), h.data<float>() + h.numel());
  };
  take(runner.forward({{a, 0, ta, SequenceChunk::Logits::all}, {b, 0, tb, SequenceChunk::Logits::all}}));
  const std::vector<int32_t> na = {70}, nb = {6};
  take(runner.forward({{na, static_cast<int64_t>(a.size()), ta}, {nb, static_cast<int64_t>(b.size()), tb}}));
  return out;
}

// Every logit of `got` finite and within `relative` of the largest logit of `want`.
void expect_logits_within(const std::vector<float>& want, const std::vector<float>& got, double relative) {
  ASSERT_EQ(want.size(), got.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "logit " << i;
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    worst = std::max(worst, std::abs(static_cast<double>(want[i]) - got[i]));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LE(worst, relative * scale) << "largest logit " << scale;
}

// The dry run of a quantised load (LW_WEIGHT_STORAGE=quantized) counts the bytes the real load
// takes.
void expect_dry_run_counts_the_load(const weights::Checkpoint& ckpt, const ModelConfig& c) {
  ScopedEnv env("LW_WEIGHT_STORAGE", "quantized");
  const model::Architecture& arch = model::architecture(c.architecture);
  model::WeightLoader dry(ctx(), &ckpt, DType::f32, true), real(ctx(), &ckpt, DType::f32, false);
  dry.set_quantization(c.quantization);
  real.set_quantization(c.quantization);
  model::load_weights(dry, arch, c, c, model::Shard{});
  model::load_weights(real, arch, c, c, model::Shard{});
  EXPECT_EQ(dry.bytes(), real.bytes());
}

// Tensor parallelism sums the partial products in another order: the fp32 bound is a few
// units in the last place of the largest logit.
void expect_same_logits(const std::vector<float>& whole, const std::vector<float>& split) {
  expect_logits_within(whole, split, 2e-5);
}

// The int8 layers quantise their inputs per token (W8A8): logits within 2% of the largest.
void expect_close_logits(const std::vector<float>& want, const std::vector<float>& got) {
  expect_logits_within(want, got, 0.02);
}

std::unique_ptr<ModelRunner> random_runner(const ModelConfig& c, int ranks, uint64_t seed = 7) {
  return engine::make_runner(ctx(), ranks, [&](Context& rc, const model::Shard& s) {
    return model::Model::random(rc, c, DType::f32, seed, s);
  });
}

void expect_split_matches_whole(const ModelConfig& c, int ranks) {
  const std::vector<float> whole = two_step_logits(*random_runner(c, 1));
  const std::vector<float> split = two_step_logits(*random_runner(c, ranks));
  expect_same_logits(whole, split);
}

ModelConfig moe_config(int64_t shared) {
  ModelConfig c = tiny_llama_config(103);
  c.architecture = shared ? "qwen2_moe" : "mixtral";
  c.experts = 4;
  c.experts_per_token = 2;
  c.moe_intermediate = 32;
  c.shared_intermediate = shared;
  c.moe_layer.assign(static_cast<size_t>(c.layers), true);
  c.tie_embeddings = false;
  return c;
}

TEST(TensorParallel, DenseCheckpointMatchesTheWholeModel) {
  LW_NEED_RANKS(2);
  // Grouped-query attention (4 query heads over 2 KV heads), tied embeddings and an odd
  // vocabulary (the last rank's share padded), loaded from a checkpoint.
  const ModelConfig c = tiny_llama_config(101);
  const auto ckpt = random_checkpoint(c, 11);
  auto build = [&](Context& rc, const model::Shard& s) { return model::Model::load(rc, *ckpt, c, DType::f32, s); };
  const std::vector<float> whole = two_step_logits(*engine::make_runner(ctx(), 1, build));
  const std::vector<float> split = two_step_logits(*engine::make_runner(ctx(), 2, build));
  expect_same_logits(whole, split);
}

// A Llama of hidden 256 (K-quants' 256-element blocks fit) whose projections are GGML blocks of
// every format: fused q/k/v of mixed formats (expanded), of one format (kept), gate/up of one
// format, and an untied lm_head in blocks.
std::unique_ptr<MemoryCheckpoint> gguf_block_checkpoint(const ModelConfig& c, uint64_t seed) {
  using weights::FileDType;
  std::mt19937_64 rng(seed);
  auto ck = std::make_unique<MemoryCheckpoint>();
  const int64_t h = c.hidden, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim, i = c.intermediate;
  ck->add("model.embed_tokens.weight", {c.vocab, h}, rng, -1.0f, 1.0f);
  ck->add("model.norm.weight", {h}, rng, 0.8f, 1.2f);
  ck->add_blocks("lm_head.weight", {c.vocab, h}, FileDType::q4_1, rng);
  const FileDType layers[2][7] = {
      {FileDType::q4_0, FileDType::q4_0, FileDType::q8_0, FileDType::q5_1, FileDType::q4_k, FileDType::q4_k, FileDType::q6_k},
      {FileDType::q2_k, FileDType::q2_k, FileDType::q2_k, FileDType::q3_k, FileDType::q5_0, FileDType::q5_0, FileDType::q5_k}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const FileDType* t = layers[l % 2];
    ck->add(p + "input_layernorm.weight", {h}, rng, 0.8f, 1.2f);
    ck->add(p + "post_attention_layernorm.weight", {h}, rng, 0.8f, 1.2f);
    ck->add_blocks(p + "self_attn.q_proj.weight", {qd, h}, t[0], rng);
    ck->add_blocks(p + "self_attn.k_proj.weight", {kvd, h}, t[1], rng);
    ck->add_blocks(p + "self_attn.v_proj.weight", {kvd, h}, t[2], rng);
    ck->add_blocks(p + "self_attn.o_proj.weight", {h, qd}, t[3], rng);
    ck->add_blocks(p + "mlp.gate_proj.weight", {i, h}, t[4], rng);
    ck->add_blocks(p + "mlp.up_proj.weight", {i, h}, t[5], rng);
    ck->add_blocks(p + "mlp.down_proj.weight", {h, i}, t[6], rng);
  }
  return ck;
}

// Blocks kept on the device give the logits of the same weights expanded at load (the whole
// model and a 2-rank split, whose o shares of 128 columns are not whole K-quant blocks and are
// expanded, while down's shares of 256 stay blocks).
TEST(TensorParallel, GgufBlocksKeptMatchTheExpandedModel) {
  ModelConfig c = tiny_llama_config(97);  // the last rank's vocabulary share is padded
  c.hidden = 256;
  c.head_dim = 64;
  c.rope.rotary_dim = 64;
  c.intermediate = 512;
  c.tie_embeddings = false;
  const auto ckpt = gguf_block_checkpoint(c, 13);
  auto logits = [&](const char* storage, int ranks) {
    ScopedEnv env("LW_WEIGHT_STORAGE", storage);
    return two_step_logits(*engine::make_runner(ctx(), ranks, [&](Context& rc, const model::Shard& s) {
      auto m = model::Model::load(rc, *ckpt, c, DType::f32, s);
      if (std::string(storage) == "quantized") {
        EXPECT_EQ(m->weights().layers[0].gate_up.format(), ops::WeightFormat::gguf_q4_k);
        // q4_0, q4_0, q8_0: each part in its blocks
        EXPECT_EQ(m->weights().layers[0].qkv.format(), ops::WeightFormat::gguf_mixed);
        EXPECT_EQ(m->weights().layers[0].qkv.parts().size(), 3u);
        EXPECT_EQ(m->weights().layers[1].qkv.format(), ops::WeightFormat::gguf_q2_k);
        EXPECT_EQ(m->weights().layers[1].down.format(), ops::WeightFormat::gguf_q5_k);
        EXPECT_EQ(m->weights().layers[1].o.format(), s.size == 1 ? ops::WeightFormat::gguf_q3_k : ops::WeightFormat::dense);
        // The KV cache leaves room for the largest expansion: this rank's gate/up in f32.
        EXPECT_EQ(m->expansion_bytes(), static_cast<size_t>(2 * c.intermediate / s.size * c.hidden) * sizeof(float));
      } else {
        EXPECT_EQ(m->expansion_bytes(), 0u);
      }
      return m;
    }));
  };
  const std::vector<float> dense = logits("dense", 1);
  expect_same_logits(dense, logits("quantized", 1));
  if (have_ranks(2)) expect_same_logits(dense, logits("quantized", 2));

  expect_dry_run_counts_the_load(*ckpt, c);  // q/k/v of mixed formats included
}

// A Qwen2-MoE under GGUF names (llama.cpp's): experts stacked [experts, N, K] per matrix in
// blocks (Q4_K gate/up, Q8_0 down in layer 0, Q5_0 in layer 1), a shared expert in f32 with a
// gate vector [hidden], q/k/v biases.
std::unique_ptr<MemoryCheckpoint> gguf_moe_checkpoint(const ModelConfig& c, uint64_t seed) {
  using weights::FileDType;
  std::mt19937_64 rng(seed);
  auto ck = std::make_unique<MemoryCheckpoint>();
  const int64_t h = c.hidden, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim, e = c.experts;
  const int64_t mi = c.moe_intermediate, sw = c.shared_intermediate;
  ck->add("token_embd.weight", {c.vocab, h}, rng, -1.0f, 1.0f);
  ck->add("output_norm.weight", {h}, rng, 0.8f, 1.2f);
  ck->add_blocks("output.weight", {c.vocab, h}, FileDType::q8_0, rng);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ck->add(p + "attn_norm.weight", {h}, rng, 0.8f, 1.2f);
    ck->add(p + "ffn_norm.weight", {h}, rng, 0.8f, 1.2f);
    ck->add_blocks(p + "attn_q.weight", {qd, h}, FileDType::q8_0, rng);
    ck->add_blocks(p + "attn_k.weight", {kvd, h}, FileDType::q8_0, rng);
    ck->add_blocks(p + "attn_v.weight", {kvd, h}, FileDType::q8_0, rng);
    ck->add(p + "attn_q.bias", {qd}, rng, -0.1f, 0.1f);
    ck->add(p + "attn_k.bias", {kvd}, rng, -0.1f, 0.1f);
    ck->add(p + "attn_v.bias", {kvd}, rng, -0.1f, 0.1f);
    ck->add_blocks(p + "attn_output.weight", {h, qd}, FileDType::q4_0, rng);
    ck->add(p + "ffn_gate_inp.weight", {e, h}, rng, -0.3f, 0.3f);
    ck->add_blocks(p + "ffn_gate_exps.weight", {e, mi, h}, FileDType::q4_k, rng);
    ck->add_blocks(p + "ffn_up_exps.weight", {e, mi, h}, FileDType::q4_k, rng);
    ck->add_blocks(p + "ffn_down_exps.weight", {e, h, mi}, l % 2 ? FileDType::q5_0 : FileDType::q8_0, rng);
    ck->add(p + "ffn_gate_shexp.weight", {sw, h}, rng, -0.1f, 0.1f);
    ck->add(p + "ffn_up_shexp.weight", {sw, h}, rng, -0.1f, 0.1f);
    ck->add(p + "ffn_down_shexp.weight", {h, sw}, rng, -0.1f, 0.1f);
    ck->add(p + "ffn_gate_inp_shexp.weight", {h}, rng, -0.3f, 0.3f);
  }
  return ck;
}

// GGUF mixture-of-experts layers: each expert kept in its blocks (one Weight per expert, read
// from its place in the stack) gives the logits of the model expanded at load, whole and split
// over 2 ranks; expert 2's kept weights are the blocks at its place in the stack.
TEST(TensorParallel, GgufExpertsKeptMatchTheExpandedModel) {
  ModelConfig c = tiny_llama_config(97);
  c.architecture = "qwen2_moe";
  c.gguf = true;
  c.hidden = 256;
  c.head_dim = c.rope.rotary_dim = 64;
  c.qkv_bias = true;
  c.experts = 4;
  c.experts_per_token = 2;
  c.moe_intermediate = 128;
  c.shared_intermediate = 96;
  c.moe_layer.assign(static_cast<size_t>(c.layers), true);
  c.tie_embeddings = false;
  const auto ckpt = gguf_moe_checkpoint(c, 17);
  auto logits = [&](const char* storage, int ranks) {
    ScopedEnv env("LW_WEIGHT_STORAGE", storage);
    return two_step_logits(*engine::make_runner(ctx(), ranks, [&](Context& rc, const model::Shard& s) {
      auto m = model::Model::load(rc, *ckpt, c, DType::f32, s);
      const model::LayerWeights& l1 = m->weights().layers[1];
      if (std::string(storage) == "dense") {
        EXPECT_TRUE(l1.experts_gate_up.stacked.defined() && l1.experts_down.stacked.defined());
        return m;
      }
      EXPECT_EQ(l1.experts_gate_up.each.size(), 4u);
      for (const ops::Weight& w : l1.experts_gate_up.each.weights()) EXPECT_EQ(w.format(), ops::WeightFormat::gguf_q4_k);
      for (const ops::Weight& w : l1.experts_down.each.weights()) EXPECT_EQ(w.format(), ops::WeightFormat::gguf_q5_0);
      if (s.size == 1) {
        // Expert 2 of layer 1's down projection: the stack's third quarter of bytes.
        weights::TensorRecord r = *ckpt->find("blk.1.ffn_down_exps.weight");
        r.shape = {c.hidden, c.moe_intermediate};
        r.bytes /= 4;
        r.data += 2 * r.bytes;
        EXPECT_TRUE(bitwise_equal(rc.to_host(weights::load_tensor(rc, r, DType::f32)),
                                  rc.to_host(ops::expand(rc, l1.experts_down.each.weights()[2], DType::f32))));
      }
      return m;
    }));
  };
  const std::vector<float> dense = logits("dense", 1);
  expect_same_logits(dense, logits("quantized", 1));
  if (have_ranks(2)) expect_same_logits(dense, logits("quantized", 2));
  expect_dry_run_counts_the_load(*ckpt, c);
}

// A Llama of hidden 256 whose projections are 8-bit with scales in every layout: q/k/v with one
// scale ([] and [1]) and per-row scales (stacked: per-row FP8), block scales of 64 x 96 (o,
// gate/up, down: a 2-rank split's column shares of o and down cut the blocks), and (with_int8)
// int8 with one scale and per row, else FP8 in those places.
std::unique_ptr<MemoryCheckpoint> scaled_checkpoint(const ModelConfig& c, uint64_t seed, bool with_int8) {
  using weights::FileDType;
  const FileDType i8 = with_int8 ? FileDType::i8 : FileDType::f8_e4m3;
  std::mt19937_64 rng(seed);
  auto ck = std::make_unique<MemoryCheckpoint>();
  const int64_t h = c.hidden, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim, i = c.intermediate;
  const int64_t br = c.quantization.block_rows, bc = c.quantization.block_cols;
  auto blocks = [&](int64_t n, int64_t k) { return std::vector<int64_t>{(n + br - 1) / br, (k + bc - 1) / bc}; };
  ck->add("model.embed_tokens.weight", {c.vocab, h}, rng, -1.0f, 1.0f);
  ck->add("model.norm.weight", {h}, rng, 0.8f, 1.2f);
  ck->add("lm_head.weight", {c.vocab, h}, rng, -0.1f, 0.1f);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ck->add(p + "input_layernorm.weight", {h}, rng, 0.8f, 1.2f);
    ck->add(p + "post_attention_layernorm.weight", {h}, rng, 0.8f, 1.2f);
    if (l % 2 == 0) {
      ck->add_scaled(p + "self_attn.q_proj.weight", {qd, h}, FileDType::f8_e4m3, {}, rng);
      ck->add_scaled(p + "self_attn.k_proj.weight", {kvd, h}, FileDType::f8_e4m3, {1}, rng);
      ck->add_scaled(p + "self_attn.v_proj.weight", {kvd, h}, FileDType::f8_e4m3, {kvd, 1}, rng);
      ck->add_scaled(p + "self_attn.o_proj.weight", {h, qd}, FileDType::f8_e4m3, blocks(h, qd), rng);
      ck->add_scaled(p + "mlp.gate_proj.weight", {i, h}, FileDType::f8_e4m3, blocks(i, h), rng);
      ck->add_scaled(p + "mlp.up_proj.weight", {i, h}, FileDType::f8_e4m3, blocks(i, h), rng);
      ck->add_scaled(p + "mlp.down_proj.weight", {h, i}, i8, {1}, rng);
    } else {
      ck->add_scaled(p + "self_attn.q_proj.weight", {qd, h}, i8, {qd, 1}, rng);
      ck->add_scaled(p + "self_attn.k_proj.weight", {kvd, h}, i8, {kvd, 1}, rng);
      ck->add_scaled(p + "self_attn.v_proj.weight", {kvd, h}, i8, {kvd, 1}, rng);
      ck->add_scaled(p + "self_attn.o_proj.weight", {h, qd}, i8, {h, 1}, rng);
      ck->add_scaled(p + "mlp.gate_proj.weight", {i, h}, FileDType::f8_e4m3, {i, 1}, rng);
      ck->add_scaled(p + "mlp.up_proj.weight", {i, h}, FileDType::f8_e4m3, {}, rng);
      ck->add_scaled(p + "mlp.down_proj.weight", {h, i}, FileDType::f8_e4m3, blocks(h, i), rng);
    }
  }
  return ck;
}

// 8-bit weights kept on the device give the logits of the same weights expanded at load, whole
// and on 2 ranks: FP8 (W8A16) exactly; with int8 layers (W8A8, the activations quantised per
// token) within that rounding.
TEST(TensorParallel, ScaledWeightsKeptMatchTheExpandedModel) {
  ModelConfig c = tiny_llama_config(97);
  c.hidden = 256;
  c.head_dim = 64;
  c.rope.rotary_dim = 64;
  c.intermediate = 512;
  c.tie_embeddings = false;
  c.quantization = {"fp8", 64, 96};
  for (bool with_int8 : {false, true}) {
    SCOPED_TRACE(with_int8 ? "fp8 and int8" : "fp8");
    const auto ckpt = scaled_checkpoint(c, 17, with_int8);
    const ops::WeightFormat int8 = with_int8 ? ops::WeightFormat::int8_per_channel : ops::WeightFormat::fp8_e4m3_per_channel;
    auto logits = [&](const char* storage, int ranks) {
      ScopedEnv env("LW_WEIGHT_STORAGE", storage);
      return two_step_logits(*engine::make_runner(ctx(), ranks, [&](Context& rc, const model::Shard& s) {
        auto m = model::Model::load(rc, *ckpt, c, DType::f32, s);
        if (std::string(storage) == "quantized") {
          const auto& l0 = m->weights().layers[0];
          const auto& l1 = m->weights().layers[1];
          EXPECT_EQ(l0.qkv.format(), ops::WeightFormat::fp8_e4m3_per_channel);
          EXPECT_EQ(l0.gate_up.format(), ops::WeightFormat::fp8_e4m3_per_block);
          EXPECT_EQ(l0.o.format(), s.size == 1 ? ops::WeightFormat::fp8_e4m3_per_block : ops::WeightFormat::dense);
          EXPECT_EQ(l0.down.format(), with_int8 ? int8 : ops::WeightFormat::fp8_e4m3_per_tensor);
          EXPECT_EQ(l1.qkv.format(), int8);
          EXPECT_EQ(l1.gate_up.format(), ops::WeightFormat::fp8_e4m3_per_channel);
          EXPECT_EQ(l1.down.format(), s.size == 1 ? ops::WeightFormat::fp8_e4m3_per_block : ops::WeightFormat::dense);
        }
        return m;
      }));
    };
    const auto same = with_int8 ? expect_close_logits : expect_same_logits;
    const std::vector<float> dense = logits("dense", 1);
    same(dense, logits("quantized", 1));
    if (have_ranks(2)) same(dense, logits("quantized", 2));

    expect_dry_run_counts_the_load(*ckpt, c);  // stacked per-tensor scales, shares cut into blocks expanded
  }
}

// Random quantised weights (`lightwave bench --shape ... --weights q4_k|fp8|int8|int4`): kept as
// they are generated, they give the logits of their expansion, whole and split (each rank
// slices what the whole model holds); int8 (W8A8) within its activations' rounding.
TEST(TensorParallel, RandomQuantisedWeightsMatchTheirExpansion) {
  ModelConfig c = tiny_llama_config(97);  // an untied LM head whose last share is padded
  c.tie_embeddings = false;
  c.hidden = 256;
  c.head_dim = 64;
  c.rope.rotary_dim = 64;
  c.intermediate = 512;
  struct Case {
    const char* name;
    model::RandomProjections type;
    ops::WeightFormat format;  // layer 0's gate_up kept quantised
  };
  const Case types[] = {
      {"q4_k", weights::FileDType::q4_k, ops::WeightFormat::gguf_q4_k},
      {"f8_e4m3", weights::FileDType::f8_e4m3, ops::WeightFormat::fp8_e4m3_per_block},
      {"i8", weights::FileDType::i8, ops::WeightFormat::int8_per_channel},
      {"i32", weights::FileDType::i32, ops::WeightFormat::int4},  // GPTQ words, groups of 128
      // Q4_K, with Q6_K in the LM head and layer 1's v_proj and down_proj (of two layers): layer
      // 1's fused QKV keeps Q4_K q and k and Q6_K v, each in its blocks.
      {"q4_k_m", model::RandomProjections::q4_k_m(static_cast<int>(c.layers)), ops::WeightFormat::gguf_q4_k}};
  for (const auto& [name, type, format] : types) {
    SCOPED_TRACE(name);
    const bool q4_k_m = type.q4_k_m_layers > 0;
    auto logits = [&](const char* storage, int ranks) {
      ScopedEnv env("LW_WEIGHT_STORAGE", storage);
      return two_step_logits(*engine::make_runner(ctx(), ranks, [&](Context& rc, const model::Shard& s) {
        auto m = model::Model::random(rc, c, DType::f32, 5, s, type);
        const bool dense = std::string(storage) == "dense";
        EXPECT_EQ(m->weights().layers[0].gate_up.format(), dense ? ops::WeightFormat::dense : format);
        if (q4_k_m && !dense) {
          const model::LayerWeights& l1 = m->weights().layers[1];
          EXPECT_EQ(m->weights().layers[0].qkv.format(), ops::WeightFormat::gguf_q4_k);
          EXPECT_EQ(l1.qkv.format(), ops::WeightFormat::gguf_mixed) << l1.qkv.describe();
          EXPECT_EQ(l1.qkv.parts().size(), 3u);
          EXPECT_EQ(l1.down.format(), ops::WeightFormat::gguf_q6_k);
          EXPECT_EQ(m->weights().layers[0].down.format(), ops::WeightFormat::gguf_q4_k);
          EXPECT_EQ(m->weights().lm_head.format(), ops::WeightFormat::gguf_q6_k);
        }
        return m;
      }));
    };
    const auto same = type.type == weights::FileDType::i8 ? expect_close_logits : expect_same_logits;
    const std::vector<float> dense = logits("dense", 1);
    same(dense, logits("quantized", 1));
    if (have_ranks(2)) same(dense, logits("quantized", 2));
    // The dry run counts the bytes the load takes.
    ScopedEnv env("LW_WEIGHT_STORAGE", "quantized");
    const model::Architecture& arch = model::architecture(c.architecture);
    model::WeightLoader dry(ctx(), nullptr, DType::f32, true, 0, 5, type), real(ctx(), nullptr, DType::f32, false, 0, 5, type);
    model::load_weights(dry, arch, c, c, model::Shard{});
    model::load_weights(real, arch, c, c, model::Shard{});
    EXPECT_EQ(dry.bytes(), real.bytes());
  }
}

// MoE experts of random quantised weights stay quantised, one Weight per expert (each expert's
// rows through linear in its format), and give the logits of their expansion, whole and split:
// a rank keeps its share of every expert's rows (gate/up) and columns (down; a GGUF K-quant's
// 256-column blocks do not split in two, so those are expanded).
TEST(TensorParallel, RandomQuantisedExpertsMatchTheirExpansion) {
  ModelConfig c = moe_config(0);
  c.hidden = 256;
  c.head_dim = 64;
  c.rope.rotary_dim = 64;
  c.intermediate = 512;
  c.moe_intermediate = 256;
  const std::pair<weights::FileDType, ops::WeightFormat> types[] = {
      {weights::FileDType::q4_k, ops::WeightFormat::gguf_q4_k},
      {weights::FileDType::f8_e4m3, ops::WeightFormat::fp8_e4m3_per_block},
      {weights::FileDType::i32, ops::WeightFormat::int4}};
  for (const auto& [type, format] : types) {
    SCOPED_TRACE(weights::file_dtype_name(type));
    auto logits = [&](const char* storage, int ranks) {
      ScopedEnv env("LW_WEIGHT_STORAGE", storage);
      return two_step_logits(*engine::make_runner(ctx(), ranks, [&](Context& rc, const model::Shard& s) {
        auto m = model::Model::random(rc, c, DType::f32, 5, s, type);
        const model::LayerWeights& l = m->weights().layers[1];
        if (std::string(storage) == "dense") {
          EXPECT_TRUE(l.experts_gate_up.stacked.defined() && l.experts_gate_up.each.empty());
          EXPECT_TRUE(l.experts_down.stacked.defined() && l.experts_down.each.empty());
        } else {
          EXPECT_FALSE(l.experts_gate_up.stacked.defined() || l.experts_down.stacked.defined());
          EXPECT_EQ(l.experts_gate_up.each.size(), 4u);
          EXPECT_EQ(l.experts_down.each.size(), 4u);
          for (const ops::Weight& w : l.experts_gate_up.each.weights()) {
            EXPECT_EQ(w.format(), format);
            EXPECT_EQ(w.out_features(), 2 * 256 / s.size);
          }
          const bool split_blocks = s.size > 1 && type == weights::FileDType::q4_k;
          for (const ops::Weight& w : l.experts_down.each.weights()) {
            EXPECT_EQ(w.format(), split_blocks ? ops::WeightFormat::dense : format);
            EXPECT_EQ(w.in_features(), 256 / s.size);
          }
        }
        return m;
      }));
    };
    const std::vector<float> dense = logits("dense", 1);
    expect_same_logits(dense, logits("quantized", 1));
    if (have_ranks(2)) expect_same_logits(dense, logits("quantized", 2));
    ScopedEnv env("LW_WEIGHT_STORAGE", "quantized");
    const model::Architecture& arch = model::architecture(c.architecture);
    model::WeightLoader dry(ctx(), nullptr, DType::f32, true, 0, 5, type), real(ctx(), nullptr, DType::f32, false, 0, 5, type);
    model::load_weights(dry, arch, c, c, model::Shard{});
    model::load_weights(real, arch, c, c, model::Shard{});
    EXPECT_EQ(dry.bytes(), real.bytes());
  }
}

TEST(TensorParallel, ReplicatedKvHeadsAndBiasesMatchTheWholeModel) {
  LW_NEED_RANKS(2);
  ModelConfig c = tiny_llama_config(96);
  c.kv_heads = 1;  // fewer KV heads than ranks: each rank keeps the one its queries read
  c.qkv_bias = c.o_bias = true;
  c.tie_embeddings = false;
  expect_split_matches_whole(c, 2);
  c.kv_heads = 2;
  if (have_ranks(4)) expect_split_matches_whole(c, 4);  // two ranks per KV head
}

TEST(TensorParallel, MixtureOfExpertsMatchesTheWholeModel) {
  LW_NEED_RANKS(2);
  expect_split_matches_whole(moe_config(0), 2);   // Mixtral-shaped
  expect_split_matches_whole(moe_config(48), 2);  // Qwen2-MoE-shaped: a gated shared expert
}

TEST(TensorParallel, EngineGreedyTokensMatchTheWholeModel) {
  LW_NEED_RANKS(2);
  const ModelConfig c = tiny_llama_config(101);
  const auto ckpt = random_checkpoint(c, 5);
  auto build = [&](Context& rc, const model::Shard& s) { return model::Model::load(rc, *ckpt, c, DType::f32, s); };
  auto generate = [&](ModelRunner& runner) {
    engine::EngineOptions eo;
    eo.num_blocks = 32;
    eo.block_size = 4;
    eo.max_batch_tokens = 8;  // chunked prefill
    engine::Engine e(runner, nullptr, {}, eo);
    std::vector<std::vector<int32_t>> out(3);
    for (int i = 0; i < 3; ++i) {
      engine::Request r;
      for (int j = 0; j < 5 + 4 * i; ++j) r.prompt.push_back((j * 13 + i * 7) % 101);
      r.max_tokens = 10;
      r.ignore_eos = true;
      e.add(r, [&out, i](const engine::RequestOutput& o) {
        out[static_cast<size_t>(i)].insert(out[static_cast<size_t>(i)].end(), o.tokens.begin(), o.tokens.end());
      });
    }
    e.run();
    return out;
  };
  const auto whole = generate(*engine::make_runner(ctx(), 1, build));
  const auto split = generate(*engine::make_runner(ctx(), 2, build));
  EXPECT_EQ(whole, split);
  for (const auto& t : whole) EXPECT_EQ(t.size(), 10u);
}

TEST(TensorParallel, ShapesThatDoNotDivideAreNamed) {
  ModelConfig c = tiny_llama_config(101);
  expect_error([&] { model::shard_config(c, 3); }, "attention heads (4) does not divide");
  c.kv_heads = 4;
  c.heads = 8;
  c.intermediate = 90;
  expect_error([&] { model::shard_config(c, 4); }, "MLP width (intermediate_size) (90)");
  c.intermediate = 96;
  c.kv_heads = 3;
  c.heads = 6;
  expect_error([&] { model::shard_config(c, 2); }, "3 KV heads neither divide");
}

TEST(TensorParallel, AFailingRankStopsTheGroupWithItsMessage) {
  LW_NEED_RANKS(2);
  const ModelConfig c = tiny_llama_config(101);
  expect_error(
      [&] {
        engine::TensorParallelRunner r(2, [&](Context& rc, const model::Shard& s) -> std::unique_ptr<model::Model> {
          if (s.rank == 1) LW_FAIL("no weights for this rank");
          return model::Model::random(rc, c, DType::f32, 1, s);
        });
      },
      "rank 1: no weights for this rank");
}

TEST(TensorParallel, AnAbortedGroupEndsAPendingCollective) {
  LW_NEED_HOST();
  parallel::LocalGroup g(2);
  auto c0 = g.communicator(0), c1 = g.communicator(1);
  Tensor x = ctx().to_device(random_host({8}, DType::f32));
  auto pending = std::async(std::launch::async, [&] { c0->all_reduce_sum(ctx(), x); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c1->abort("rank 1 lost its device");
  expect_error([&] { pending.get(); }, "rank 1 lost its device");
  expect_error([&] { c1->all_reduce_sum(ctx(), x); }, "the group was stopped");
}

TEST(TensorParallel, AMissingPeerTimesOut) {
  LW_NEED_HOST();
  setenv("LW_DIST_TIMEOUT", "0.2", 1);
  parallel::LocalGroup g(2);
  auto c0 = g.communicator(0);
  Tensor x = ctx().to_device(random_host({8}, DType::f32));
  expect_error([&] { c0->all_reduce_sum(ctx(), x); }, "for the other ranks");
  unsetenv("LW_DIST_TIMEOUT");
}

TEST(TensorParallel, AllReduceAndAllGatherAreExact) {
  LW_NEED_HOST();
  for (DType dt : {DType::f32, DType::bf16}) {
    parallel::LocalGroup g(3);
    std::vector<Tensor> xs, hs;
    for (int r = 0; r < 3; ++r) {
      hs.push_back(random_host({5, 7}, dt));
      xs.push_back(ctx().to_device(hs.back()));
    }
    std::vector<Tensor> gathered;
    for (int r = 0; r < 3; ++r) gathered.push_back(ctx().empty({15, 7}, dt));
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        auto c = g.communicator(r);
        c->all_gather(ctx(), xs[static_cast<size_t>(r)], gathered[static_cast<size_t>(r)]);
        c->all_reduce_sum(ctx(), xs[static_cast<size_t>(r)]);
      });
    for (auto& t : threads) t.join();
    std::vector<double> cat, sum(35, 0.0);
    for (const Tensor& h : hs) {
      const std::vector<double> v = to_doubles(h);
      cat.insert(cat.end(), v.begin(), v.end());
      for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(all_close(ctx().to_host(gathered[static_cast<size_t>(r)]), cat, 0, 0));
      // Summed in float and rounded once: within half a unit of the dtype.
      EXPECT_TRUE(all_close(ctx().to_host(xs[static_cast<size_t>(r)]), sum, dt == DType::bf16 ? 4e-3 : 1e-6, 1e-6));
    }
  }
}

// A port nobody listens on now (the kernel's choice of a free one).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(CommandCodec, RoundTripsAndRefusesATruncatedCommand) {
  const std::vector<int32_t> ids = {3, -1, 70000};
  const std::string bytes = parallel::CommandWriter(parallel::command::kForward)
                                .put(0.75)
                                .put_ids(ids)
                                .put(static_cast<uint8_t>(1))
                                .put_ids(std::vector<int32_t>{})
                                .put(int64_t{-5})
                                .str();
  parallel::CommandReader in(bytes);
  EXPECT_EQ(in.op(), parallel::command::kForward);
  EXPECT_EQ(in.get<double>(), 0.75);
  EXPECT_EQ(in.get_ids(), ids);
  EXPECT_EQ(in.get<uint8_t>(), 1);
  EXPECT_TRUE(in.get_ids().empty());
  EXPECT_FALSE(in.at_end());
  EXPECT_EQ(in.get<int64_t>(), -5);
  EXPECT_TRUE(in.at_end());
  EXPECT_THROW(in.get<uint8_t>(), Error);  // nothing left

  // Cut anywhere inside, the command is refused where it runs out, naming the op.
  for (size_t cut : {size_t{1}, size_t{5}, size_t{9 + 8 + 4}, bytes.size() - 1}) {
    SCOPED_TRACE(::testing::Message() << "cut at " << cut);
    const std::string truncated = bytes.substr(0, cut);
    parallel::CommandReader r(truncated);
    expect_error(
        [&] {
          (void)r.get<double>();
          (void)r.get_ids();
          (void)r.get<uint8_t>();
          (void)r.get_ids();
          (void)r.get<int64_t>();
        },
        "truncated command 'W'");
  }
  // A length that announces more ids than the command holds is refused before any allocation.
  const std::string huge = parallel::CommandWriter('W').put(uint64_t{1} << 60).str();
  parallel::CommandReader h(huge);
  EXPECT_THROW(h.get_ids(), Error);
  EXPECT_THROW(parallel::CommandReader{std::string_view{}}, Error);
  EXPECT_TRUE(parallel::is_error_reply(std::string(parallel::kErrorReply) + "rank 1: out of memory"));
  EXPECT_FALSE(parallel::is_error_reply("42"));
}

TEST(Rendezvous, NodesMeetBroadcastAndGather) {
  const std::string addr = "127.0.0.1:" + std::to_string(free_port());
  auto follower = std::async(std::launch::async, [&] {
    std::vector<std::string> got;
    parallel::Rendezvous r(addr, 3, 2);
    std::string m;
    r.broadcast(m);
    got.push_back(m);
    EXPECT_TRUE(r.gather("from 2").empty());
    r.broadcast(m);  // node 0 is gone by now
    return got;
  });
  auto second = std::async(std::launch::async, [&] {
    parallel::Rendezvous r(addr, 3, 1);
    std::string m;
    r.broadcast(m);
    r.gather("from 1:" + m);
    try {
      r.broadcast(m);
    } catch (const Error&) {
    }
  });
  {
    parallel::Rendezvous r0(addr, 3, 0);
    std::string step(100000, 'x');  // longer than a socket buffer
    step[0] = 'W';
    r0.broadcast(step);
    const std::vector<std::string> replies = r0.gather("own");
    ASSERT_EQ(replies.size(), 3u);
    EXPECT_EQ(replies[0], "own");
    EXPECT_EQ(replies[1], "from 1:" + step);
    EXPECT_EQ(replies[2], "from 2");
  }
  expect_error([&] { follower.get(); }, "node 0 closed the connection");
  second.get();
}

TEST(Rendezvous, AMismatchedNodeIsRefusedAndNodeZeroWaitsOn) {
  setenv("LW_DIST_TIMEOUT", "1", 1);
  const std::string addr = "127.0.0.1:" + std::to_string(free_port());
  auto other = std::async(std::launch::async, [&] { parallel::Rendezvous r(addr, 3, 1); });
  expect_error([&] { parallel::Rendezvous r(addr, 2, 0); }, "for 1 more node(s)");
  expect_error([&] { other.get(); }, "node 0 refused node 1: node 0 expects 2 nodes, this one 3");
  unsetenv("LW_DIST_TIMEOUT");
}

TEST(Rendezvous, BadAddressesAndAMissingNodeAreNamed) {
  expect_error([] { parallel::parse_address("localhost"); }, "must be host:port");
  expect_error([] { parallel::parse_address("localhost:http"); }, "the port 'http'");
  setenv("LW_DIST_TIMEOUT", "0.3", 1);
  expect_error([] { parallel::Rendezvous r("127.0.0.1:0", 2, 0); }, "for 1 more node(s)");
  expect_error([] { parallel::Rendezvous r("127.0.0.1:" + std::to_string(free_port()), 2, 1); }, "could not reach node 0");
  unsetenv("LW_DIST_TIMEOUT");
}

TEST(TensorParallel, SeveralNodesNeedNccl) {
#if defined(LW_TARGET_HOST)
  const ModelConfig c = tiny_llama_config(101);
  expect_error(
      [&] {
        engine::make_runner(ctx(), engine::Placement{2, 2, 0, "127.0.0.1:1"}, [&](Context& rc, const model::Shard& s) {
          return model::Model::random(rc, c, DType::f32, 1, s);
        });
      },
      "needs NCCL / RCCL");
#else
  GTEST_SKIP() << "the GPU targets run several nodes through NCCL (tools/compare_hf.py --nnodes 2 on a two-GPU host)";
#endif
}

}  // namespace
}  // namespace lw::test
