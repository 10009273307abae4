#include "core/allocator.h"

#include <algorithm>

#include "core/logging.h"
#include "gpu/runtime.h"

namespace lw {

namespace {
constexpr size_t kSmall = 512;
constexpr size_t kLarge = size_t(2) << 20;
constexpr size_t kSmallLimit = size_t(1) << 20;

std::string mib(size_t b) { return std::to_string(b / (1024.0 * 1024.0)).substr(0, 8) + " MiB"; }

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    LW_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) LW_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};
}  // namespace

CachingAllocator::CachingAllocator(int device) : device_(device) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mu_);
  if (!live_.empty()) {
    log().warn("caching allocator of device {} destroyed with {} blocks ({}) still in use", device_, live_.size(),
               mib(stats_.allocated_bytes));
  }
  try {
    while (!pools_.empty()) release_pool_locked(pools_.begin()->first);
    release_cache_locked();
  } catch (const std::exception& e) {
    log().error("releasing the allocator cache failed: {}", e.what());
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes <= kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  std::lock_guard lock(mu_);
  ++stats_.allocations;
  void* ptr = nullptr;
  Pool* pool = active_ ? &pool_locked(active_, "allocate from") : nullptr;
  if (pool) {
    if (auto it = pool->free.find(size); it != pool->free.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      stats_.pooled_bytes -= size;
      ++stats_.cache_hits;
      live_.emplace(ptr, Block{size, active_});
      stats_.allocated_bytes += size;
      stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
      return ptr;
    }
  }
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= size;
    ++stats_.cache_hits;
  } else {
    DeviceGuard guard(device_);
    cudaError_t err = cudaMalloc(&ptr, size);
    // Not while a pool is active: that is a graph capture, which cudaFree would break.
    if (err == cudaErrorMemoryAllocation && stats_.cached_bytes > 0 && active_ == 0) {
      (void)cudaGetLastError();
      release_cache_locked();
      err = cudaMalloc(&ptr, size);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      LW_FAIL("out of device memory: cannot allocate " << mib(size) << " on device " << device_ << " ("
                                                       << cudaGetErrorString(err) << "); lightwave holds "
                                                       << mib(stats_.allocated_bytes) << " in use, the device has "
                                                       << mib(free_b) << " free of " << mib(total_b));
    }
    ++stats_.device_allocations;
  }
  if (pool) pool->bytes += size;
  live_.emplace(ptr, Block{size, active_});
  stats_.allocated_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(ptr);
  LW_CHECK(it != live_.end(), "deallocate of pointer " << ptr << " that device " << device_
                                                       << "'s allocator did not hand out (or already took back)");
  Block b = it->second;
  live_.erase(it);
  stats_.allocated_bytes -= b.size;
  if (b.pool == 0 && active_ != 0) {  // used by the work being recorded: the active pool's now
    b.pool = active_;
    pool_locked(active_, "free into").bytes += b.size;
  }
  if (b.pool != 0) {
    pool_locked(b.pool, "free into").free[b.size].push_back(ptr);
    stats_.pooled_bytes += b.size;
    return;
  }
  stats_.cached_bytes += b.size;
  free_[b.size].push_back(ptr);
}

CachingAllocator::Pool& CachingAllocator::pool_locked(PoolId pool, const char* what) {
  auto it = pools_.find(pool);
  LW_CHECK(it != pools_.end(), "device " << device_ << "'s allocator: " << what << " private pool " << pool
                                         << ", which it does not have (released?)");
  return it->second;
}

CachingAllocator::PoolId CachingAllocator::create_pool() {
  std::lock_guard lock(mu_);
  const PoolId id = next_pool_++;
  pools_.emplace(id, Pool{});
  return id;
}

void CachingAllocator::begin_pool(PoolId pool) {
  std::lock_guard lock(mu_);
  pool_locked(pool, "begin");
  LW_CHECK(active_ == 0, "device " << device_ << "'s allocator: private pool " << pool << " begun while pool "
                                   << active_ << " is active");
  active_ = pool;
}

void CachingAllocator::end_pool() {
  std::lock_guard lock(mu_);
  LW_CHECK(active_ != 0, "device " << device_ << "'s allocator: end_pool without an active pool");
  active_ = 0;
}

void CachingAllocator::release_pool(PoolId pool) {
  std::lock_guard lock(mu_);
  release_pool_locked(pool);
}

void CachingAllocator::release_pool_locked(PoolId pool) {
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  if (active_ == pool) active_ = 0;
  for (auto& [size, blocks] : it->second.free) {
    stats_.pooled_bytes -= size * blocks.size();
    stats_.cached_bytes += size * blocks.size();
    std::vector<void*>& shared = free_[size];
    shared.insert(shared.end(), blocks.begin(), blocks.end());
  }
  for (auto& [ptr, b] : live_)
    if (b.pool == pool) b.pool = 0;
  pools_.erase(it);
}

size_t CachingAllocator::pool_bytes(PoolId pool) const {
  std::lock_guard lock(mu_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mu_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  DeviceGuard guard(device_);
  for (auto& [size, blocks] : free_) {
    while (!blocks.empty()) {  // each block leaves the cache before it is freed: a failure keeps the rest
      void* p = blocks.back();
      blocks.pop_back();
      stats_.cached_bytes -= size;
      LW_CUDA_CHECK(cudaFree(p));
    }
  }
  free_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace lw
