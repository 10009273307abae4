// Small Llama-family models with random weights, held in memory, for the model and engine
// tests: a Checkpoint whose tensors carry the Hugging Face names.
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "weights/checkpoint.h"

namespace lw::test {

class MemoryCheckpoint : public weights::Checkpoint {
 public:
  // Adds an f32 tensor of uniform values in [lo, hi).
  void add(const std::string& name, std::vector<int64_t> shape, std::mt19937_64& rng, float lo, float hi);
  // Adds a [rows, cols] matrix (or a stack of them, [..., rows, cols]) of random GGML blocks of
  // `type` (weights/random_blocks.h: weights of size ~0.3, like add()'s matrices).
  void add_blocks(const std::string& name, std::vector<int64_t> shape, weights::FileDType type, std::mt19937_64& rng);
  // Adds a [rows, cols] matrix of random 8-bit values of `type` (f8_e4m3: finite codes of
  // magnitude 2^-6 to 3.75; i8: -127 to 127) and its f32 scales "<name>_scale" of `scale_shape`
  // ([] or [1]: one; [rows, 1]: per row; else per block), sized for weights of about 0.1.
  void add_scaled(const std::string& name, std::vector<int64_t> shape, weights::FileDType type,
                  std::vector<int64_t> scale_shape, std::mt19937_64& rng);
  const weights::TensorRecord* find(std::string_view name) const override;
  std::vector<std::string> names() const override;
  std::string description() const override { return "an in-memory test checkpoint"; }

 private:
  void add_record(const std::string& name, std::vector<int64_t> shape, weights::FileDType type, std::string type_name,
                  std::vector<std::byte> bytes);

  std::vector<std::unique_ptr<std::vector<std::byte>>> data_;
  std::vector<weights::TensorRecord> records_;
};

// A Llama config: hidden 64, 2 layers, 4 query / 2 key-value heads of 16, intermediate 96.
model::ModelConfig tiny_llama_config(int64_t vocab);
// Every tensor `config` needs, random, under Hugging Face names.
std::unique_ptr<MemoryCheckpoint> random_checkpoint(const model::ModelConfig& config, uint64_t seed);

}  // namespace lw::test
