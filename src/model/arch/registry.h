// Every supported architecture, by name. Adding a family: its definition in model/arch/
// (see llama.cpp) and its line in registry.cpp.
#pragma once
#include <string>
#include <vector>

#include "model/arch/architecture.h"

namespace lw::model {

// The architectures in registry order.
const std::vector<const Architecture*>& architectures();
// The one reported as `name` (ModelConfig::architecture); throws listing the known names.
const Architecture& architecture(const std::string& name);
// The one reading config.json model_type / GGUF general.architecture `name`; null if none.
const Architecture* find_hf_architecture(const std::string& model_type);
const Architecture* find_gguf_architecture(const std::string& gguf_arch);
// "llama, mistral, ...": the accepted model_type / GGUF architecture values, for messages.
std::string hf_model_types();
std::string gguf_architectures();

}  // namespace lw::model
