#include "parallel/nccl_communicator.h"

#include <mutex>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/logging.h"
#include "ops/elementwise.h"

// LW_HAVE_NCCL: a GPU target with NCCL / RCCL (cmake/LwGpu.cmake; never the emulator).
#if defined(LW_HAVE_NCCL)
#include <nccl.h>
#define LW_NCCL 1
#endif

namespace lw::parallel {

#if defined(LW_NCCL)

namespace {

static_assert(sizeof(ncclUniqueId) <= sizeof(GroupId::bytes), "NCCL's unique id outgrew GroupId");

#define LW_NCCL_CHECK(call, what)                                                              \
  do {                                                                                         \
    const ncclResult_t lw_nccl_r = (call);                                                     \
    LW_CHECK(lw_nccl_r == ncclSuccess || lw_nccl_r == ncclInProgress,                          \
             what << ": " << ncclGetErrorString(lw_nccl_r) << " (" << #call << ")");           \
  } while (0)

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    default: LW_FAIL("NCCL collectives: unsupported dtype " << dtype_name(dt));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Context& ctx, const GroupId& id, int rank, int size) : Communicator(rank, size) {
    ncclUniqueId uid;
    std::memcpy(&uid, id.bytes.data(), sizeof(uid));
    LW_CUDA_CHECK(cudaSetDevice(ctx.device()));
    LW_NCCL_CHECK(ncclCommInitRank(&comm_, size, uid, rank),
                  "rank " << rank << " of " << size << " joining the NCCL group on device " << ctx.device());
  }
  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_) ncclCommDestroy(comm_);
  }

  void all_reduce_sum(Context& ctx, const Tensor& x) override {
    check_all_reduce(x);
    if (ctx.deterministic()) return ordered_all_reduce_sum(ctx, x);
    std::lock_guard<std::mutex> lock(mu_);
    check_alive("all_reduce_sum");
    LW_NCCL_CHECK(ncclAllReduce(x.data_ptr(), x.data_ptr(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), ncclSum,
                                comm_, ctx.stream().get()),
                  "all_reduce_sum of " << x.describe() << " on rank " << rank());
  }

  // NCCL's sum order follows its algorithm and chunking, which change with the message size (so
  // with the batch): in deterministic mode every rank gathers all the parts and adds them in
  // rank order, which gives each element the same sum whatever else is in the message.
  void ordered_all_reduce_sum(Context& ctx, const Tensor& x) {
    if (size() == 1) return;
    const Tensor flat = x.view({x.numel()});
    Tensor parts = ctx.empty({static_cast<int64_t>(size()), x.numel()}, x.dtype());
    all_gather(ctx, flat, parts);
    ops::add(ctx, parts.select(0, 0), parts.select(0, 1), flat);
    for (int r = 2; r < size(); ++r) ops::add(ctx, flat, parts.select(0, r), flat);
  }

  void all_gather(Context& ctx, const Tensor& in, const Tensor& out) override {
    check_all_gather(in, out);
    std::lock_guard<std::mutex> lock(mu_);
    check_alive("all_gather");
    LW_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), comm_,
                                ctx.stream().get()),
                  "all_gather of " << in.describe() << " on rank " << rank());
  }

  // Polls the stream and NCCL's asynchronous error state, so a lost peer or a stopped group
  // ends the wait with a message instead of a hang.
  void synchronize(Context& ctx) override {
    const auto start = std::chrono::steady_clock::now();
    const double limit = group_timeout_seconds();
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaStreamQuery(ctx.stream().get());
      if (q == cudaSuccess) return;
      LW_CHECK(q == cudaErrorNotReady, "rank " << rank() << ": the stream failed: " << cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(mu_);
        check_alive("synchronize");
        LW_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async), "rank " << rank() << " reading NCCL's error state");
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        abort(std::string("NCCL reported ") + ncclGetErrorString(async));
        LW_FAIL("rank " << rank() << ": the NCCL group failed: " << ncclGetErrorString(async));
      }
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > limit) {
        abort("rank " + std::to_string(rank()) + " timed out");
        LW_FAIL("rank " << rank() << ": the group did not finish a step in " << limit
                        << " s (a peer is gone or stuck; LW_DIST_TIMEOUT sets the limit); the group was stopped");
      }
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Any thread: the communicator is only ever used under mu_, so the abort cannot free it
  // under a call of the rank's own thread; NCCL work in flight on the stream returns.
  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) return;
    log().warn("rank {}: stopping the NCCL group: {}", rank(), why);
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  void check_alive(const char* op) const {  // under mu_
    LW_CHECK(comm_, op << " on rank " << rank() << ": the group was stopped");
  }

  std::mutex mu_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() { return true; }

GroupId nccl_group_id() {
  ncclUniqueId uid;
  LW_NCCL_CHECK(ncclGetUniqueId(&uid), "making the NCCL group id");
  GroupId id;
  std::memcpy(id.bytes.data(), &uid, sizeof(uid));
  return id;
}

std::unique_ptr<Communicator> nccl_communicator(Context& ctx, const GroupId& id, int rank, int size) {
  return std::make_unique<NcclCommunicator>(ctx, id, rank, size);
}

#else

bool nccl_available() { return false; }

GroupId nccl_group_id() { LW_FAIL("this build has no NCCL / RCCL (a GPU target with the library is needed)"); }

std::unique_ptr<Communicator> nccl_communicator(Context&, const GroupId&, int, int) {
  LW_FAIL("this build has no NCCL / RCCL (a GPU target with the library is needed)");
}

#endif

}  // namespace lw::parallel
