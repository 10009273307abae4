#include "model/arch/registry.h"

#include "base/error.h"

namespace lw::model {

// Every architecture, one line each, in the order of the "not supported" lists. A family's
// definition is `extern const Architecture <name>` in namespace arch, in model/arch/<file>.cpp
// (picked up by src/model/CMakeLists.txt).
#define LW_ARCHITECTURES(X) \
  X(llama)                  \
  X(mistral)                \
  X(qwen2)                  \
  X(qwen3)                  \
  X(mixtral)                \
  X(qwen2_moe)              \
  X(qwen3_moe)

namespace arch {
#define LW_DECLARE(name) extern const Architecture name;
LW_ARCHITECTURES(LW_DECLARE)
#undef LW_DECLARE
}  // namespace arch

const std::vector<const Architecture*>& architectures() {
#define LW_ENTRY(name) &arch::name,
  static const std::vector<const Architecture*> all = {LW_ARCHITECTURES(LW_ENTRY)};
#undef LW_ENTRY
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
