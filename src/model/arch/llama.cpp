// Llama and Mistral: pre-norm blocks of grouped-query attention (optional biases on q, k, v
// and o: attention_bias) and a dense gated SiLU MLP. Mistral adds a sliding window over the
// keys of every layer.
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
  m.sliding_window = c.get<int64_t>("sliding_window", 0);
  LW_CHECK(m.sliding_window >= 0, "model config: sliding_window must be positive or null, got " << m.sliding_window);
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
