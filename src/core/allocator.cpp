#include "core/allocator.h"

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
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= size;
    ++stats_.cache_hits;
  } else {
    DeviceGuard guard(device_);
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation && stats_.cached_bytes > 0) {
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
  live_.emplace(ptr, size);
  stats_.allocated_bytes += size;
  if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(ptr);
  LW_CHECK(it != live_.end(), "deallocate of pointer " << ptr << " that device " << device_
                                                       << "'s allocator did not hand out (or already took back)");
  const size_t size = it->second;
  live_.erase(it);
  stats_.allocated_bytes -= size;
  stats_.cached_bytes += size;
  free_[size].push_back(ptr);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mu_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  DeviceGuard guard(device_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) LW_CUDA_CHECK(cudaFree(p));
  }
  free_.clear();
  stats_.cached_bytes = 0;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace lw
