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

#if defined(LW_GPU_GRAPHS)

bool Graph::graphs_supported() { return true; }

Graph::~Graph() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
}

void Graph::begin(const Stream& stream) {
  LW_CHECK(!exec_ && !graph_, "a graph is captured once");
  // Relaxed: the caching allocator may still reach cudaMalloc while the work is recorded.
  LW_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeRelaxed));
}

void Graph::end(const Stream& stream) {
  LW_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph_));
  LW_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec_, graph_, 0));
}

void Graph::abandon(const Stream& stream) {
  cudaGraph_t partial = nullptr;
  (void)cudaStreamEndCapture(stream.get(), &partial);
  if (partial) (void)cudaGraphDestroy(partial);
  (void)cudaGetLastError();
}

void Graph::launch(const Stream& stream) const {
  LW_CHECK(exec_, "launch of a graph that was not captured");
  LW_CUDA_CHECK(cudaGraphLaunch(exec_, stream.get()));
}

#else

bool Graph::graphs_supported() { return false; }
Graph::~Graph() = default;
void Graph::begin(const Stream&) { LW_FAIL("the host target has no graphs"); }
void Graph::end(const Stream&) {}
void Graph::abandon(const Stream&) {}
void Graph::launch(const Stream&) const { LW_FAIL("the host target has no graphs"); }

#endif

}  // namespace lw
