#include "model/arch/registry.h"

#include "base/error.h"

namespace lw::model {

// The definitions, one per family in model/arch/<group>.cpp.
namespace arch {
extern const Architecture llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe;
}

const std::vector<const Architecture*>& architectures() {
  // One line per architecture; the order is the order of the "not supported" lists.
  static const std::vector<const Architecture*> all = {
      &arch::llama,
      &arch::mistral,
      &arch::qwen2,
      &arch::qwen3,
      &arch::mixtral,
      &arch::qwen2_moe,
      &arch::qwen3_moe,
  };
  return all;
}

namespace {

std::string joined(std::vector<std::string> Architecture::*list) {
  std::string s;
  for (const Architecture* a : architectures())
    for (const std::string& n : a->*list) s += (s.empty() ? "" : ", ") + n;
  return s;
}

const Architecture* find(std::vector<std::string> Architecture::*list, const std::string& name) {
  for (const Architecture* a : architectures())
    for (const std::string& n : a->*list)
      if (n == name) return a;
  return nullptr;
}

}  // namespace

const Architecture& architecture(const std::string& name) {
  for (const Architecture* a : architectures())
    if (a->name == name) return *a;
  std::string names;
  for (const Architecture* a : architectures()) names += (names.empty() ? "" : ", ") + a->name;
  LW_FAIL("model architecture '" << name << "' is not supported (" << names << ")");
}

const Architecture* find_hf_architecture(const std::string& model_type) {
  return find(&Architecture::hf_model_types, model_type);
}
const Architecture* find_gguf_architecture(const std::string& gguf_arch) {
  return find(&Architecture::gguf_architectures, gguf_arch);
}
std::string hf_model_types() { return joined(&Architecture::hf_model_types); }
std::string gguf_architectures() { return joined(&Architecture::gguf_architectures); }

}  // namespace lw::model
