#include "core/stream.h"

namespace lw {

Stream::Stream() { LW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { LW_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event() { LW_CUDA_CHECK(cudaEventCreate(&event_)); }
Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}
void Event::record(const Stream& stream) { LW_CUDA_CHECK(cudaEventRecord(event_, stream.get())); }
void Event::synchronize() const { LW_CUDA_CHECK(cudaEventSynchronize(event_)); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  LW_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace lw
