// A batch of sequence chunks laid out for the forward pass: on the host (checked against the
// cache and the vocabulary) and on the device, as the layers read it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/kv_cache.h"
#include "ops/attention.h"

namespace lw::model {

// One sequence's share of a forward pass: its new tokens, the position of the first (the
// tokens before it are in the cache already), its block table (covering every position up to
// the last new token), and which logits it wants.
struct SequenceChunk {
  enum class Logits { none, last, all };
  std::span<const int32_t> tokens;
  int64_t start = 0;
  std::span<const int32_t> blocks;
  Logits logits = Logits::last;
};

// Where each token of a batch goes, on the host and checked: ids, positions and cache slots,
// the sequences' block tables and lengths, and the rows whose logits are wanted.
struct HostLayout {
  std::vector<int32_t> ids, rows, query_lens, context_lens, tables;  // tables: [sequences, max_blocks]
  std::vector<int64_t> positions, slots;
  size_t max_blocks = 1;
  int64_t tokens = 0;

  // Throws naming the sequence whose tokens, blocks or ids are out of range.
  HostLayout(const KvCache& cache, const std::vector<SequenceChunk>& batch, int64_t vocab);
};

// The device side of a batch, as the layers read it.
struct BatchLayout {
  Tensor ids, positions, slots, block_tables, logit_rows;
  ops::PrefillPlan attention;
  int64_t tokens = 0, logits = 0;
  // Where the logits go ([logits, vocab], the model's dtype), or undefined: a new tensor.
  Tensor logits_out;

  BatchLayout() = default;
  // attention_group: query heads per key/value head (the matrix attention's tiles).
  BatchLayout(Context& ctx, const HostLayout& h, size_t sequences, int attention_group);
};

// A host tensor holding `v` (to copy to the device).
template <class T>
Tensor host_vector(const std::vector<T>& v) {
  Tensor t = Tensor::empty_host({static_cast<int64_t>(v.size())}, dtype_of<T>);
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}

}  // namespace lw::model
