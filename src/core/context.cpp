#include "core/context.h"

#include "core/logging.h"

namespace lw {

Context::Context(int device) : device_(device) {
  const int count = gpu::device_count();
  LW_CHECK(count > 0, "no GPU found for the " << gpu::target_name() << " target of this build"
                                              << " (rebuild with -DLW_GPU=host to run on the CPU emulator)");
  LW_CHECK(device >= 0 && device < count, "device " << device << " does not exist; this machine has " << count);
  LW_CUDA_CHECK(cudaSetDevice(device));
  LW_CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
  caps_ = gpu::query_device_caps(device);
  warp_size_ = caps_.warp_size;
  allocator_ = std::make_unique<CachingAllocator>(device);
  stream_ = std::make_unique<Stream>();
  log().info("context on device {}: {}", device, caps_.describe());
}

Context::~Context() {
  try {
    if (stream_) stream_->synchronize();
  } catch (const std::exception& e) {
    log().error("synchronising the stream of device {} at shutdown failed: {}", device_, e.what());
  }
  resources_.clear();
  while (!order_.empty()) order_.pop_back();  // newest first
  stream_.reset();
  allocator_.reset();
}

Tensor Context::to_device(const Tensor& host) {
  LW_CHECK(host.device() == Device::host, "to_device of " << host.describe() << ": expected a host tensor");
  ++host_transfers_;
  Tensor t = empty(host.shape(), host.dtype());
  t.copy_from(host, stream_->get());
  return t;
}

Tensor Context::to_host(const Tensor& device) {
  ++host_transfers_;
  synchronize();
  Tensor t = Tensor::empty_host(device.shape(), device.dtype());
  t.copy_from(device, stream_->get());
  return t;
}

}  // namespace lw
