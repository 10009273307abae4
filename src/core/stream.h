// RAII owners of GPU streams and events.
#pragma once
#include "gpu/runtime.h"

namespace lw {

class Stream {
 public:
  Stream();  // a non-blocking stream
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void synchronize() const;
  // Milliseconds from `start` to this event; both must have been recorded and completed.
  float elapsed_ms_since(const Event& start) const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A captured sequence of stream work (a CUDA graph, a HIP graph), replayed with one launch.
// The host target has none: graphs_supported() says so and capture() throws there.
class Graph {
 public:
  static bool graphs_supported();
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Records what `work` queues on `stream` (nothing runs) and instantiates it.
  template <class F>
  void capture(const Stream& stream, F&& work) {
    begin(stream);
    try {
      work();
    } catch (...) {
      abandon(stream);
      throw;
    }
    end(stream);
  }
  bool ready() const { return exec_ != nullptr; }
  void launch(const Stream& stream) const;

 private:
  void begin(const Stream& stream);
  void end(const Stream& stream);
  void abandon(const Stream& stream);
#if defined(LW_GPU_GRAPHS)
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
#else
  void* exec_ = nullptr;
#endif
};

}  // namespace lw
