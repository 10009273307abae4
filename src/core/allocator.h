// A caching device allocator: freed blocks are kept in size bins and handed out again, so the
// steady state of an inference loop makes no cudaMalloc/cudaFree calls. Private pools keep the
// blocks a captured graph uses out of everyone else's reach (PrivatePool).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lw {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // handed out and not yet returned (rounded sizes)
  size_t cached_bytes = 0;          // returned and kept for reuse by anyone
  size_t pooled_bytes = 0;          // returned and kept by a private pool
  size_t peak_allocated_bytes = 0;
  uint64_t allocations = 0;         // allocate() calls
  uint64_t cache_hits = 0;          // allocate() calls served from the cache
  uint64_t device_allocations = 0;  // cudaMalloc calls made
};

class CachingAllocator {
 public:
  explicit CachingAllocator(int device);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns at least `bytes` of device memory, 256-byte aligned; nullptr for 0 bytes.
  // Throws lw::Error when the device is out of memory even after the cache is released.
  void* allocate(size_t bytes);
  // Returns a block to the cache; throws lw::Error for a pointer this allocator did not give.
  void deallocate(void* ptr);
  // Frees every cached block back to the device.
  void empty_cache();
  AllocatorStats stats() const;
  int device() const { return device_; }

  // Private pools. While a pool is active, allocate() serves it from its own free blocks or
  // makes the block it hands out the pool's, and a block freed (any block: the work recorded
  // while the pool is active may use it) becomes the pool's free block. A pool's blocks freed
  // later return to it as well, so no allocation outside the pool ever reuses them: a graph
  // replay may write any block its capture touched. One pool is active at a time, for every
  // caller of this allocator. release_pool gives the pool's free blocks to the shared cache;
  // its blocks still in use return there when freed.
  using PoolId = uint64_t;
  PoolId create_pool();
  void begin_pool(PoolId pool);
  void end_pool();
  void release_pool(PoolId pool);
  // Bytes a pool owns (in use and free).
  size_t pool_bytes(PoolId pool) const;

  // Sizes are rounded to 512 bytes below 1 MiB and to 2 MiB above, so blocks are reusable.
  static size_t round_size(size_t bytes);

 private:
  using Bins = std::map<size_t, std::vector<void*>>;  // rounded size -> free blocks
  struct Block {
    size_t size = 0;
    PoolId pool = 0;  // 0: the shared cache
  };
  struct Pool {
    Bins free;
    size_t bytes = 0;  // owned, in use or free
  };
  void release_cache_locked();
  void release_pool_locked(PoolId pool);
  Pool& pool_locked(PoolId pool, const char* what);

  int device_;
  mutable std::mutex mu_;
  Bins free_;                               // the shared cache
  std::unordered_map<void*, Block> live_;   // blocks handed out
  std::map<PoolId, Pool> pools_;
  PoolId next_pool_ = 1;
  PoolId active_ = 0;
  AllocatorStats stats_;
};

// A private pool of `allocator` for as long as this object lives (its blocks then return to the
// shared cache). use() makes it the allocator's active pool while `work` runs.
class PrivatePool {
 public:
  explicit PrivatePool(CachingAllocator& allocator) : allocator_(allocator), id_(allocator.create_pool()) {}
  ~PrivatePool() { allocator_.release_pool(id_); }
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;
  template <class F>
  void use(F&& work) {
    allocator_.begin_pool(id_);
    try {
      work();
    } catch (...) {
      allocator_.end_pool();
      throw;
    }
    allocator_.end_pool();
  }
  size_t bytes() const { return allocator_.pool_bytes(id_); }

 private:
  CachingAllocator& allocator_;
  CachingAllocator::PoolId id_;
};

}  // namespace lw
