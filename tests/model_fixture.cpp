#include "model_fixture.h"

#include <cstring>

#include "weights/random_blocks.h"

namespace lw::test {

void MemoryCheckpoint::add_record(const std::string& name, std::vector<int64_t> shape, weights::FileDType type,
                                  std::string type_name, std::vector<std::byte> bytes) {
  auto buf = std::make_unique<std::vector<std::byte>>(std::move(bytes));
  weights::TensorRecord r;
  r.name = name;
  r.dtype = type;
  r.shape = std::move(shape);
  r.data = buf->data();
  r.bytes = buf->size();
  r.file = "memory";
  r.type_name = std::move(type_name);
  records_.push_back(std::move(r));
  data_.push_back(std::move(buf));
}

void MemoryCheckpoint::add(const std::string& name, std::vector<int64_t> shape, std::mt19937_64& rng, float lo, float hi) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<std::byte> bytes(static_cast<size_t>(n) * sizeof(float));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof(float));
  }
  add_record(name, std::move(shape), weights::FileDType::f32, "F32", std::move(bytes));
}

void MemoryCheckpoint::add_blocks(const std::string& name, std::vector<int64_t> shape, weights::FileDType type,
                                  std::mt19937_64& rng) {
  LW_CHECK(shape.size() >= 2, "add_blocks: " << name << " " << shape_str(shape) << " is not a matrix or a stack of them");
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  std::vector<std::byte> bytes = weights::random_blocks(type, rows, shape.back(), rng());
  add_record(name, std::move(shape), type, weights::file_dtype_name(type), std::move(bytes));
}

void MemoryCheckpoint::add_scaled(const std::string& name, std::vector<int64_t> shape, weights::FileDType type,
                                  std::vector<int64_t> scale_shape, std::mt19937_64& rng) {
  LW_CHECK(shape.size() == 2 && (type == weights::FileDType::f8_e4m3 || type == weights::FileDType::i8),
           "add_scaled: " << name << " " << shape_str(shape) << " must be an F8_E4M3 or I8 matrix");
  const bool fp8 = type == weights::FileDType::f8_e4m3;
  std::vector<std::byte> bytes(static_cast<size_t>(shape[0] * shape[1]));
  std::uniform_int_distribution<int> sign(0, 1), exponent(1, 8), mantissa(0, 7), integer(-127, 127);
  for (std::byte& b : bytes)
    b = static_cast<std::byte>(fp8 ? (sign(rng) << 7) | (exponent(rng) << 3) | mantissa(rng) : integer(rng) & 0xFF);
  add_record(name, std::move(shape), type, fp8 ? "F8_E4M3" : "I8", std::move(bytes));
  int64_t n = 1;
  for (int64_t d : scale_shape) n *= d;
  std::vector<std::byte> scales(static_cast<size_t>(n) * sizeof(float));
  std::uniform_real_distribution<float> dist(fp8 ? 0.02f : 0.0005f, fp8 ? 0.04f : 0.001f);
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    std::memcpy(scales.data() + i * sizeof(float), &v, sizeof(float));
  }
  add_record(name + "_scale", std::move(scale_shape), weights::FileDType::f32, "F32", std::move(scales));
}

const weights::TensorRecord* MemoryCheckpoint::find(std::string_view name) const {
  for (const auto& r : records_)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::string> MemoryCheckpoint::names() const {
  std::vector<std::string> n;
  for (const auto& r : records_) n.push_back(r.name);
  return n;
}

model::ModelConfig tiny_llama_config(int64_t vocab) {
  model::ModelConfig c;
  c.architecture = "llama";
  c.vocab = vocab;
  c.hidden = 64;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.intermediate = 96;
  c.rms_eps = 1e-5;
  c.rope.rotary_dim = 16;
  c.rope.theta = 10000.0;
  c.max_position = 4096;
  c.tie_embeddings = true;
  c.moe_layer.assign(static_cast<size_t>(c.layers), false);
  c.checkpoint_dtype = DType::f32;
  return c;
}

std::unique_ptr<MemoryCheckpoint> random_checkpoint(const model::ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto ck = std::make_unique<MemoryCheckpoint>();
  const int64_t h = c.hidden, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim, i = c.intermediate;
  // Wide weights, so that logits are far from uniform and greedy choices are not near ties.
  const float w = 0.3f;
  ck->add("model.embed_tokens.weight", {c.vocab, h}, rng, -1.0f, 1.0f);
  ck->add("model.norm.weight", {h}, rng, 0.8f, 1.2f);
  if (!c.tie_embeddings) ck->add("lm_head.weight", {c.vocab, h}, rng, -w, w);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ck->add(p + "input_layernorm.weight", {h}, rng, 0.8f, 1.2f);
    ck->add(p + "post_attention_layernorm.weight", {h}, rng, 0.8f, 1.2f);
    ck->add(p + "self_attn.q_proj.weight", {qd, h}, rng, -w, w);
    ck->add(p + "self_attn.k_proj.weight", {kvd, h}, rng, -w, w);
    ck->add(p + "self_attn.v_proj.weight", {kvd, h}, rng, -w, w);
    ck->add(p + "self_attn.o_proj.weight", {h, qd}, rng, -w, w);
    ck->add(p + "mlp.gate_proj.weight", {i, h}, rng, -w, w);
    ck->add(p + "mlp.up_proj.weight", {i, h}, rng, -w, w);
    ck->add(p + "mlp.down_proj.weight", {h, i}, rng, -w, w);
  }
  return ck;
}

}  // namespace lw::test
