#include "model/batch_layout.h"

#include <algorithm>

#include "base/error.h"

namespace lw::model {

HostLayout::HostLayout(const KvCache& cache, const std::vector<SequenceChunk>& batch, int64_t vocab) {
  const int bs = cache.block_size();
  for (const SequenceChunk& c : batch) max_blocks = std::max(max_blocks, c.blocks.size());
  tables.assign(batch.size() * max_blocks, 0);
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceChunk& c = batch[s];
    const int64_t n = static_cast<int64_t>(c.tokens.size()), end = c.start + n;
    LW_CHECK(n > 0 && c.start >= 0, "forward: sequence " << s << " of the batch has " << n << " tokens at " << c.start);
    LW_CHECK(KvCache::blocks_for(end, bs) <= static_cast<int64_t>(c.blocks.size()),
             "forward: sequence " << s << " reaches position " << end - 1 << " but its block table holds " << c.blocks.size()
                                  << " blocks of " << bs);
    for (size_t b = 0; b < c.blocks.size(); ++b) {
      LW_CHECK(c.blocks[b] >= 0 && c.blocks[b] < cache.num_blocks(),
               "forward: sequence " << s << " names block " << c.blocks[b] << " of a cache of " << cache.num_blocks());
      tables[s * max_blocks + b] = c.blocks[b];
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = c.start + j;
      const int32_t id = c.tokens[static_cast<size_t>(j)];
      LW_CHECK(id >= 0 && id < vocab, "forward: token " << id << " of sequence " << s << " is outside the vocabulary of " << vocab);
      ids.push_back(id);
      positions.push_back(p);
      slots.push_back(static_cast<int64_t>(c.blocks[static_cast<size_t>(p / bs)]) * bs + p % bs);
      if (c.logits == SequenceChunk::Logits::all || (c.logits == SequenceChunk::Logits::last && j == n - 1))
        rows.push_back(static_cast<int32_t>(tokens + j));
    }
    query_lens.push_back(static_cast<int32_t>(n));
    context_lens.push_back(static_cast<int32_t>(end));
    tokens += n;
  }
}

BatchLayout::BatchLayout(Context& ctx, const HostLayout& h, size_t sequences, int attention_group) {
  ids = ctx.to_device(host_vector(h.ids));
  positions = ctx.to_device(host_vector(h.positions));
  slots = ctx.to_device(host_vector(h.slots));
  block_tables = ctx.to_device(host_vector(h.tables)).view({static_cast<int64_t>(sequences), static_cast<int64_t>(h.max_blocks)});
  tokens = h.tokens;
  logits = static_cast<int64_t>(h.rows.size());
  if (logits > 0) logit_rows = ctx.to_device(host_vector(h.rows));
  attention = ops::plan_prefill(ctx, h.query_lens, h.context_lens, attention_group);
}

}  // namespace lw::model
