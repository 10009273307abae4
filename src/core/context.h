// Context: one device and what work on it needs — its properties, capabilities and warp size, a
// caching allocator, a stream, and library handles created on first use by the layers above.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "gpu/device_caps.h"
#include "gpu/runtime.h"

namespace lw {

class Context {
 public:
  explicit Context(int device = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  int warp_size() const { return warp_size_; }
  const cudaDeviceProp& properties() const { return props_; }
  // What the device can do (architecture, matrix cores, memory), queried once: ops choose
  // between their implementations from it (ops/select.h).
  const gpu::DeviceCaps& caps() const { return caps_; }
  std::string device_name() const { return props_.name; }
  CachingAllocator& allocator() { return *allocator_; }
  Stream& stream() { return *stream_; }

  Tensor empty(std::vector<int64_t> shape, DType dtype) { return Tensor::empty(std::move(shape), dtype, *allocator_); }
  Tensor to_device(const Tensor& host);
  Tensor to_host(const Tensor& device);
  void synchronize() { stream_->synchronize(); }
  // Calls of to_device and to_host so far: work that made none (a decode step, say) can be
  // captured into a graph and replayed; a copy from or to the host cannot.
  uint64_t host_transfers() const { return host_transfers_; }

  // Batch-invariant execution: every op computes each row (token, sequence) with a reduction
  // order that depends on that row alone, never on how many rows run with it, where it sits in
  // the batch, or how a context is split. Ops whose fastest implementation varies with the
  // batch take a fixed one instead (docs/ARCHITECTURE.md, "Deterministic mode").
  bool deterministic() const { return deterministic_; }
  void set_deterministic(bool on) { deterministic_ = on; }

  // A per-context resource of type R (a BLAS handle, a communicator), built as R(*this) on
  // first use and destroyed with the context, in reverse order of creation.
  template <class R>
  R& resource() {
    auto it = resources_.find(std::type_index(typeid(R)));
    if (it == resources_.end()) {
      auto r = std::make_shared<R>(*this);
      order_.push_back(r);
      it = resources_.emplace(std::type_index(typeid(R)), r).first;
    }
    return *static_cast<R*>(it->second.get());
  }

 private:
  int device_;
  int warp_size_ = 0;
  bool deterministic_ = false;
  uint64_t host_transfers_ = 0;
  cudaDeviceProp props_{};
  gpu::DeviceCaps caps_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<Stream> stream_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> resources_;
  std::vector<std::shared_ptr<void>> order_;
};

}  // namespace lw
