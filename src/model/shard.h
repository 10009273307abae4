// Tensor parallelism: which rank of how many a Model is, and the shapes one rank holds.
#pragma once
#include "model/config.h"

namespace lw::parallel {
class Communicator;
}

namespace lw::model {

// The part of a model one rank of a tensor-parallel group holds: attention heads, MLP and
// expert widths and the vocabulary divided among `size` ranks (column-parallel QKV and
// gate/up, row-parallel o and down with an all-reduce after each, vocabulary-parallel
// embedding and LM head). With fewer KV heads than ranks each rank keeps the one KV head its
// query heads read.
struct Shard {
  int rank = 0, size = 1;
  parallel::Communicator* comm = nullptr;  // needed when size > 1
};

// The shapes one rank of a group of `size` holds (heads, kv_heads, intermediate,
// moe_intermediate, shared_intermediate divided; vocab the padded shard, ceil(vocab / size)).
// Throws naming the dimension that does not divide.
ModelConfig shard_config(const ModelConfig& config, int size);

}  // namespace lw::model
