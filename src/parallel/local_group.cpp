#include "parallel/local_group.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "gpu/compat.h"
#include "gpu/numeric.h"

namespace lw::parallel {

struct LocalGroup::State {
  int size = 0;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const Tensor*> posted;
  bool aborted = false;
  std::string why;

  // Every rank posts its tensor and waits for the others; throws when the group was aborted
  // or a peer does not arrive in time.
  void barrier(int rank, const Tensor* t, const char* op) {
    std::unique_lock<std::mutex> lock(mu);
    LW_CHECK(!aborted, op << " on rank " << rank << ": the group was stopped: " << why);
    if (t) posted[static_cast<size_t>(rank)] = t;
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(group_timeout_seconds());
    const bool done = cv.wait_until(lock, deadline, [&] { return generation != gen || aborted; });
    if (!aborted && !done) {
      aborted = true;
      why = "rank " + std::to_string(rank) + " waited " + std::to_string(group_timeout_seconds()) + " s in " + op +
            " for the other ranks";
      cv.notify_all();
    }
    LW_CHECK(!aborted || generation != gen, op << " on rank " << rank << ": the group was stopped: " << why);
  }

  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    if (!aborted) why = reason;
    aborted = true;
    cv.notify_all();
  }
};

namespace {

// Reads and writes the ranks' buffers with the CPU: on the emulator only, where device memory
// is host memory.
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(LocalGroup::State& g, int rank) : Communicator(rank, g.size), g_(g) {}

  void all_reduce_sum(Context& ctx, const Tensor& x) override {
    check_all_reduce(x);
    ctx.synchronize();
    g_.barrier(rank(), &x, "all_reduce_sum");
    for (const Tensor* t : g_.posted)
      if (t->numel() != x.numel() || t->dtype() != x.dtype()) {
        g_.abort("all_reduce_sum of " + x.describe() + " on rank " + std::to_string(rank()) + " met " + t->describe());
        break;
      }
    std::vector<float> sum(static_cast<size_t>(x.numel()), 0.0f);
    if (!aborted()) visit(x.dtype(), [&]<class T>() {
        for (const Tensor* t : g_.posted) {
          const T* p = t->data<T>();
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += gpu::to_float(p[i]);
        }
      });
    g_.barrier(rank(), nullptr, "all_reduce_sum");  // every rank has read every buffer
    visit(x.dtype(), [&]<class T>() {
      T* p = x.data<T>();
      for (size_t i = 0; i < sum.size(); ++i) p[i] = gpu::from_float<T>(sum[i]);
    });
  }

  void all_gather(Context& ctx, const Tensor& in, const Tensor& out) override {
    check_all_gather(in, out);
    ctx.synchronize();
    g_.barrier(rank(), &in, "all_gather");
    for (const Tensor* t : g_.posted)
      if (t->nbytes() != in.nbytes()) {
        g_.abort("all_gather of " + in.describe() + " on rank " + std::to_string(rank()) + " met " + t->describe());
        break;
      }
    if (!aborted())
      for (size_t r = 0; r < g_.posted.size(); ++r)
        std::memcpy(static_cast<char*>(out.data_ptr()) + r * in.nbytes(), g_.posted[r]->data_ptr(), in.nbytes());
    g_.barrier(rank(), nullptr, "all_gather");
  }

  void synchronize(Context& ctx) override {
    ctx.synchronize();
    std::lock_guard<std::mutex> lock(g_.mu);
    LW_CHECK(!g_.aborted, "rank " << rank() << ": the group was stopped: " << g_.why);
  }

  void abort(const std::string& why) override { g_.abort(why); }

 private:
  bool aborted() {
    std::lock_guard<std::mutex> lock(g_.mu);
    return g_.aborted;
  }
  template <class F>
  static void visit(DType dt, F&& f) {
    switch (dt) {
      case DType::f32: f.template operator()<float>(); break;
      case DType::f16: f.template operator()<half>(); break;
      case DType::bf16: f.template operator()<bfloat16>(); break;
      default: LW_FAIL("all_reduce_sum: unsupported dtype " << dtype_name(dt));
    }
  }

  LocalGroup::State& g_;
};

}  // namespace

LocalGroup::LocalGroup(int size) : state_(std::make_unique<State>()) {
  LW_CHECK(gpu::kEmulator, "the in-process communicator runs on the host target only; GPUs talk through NCCL / RCCL");
  LW_CHECK(size >= 1, "a group of " << size << " ranks");
  state_->size = size;
  state_->posted.resize(static_cast<size_t>(size), nullptr);
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::size() const { return state_->size; }

std::unique_ptr<Communicator> LocalGroup::communicator(int rank) {
  LW_CHECK(rank >= 0 && rank < state_->size, "rank " << rank << " of a group of " << state_->size);
  LW_CHECK(gpu::kEmulator, "the in-process communicator runs on the host target only");
  return std::make_unique<LocalCommunicator>(*state_, rank);
}

}  // namespace lw::parallel
