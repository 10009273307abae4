// A caching device allocator: freed blocks are kept in size bins and handed out again, so the
// steady state of an inference loop makes no cudaMalloc/cudaFree calls.
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
  size_t cached_bytes = 0;          // returned and kept for reuse
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

  // Sizes are rounded to 512 bytes below 1 MiB and to 2 MiB above, so blocks are reusable.
  static size_t round_size(size_t bytes);

 private:
  void release_cache_locked();

  int device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // rounded size -> cached blocks
  std::unordered_map<void*, size_t> live_;     // block -> rounded size
  AllocatorStats stats_;
};

}  // namespace lw
