// Llama and Mistral: pre-norm blocks of grouped-query attention (optional biases on q, k, v
// and o: attention_bias) and a dense gated SiLU MLP. Mistral adds a sliding window, read as a
// cap on the context length.
#include <algorithm>

#include "model/arch/architecture.h"
#include "model/config.h"
#include "model/config_keys.h"

namespace lw::model::arch {

// extern: registry.cpp lists the definitions (const alone would make them file-local).

namespace {

void read_llama(const ConfigKeys& c, ModelConfig& m) { m.qkv_bias = m.o_bias = c.get<bool>("attention_bias", false); }

void read_mistral(const ConfigKeys& c, ModelConfig& m) {
  read_llama(c, m);
  if (c.has("sliding_window")) m.max_position = std::min<int64_t>(m.max_position, c.get<int64_t>("sliding_window"));
}

// llama.cpp's converter permutes Llama's q and k rows so that RoPE rotates adjacent pairs.
void read_llama_gguf(const weights::GgufFile&, const std::string&, ModelConfig& m) { m.rope.neox = false; }

}  // namespace

extern const Architecture llama{
    .name = "llama",
    .hf_model_types = {"llama"},
    .gguf_architectures = {"llama"},
    .read_hf = read_llama,
    .read_gguf = read_llama_gguf,
    .names = {},
};

extern const Architecture mistral{
    .name = "mistral",
    .hf_model_types = {"mistral"},
    .read_hf = read_mistral,
    .names = {},
};

}  // namespace lw::model::arch
