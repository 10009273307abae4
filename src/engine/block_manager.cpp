#include "engine/block_manager.h"

#include <algorithm>

#include "base/error.h"

namespace lw::engine {

BlockManager::BlockManager(int64_t num_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching) {
  LW_CHECK(num_blocks > 0 && num_blocks <= INT32_MAX && block_size > 0,
           "BlockManager: " << num_blocks << " blocks of " << block_size << " tokens");
  refs_.assign(static_cast<size_t>(num_blocks), 0);
  info_.resize(static_cast<size_t>(num_blocks));
  // Lowest ids first out.
  for (int64_t b = num_blocks; b-- > 0;) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockManager::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    forget(b);
  } else {
    return -1;
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockManager::release(int32_t block) {
  LW_CHECK(block >= 0 && block < total_blocks() && refs_[static_cast<size_t>(block)] > 0,
           "BlockManager: release of block " << block << ", which holds no reference");
  if (--refs_[static_cast<size_t>(block)] > 0) return;
  Cached& c = info_[static_cast<size_t>(block)];
  if (c.published) c.lru = lru_.insert(lru_.end(), block);
  else free_.push_back(block);
}

uint64_t BlockManager::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, then a final mix (splitmix64).
  uint64_t h = 1469598103934665603ull ^ parent;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

int32_t BlockManager::lookup(uint64_t hash, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return -1;
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const int32_t b = it->second;
  Cached& c = info_[static_cast<size_t>(b)];
  // The hash names a candidate; the tokens decide (a collision is a miss, not wrong text).
  if (!std::equal(c.tokens.begin(), c.tokens.end(), tokens.begin(), tokens.end())) return -1;
  if (refs_[static_cast<size_t>(b)]++ == 0) lru_.erase(c.lru);
  ++hits_;
  return b;
}

void BlockManager::publish(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return;
  LW_CHECK(block >= 0 && block < total_blocks() && refs_[static_cast<size_t>(block)] > 0,
           "BlockManager: publish of block " << block << ", which holds no reference");
  LW_CHECK(static_cast<int>(tokens.size()) == block_size_,
           "BlockManager: only full blocks are published (" << tokens.size() << " of " << block_size_ << " tokens)");
  Cached& c = info_[static_cast<size_t>(block)];
  if (c.published || by_hash_.count(hash)) return;
  c.hash = hash;
  c.tokens.assign(tokens.begin(), tokens.end());
  c.published = true;
  by_hash_.emplace(hash, block);
}

bool BlockManager::can_append(const SequenceBlocks& seq, int64_t tokens) const {
  return blocks_for(tokens) - static_cast<int64_t>(seq.ids.size()) <= available_blocks();
}

bool BlockManager::allocate(SequenceBlocks& seq, int64_t tokens) {
  const int64_t need = blocks_for(tokens);
  while (static_cast<int64_t>(seq.ids.size()) < need) {
    const int32_t b = allocate();
    if (b < 0) return false;
    seq.ids.push_back(b);
  }
  return true;
}

int64_t BlockManager::reuse_prefix(SequenceBlocks& seq, std::span<const int32_t> tokens) {
  LW_CHECK(seq.ids.empty(), "BlockManager: prefix reuse for a sequence that holds " << seq.ids.size() << " blocks");
  const auto bs = static_cast<size_t>(block_size_);
  uint64_t parent = 0;
  for (size_t i = 0; (i + 1) * bs <= tokens.size(); ++i) {
    const std::span<const int32_t> content = tokens.subspan(i * bs, bs);
    const uint64_t h = chain_hash(parent, content);
    const int32_t b = lookup(h, content);
    if (b < 0) break;
    seq.ids.push_back(b);
    seq.hashes.push_back(h);
    parent = h;
  }
  return static_cast<int64_t>(seq.ids.size() * bs);
}

void BlockManager::publish_full(SequenceBlocks& seq, std::span<const int32_t> computed) {
  const auto bs = static_cast<size_t>(block_size_);
  const size_t full = computed.size() / bs;
  LW_CHECK(full <= seq.ids.size(), "BlockManager: " << computed.size() << " computed tokens in " << seq.ids.size()
                                                    << " blocks of " << bs);
  for (size_t i = seq.hashes.size(); i < full; ++i) {
    const std::span<const int32_t> content = computed.subspan(i * bs, bs);
    const uint64_t h = chain_hash(i ? seq.hashes[i - 1] : 0, content);
    publish(seq.ids[i], h, content);
    seq.hashes.push_back(h);
  }
}

void BlockManager::free(SequenceBlocks& seq) {
  for (int32_t b : seq.ids) release(b);
  seq.ids.clear();
  seq.hashes.clear();
}

void BlockManager::forget(int32_t block) {
  Cached& c = info_[static_cast<size_t>(block)];
  if (!c.published) return;
  if (refs_[static_cast<size_t>(block)] == 0) lru_.erase(c.lru);
  by_hash_.erase(c.hash);
  c = Cached{};
}

}  // namespace lw::engine
