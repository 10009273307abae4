// The blocks of the paged KV cache: allocation, reference counts for blocks that several
// sequences share, and prefix caching — a full block whose tokens (and everything before
// them) are known is published under a chained content hash, so a later sequence with the
// same prefix reuses it instead of computing it again. Unreferenced published blocks stay
// cached until an allocation needs them, least recently used first.
//
// Two levels: blocks (allocate / release / lookup / publish by hash), and on top of them a
// sequence's blocks (SequenceBlocks: grow, may-append, prefix reuse, publish what is full,
// free), which is what the scheduler uses; the hashing stays in here.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace lw::engine {

// The blocks of one sequence, in position order, and the chain hashes of its leading full
// blocks that are published or were reused (hashes.size() <= ids.size()).
struct SequenceBlocks {
  std::vector<int32_t> ids;
  std::vector<uint64_t> hashes;
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int block_size, bool prefix_caching = true);

  int block_size() const { return block_size_; }
  int64_t total_blocks() const { return static_cast<int64_t>(refs_.size()); }
  // Blocks an allocation can have now: free ones and unreferenced cached ones.
  int64_t available_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t cached_blocks() const { return static_cast<int64_t>(lru_.size()); }
  int32_t references(int32_t block) const { return refs_.at(static_cast<size_t>(block)); }

  // A block for new content (reference count 1), evicting the least recently used cached
  // block when no free one is left; -1 when every block is referenced.
  int32_t allocate();
  // Drops one reference; an unreferenced block returns to the free list, or, if published,
  // stays cached for later lookups.
  void release(int32_t block);

  // The hash of a block's content given the hash of everything before it (0 for the first).
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);
  // The cached block with exactly this content after this prefix, with one more reference;
  // -1 when there is none (or prefix caching is off).
  int32_t lookup(uint64_t hash, std::span<const int32_t> tokens);
  // Makes a full block's content findable by lookup. A block already published, or a hash
  // already held by another block, is left as it is.
  void publish(int32_t block, uint64_t hash, std::span<const int32_t> tokens);

  uint64_t hits() const { return hits_; }  // lookups that found a block

  // ---- a sequence's blocks ----

  // Blocks that hold `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  // May-append: whether allocate(seq, tokens) would succeed now.
  bool can_append(const SequenceBlocks& seq, int64_t tokens) const;
  // Grows seq to hold `tokens` tokens, a block at a time; false when the blocks ran out (seq
  // keeps those it got).
  bool allocate(SequenceBlocks& seq, int64_t tokens);
  // Gives a sequence without blocks the cached blocks of the longest prefix of `tokens` made
  // of whole blocks; returns the tokens they hold (whose K/V need no computing).
  int64_t reuse_prefix(SequenceBlocks& seq, std::span<const int32_t> tokens);
  // Publishes seq's full blocks of `computed` (its tokens whose K/V are in the cache) not
  // published yet, each under the chain hash of everything up to it.
  void publish_full(SequenceBlocks& seq, std::span<const int32_t> computed);
  // Releases every block of seq; it holds none after.
  void free(SequenceBlocks& seq);

 private:
  struct Cached {
    uint64_t hash = 0;
    std::vector<int32_t> tokens;
    bool published = false;
    std::list<int32_t>::iterator lru;  // valid while unreferenced and published
  };
  void forget(int32_t block);

  int block_size_;
  bool prefix_caching_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
  std::vector<Cached> info_;
  std::list<int32_t> lru_;  // unreferenced published blocks, least recently used first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  uint64_t hits_ = 0;
};

}  // namespace lw::engine
