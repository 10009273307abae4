// Tensor: a typed, strided view of host or device memory, sharing its storage with the views
// made from it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "base/error.h"
#include "gpu/runtime.h"

namespace lw {

class CachingAllocator;

enum class Device : uint8_t { host, gpu };
const char* device_name(Device d);

// Memory owned by one or more tensors: device memory from a CachingAllocator, or host memory.
class Storage {
 public:
  Storage(size_t bytes, Device device, CachingAllocator* allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  CachingAllocator* allocator_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // Contiguous tensor on the device, from `allocator`; contents uninitialised.
  static Tensor empty(std::vector<int64_t> shape, DType dtype, CachingAllocator& allocator);
  // Contiguous tensor in host memory; contents uninitialised.
  static Tensor empty_host(std::vector<int64_t> shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t size(int d) const;    // negative d counts from the end
  int64_t stride(int d) const;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* data_ptr() const;
  template <class T>
  T* data() const {
    LW_CHECK(dtype_of<T> == dtype_, "tensor " << describe() << " accessed as " << dtype_name(dtype_of<T>));
    return static_cast<T*>(data_ptr());
  }

  // Views sharing storage. view() needs a contiguous tensor; one dimension may be -1.
  Tensor view(std::vector<int64_t> shape) const;
  Tensor slice(int d, int64_t start, int64_t end) const;
  Tensor select(int d, int64_t index) const;
  Tensor transpose(int d0, int d1) const;
  // Splits dimension d into `sizes` (their product must be size(d)); works on any strides.
  Tensor unflatten(int d, const std::vector<int64_t>& sizes) const;

  // Copies `src` (same shape and dtype, both contiguous) into this tensor, ordered on `stream`.
  // A copy that touches host memory has completed when this returns.
  void copy_from(const Tensor& src, cudaStream_t stream);

  // "bf16[2, 3] gpu", for messages.
  std::string describe() const;

 private:
  int wrap_dim(int d) const;

  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::f32;
  Device device_ = Device::host;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace lw
