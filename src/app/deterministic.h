// The --deterministic flag of every entry point that runs a model.
#pragma once
#include <CLI/CLI.hpp>

namespace lw::app {

inline void add_deterministic_flag(CLI::App* command, bool& flag) {
  command->add_flag("--deterministic", flag,
                    "Batch-invariant execution: a request's logits and tokens do not depend on the other requests "
                    "of a step, prefix-cache hits or chunked prefill (slower; docs/ARCHITECTURE.md)");
}

}  // namespace lw::app
