#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/allocator.h"
#include "gpu/runtime.h"

namespace lw {

const char* device_name(Device d) { return d == Device::gpu ? "gpu" : "host"; }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Storage::Storage(size_t bytes, Device device, CachingAllocator* allocator)
    : bytes_(bytes), device_(device), allocator_(allocator) {
  if (bytes == 0) return;
  if (device == Device::gpu) {
    LW_CHECK(allocator != nullptr, "device storage needs an allocator");
    data_ = allocator->allocate(bytes);
  } else {
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    LW_CHECK(data_ != nullptr, "out of host memory allocating " << bytes << " bytes");
  }
}

Storage::~Storage() {
  if (!data_) return;
  if (device_ == Device::gpu) {
    try {
      allocator_->deallocate(data_);
    } catch (...) {
      // A destructor must not throw; the allocator has already logged the problem.
    }
  } else {
    std::free(data_);
  }
}

static std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

static int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    LW_CHECK(d >= 0, "tensor shape " << shape_str(shape) << " has a negative dimension");
    LW_CHECK(d == 0 || n <= INT64_MAX / d, "tensor shape " << shape_str(shape) << " overflows 64-bit element counts");
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, CachingAllocator& allocator) {
  Tensor t;
  const int64_t n = checked_numel(shape);
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(n) * dtype_size(dtype), Device::gpu, &allocator);
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = Device::gpu;
  return t;
}

Tensor Tensor::empty_host(std::vector<int64_t> shape, DType dtype) {
  Tensor t;
  const int64_t n = checked_numel(shape);
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(n) * dtype_size(dtype), Device::host, nullptr);
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = Device::host;
  return t;
}

int Tensor::wrap_dim(int d) const {
  const int n = dim();
  LW_CHECK(d >= -n && d < n, "dimension " << d << " out of range for tensor " << describe());
  return d < 0 ? d + n : d;
}

int64_t Tensor::size(int d) const { return shape_[wrap_dim(d)]; }
int64_t Tensor::stride(int d) const { return strides_[wrap_dim(d)]; }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  LW_CHECK(defined(), "data of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(std::vector<int64_t> shape) const {
  LW_CHECK(defined(), "view of an undefined tensor");
  LW_CHECK(is_contiguous(), "view" << shape_str(shape) << " of non-contiguous tensor " << describe());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      LW_CHECK(infer < 0, "view" << shape_str(shape) << ": only one dimension may be -1");
      infer = static_cast<int>(i);
    } else {
      LW_CHECK(shape[i] >= 0, "view" << shape_str(shape) << ": negative dimension");
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    LW_CHECK(known > 0 && numel() % known == 0,
             "view" << shape_str(shape) << " does not divide the " << numel() << " elements of " << describe());
    shape[infer] = numel() / known;
  }
  LW_CHECK(checked_numel(shape) == numel(),
           "view" << shape_str(shape) << " has a different element count than " << describe());
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  const int dd = wrap_dim(d);
  LW_CHECK(0 <= start && start <= end && end <= shape_[dd],
           "slice [" << start << ", " << end << ") of dimension " << d << " out of range for " << describe());
  Tensor t = *this;
  t.offset_ += start * strides_[dd];
  t.shape_[dd] = end - start;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  const int dd = wrap_dim(d);
  LW_CHECK(0 <= index && index < shape_[dd], "index " << index << " out of range for dimension " << d << " of "
                                                     << describe());
  Tensor t = *this;
  t.offset_ += index * strides_[dd];
  t.shape_.erase(t.shape_.begin() + dd);
  t.strides_.erase(t.strides_.begin() + dd);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int a = wrap_dim(d0), b = wrap_dim(d1);
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::unflatten(int d, const std::vector<int64_t>& sizes) const {
  const int dd = wrap_dim(d);
  int64_t product = 1;
  for (int64_t s : sizes) {
    LW_CHECK(s >= 0, "unflatten" << shape_str(sizes) << ": negative size");
    product *= s;
  }
  LW_CHECK(product == shape_[dd], "unflatten of dimension " << d << " of " << describe() << " into " << shape_str(sizes)
                                                           << ": sizes must multiply to " << shape_[dd]);
  Tensor t = *this;
  std::vector<int64_t> strides(sizes.size());
  int64_t s = strides_[dd];
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= sizes[i];
  }
  t.shape_.erase(t.shape_.begin() + dd);
  t.strides_.erase(t.strides_.begin() + dd);
  t.shape_.insert(t.shape_.begin() + dd, sizes.begin(), sizes.end());
  t.strides_.insert(t.strides_.begin() + dd, strides.begin(), strides.end());
  return t;
}

void Tensor::copy_from(const Tensor& src, cudaStream_t stream) {
  LW_CHECK(defined() && src.defined(), "copy between undefined tensors");
  LW_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_,
           "copy from " << src.describe() << " into " << describe() << ": shapes and dtypes must match");
  LW_CHECK(is_contiguous() && src.is_contiguous(),
           "copy from " << src.describe() << " into " << describe() << ": both must be contiguous");
  if (nbytes() == 0) return;
  if (device_ == Device::host && src.device_ == Device::host) {
    std::memmove(data_ptr(), src.data_ptr(), nbytes());
  } else {
    LW_CUDA_CHECK(cudaMemcpyAsync(data_ptr(), src.data_ptr(), nbytes(), cudaMemcpyDefault, stream));
    if (device_ == Device::host || src.device_ == Device::host) LW_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined tensor>";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " " + device_name(device_);
}

}  // namespace lw
