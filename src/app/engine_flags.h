// The engine flags of every entry point that runs a model: --deterministic, --kv-cache-dtype.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "ops/attention.h"

namespace lw::app {

inline void add_deterministic_flag(CLI::App* command, bool& flag) {
  command->add_flag("--deterministic", flag,
                    "Batch-invariant execution: a request's logits and tokens do not depend on the other requests "
                    "of a step, prefix-cache hits or chunked prefill (slower; docs/ARCHITECTURE.md)");
}

// The value is checked when the command runs (ops::parse_kv_cache_format names what it takes).
inline void add_kv_cache_dtype_option(CLI::App* command, std::string& value) {
  command
      ->add_option("--kv-cache-dtype", value,
                   "How the KV cache stores keys and values: auto (the model's dtype), fp8 (E4M3, a scale per "
                   "key/value head) or int8 (a scale per token and head); 8-bit caches hold twice the tokens")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3", "int8"}));
}

}  // namespace lw::app
