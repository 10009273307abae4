// The CUDA runtime API subset of the SIMT emulator. Device memory is host memory obtained
// with aligned_alloc; every allocation is recorded so that cudaFree of a foreign pointer and
// double frees are reported as errors, as the CUDA runtime reports them.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include <unistd.h>

#include "lw_simt/emulator.h"
#include "lw_simt/runtime.h"

struct CUstream_st {
  unsigned flags = 0;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point when{};
  bool recorded = false;
};

namespace {

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local int tl_device = 0;

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

struct Allocations {
  std::mutex mu;
  std::unordered_map<void*, size_t> device;
  std::unordered_map<void*, size_t> pinned;
  size_t device_bytes = 0;
};
// Never destroyed: device memory may be freed by static destructors that run after this
// function's statics would have been.
Allocations& allocations() {
  static Allocations* a = new Allocations;
  return *a;
}

size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t(1) << 34;
}

cudaError_t alloc(std::unordered_map<void*, size_t>& table, void** ptr, size_t bytes, bool device) {
  if (!ptr) return set_error(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > physical_memory()) return set_error(cudaErrorMemoryAllocation);
  // The exact size, so that AddressSanitizer sees the first byte past the end.
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return set_error(cudaErrorMemoryAllocation);
  Allocations& a = allocations();
  std::lock_guard lock(a.mu);
  table.emplace(p, bytes);
  if (device) a.device_bytes += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t release(std::unordered_map<void*, size_t>& table, void* ptr, bool device) {
  if (!ptr) return cudaSuccess;
  Allocations& a = allocations();
  std::lock_guard lock(a.mu);
  auto it = table.find(ptr);
  if (it == table.end()) return set_error(device ? cudaErrorInvalidDevicePointer : cudaErrorInvalidValue);
  if (device) a.device_bytes -= it->second;
  table.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

}  // namespace

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return tl_last_error; }

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return set_error(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice);
  tl_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return set_error(cudaErrorInvalidValue);
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return set_error(cudaErrorInvalidValue);
  if (device != 0) return set_error(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  const std::string name = "lightwave SIMT emulator (warp " + std::to_string(lw::simt::kWarpSize) + ")";
  std::strncpy(prop->name, name.c_str(), sizeof(prop->name) - 1);
  prop->totalGlobalMem = physical_memory();
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 64 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = lw::simt::kWarpSize;
  prop->maxThreadsPerBlock = lw::simt::kMaxBlockThreads;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = lw::simt::worker_threads();
  prop->l2CacheSize = 0;
  prop->maxThreadsPerMultiProcessor = lw::simt::kMaxBlockThreads;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return set_error(cudaErrorInvalidValue);
  cudaDeviceProp p;
  if (cudaError_t e = cudaGetDeviceProperties(&p, device)) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = p.warpSize; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; return cudaSuccess;
  }
  return set_error(cudaErrorInvalidValue);
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return set_error(cudaErrorInvalidValue);
  const size_t total = physical_memory();
  Allocations& a = allocations();
  std::lock_guard lock(a.mu);
  *total_bytes = total;
  *free_bytes = a.device_bytes < total ? total - a.device_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) { return alloc(allocations().device, ptr, bytes, true); }
cudaError_t cudaFree(void* ptr) { return release(allocations().device, ptr, true); }
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return alloc(allocations().pinned, ptr, bytes, false); }
cudaError_t cudaFreeHost(void* ptr) { return release(allocations().pinned, ptr, false); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return set_error(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!ptr) return set_error(cudaErrorInvalidValue);
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) { return cudaMemset(ptr, value, bytes); }

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream) return set_error(cudaErrorInvalidValue);
  *stream = new CUstream_st{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  return event ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  if (!event) return set_error(cudaErrorInvalidValue);
  *event = new CUevent_st{};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  event->when = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return set_error(cudaErrorInvalidValue);
  if (!start || !end || !start->recorded || !end->recorded) return set_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
