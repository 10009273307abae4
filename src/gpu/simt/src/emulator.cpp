// The SIMT emulator's scheduler. Each block runs on one OS thread; its threads are fibers.
// A fiber runs until it reaches __syncthreads, a warp collective or its end. When no fiber of
// the block can run, pending warp collectives are resolved first (each group of lanes of one
// warp that stopped at the same call site is one collective), then the barrier. This keeps the
// model of independent thread scheduling: lanes that diverged meet a collective separately.
// At warp 64 (AMD CDNA: no independent thread scheduling, each side of a divergent branch runs
// under its own EXEC mask) the call path is part of the site too, so a collective in a helper
// called from both sides of a branch is two partial collectives, as the wavefront computes it.
#include <algorithm>
#include <cstdio>
#include <bit>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>

#include "lw_simt/emulator.h"
#include "lw_simt/shared.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace lw::simt {
namespace {

namespace bc = boost::context;

constexpr int W = kWarpSize;
constexpr uint64_t kFullWarp = W == 64 ? ~0ull : 0xffffffffull;  // every lane of a warp
constexpr size_t kMaxDynamicShared = 64 * 1024;  // the LDS of one AMD CDNA work-group

struct Abort {};  // unwinds a device thread after its block faulted; not a std::exception

enum class State : uint8_t { Ready, AtBarrier, AtCollective, Exited };

struct Thread {
  ThreadView view{};
  unsigned linear = 0;
  int warp = 0;
  int lane = 0;
  State state = State::Ready;
  bool started = false;
  bool abort = false;
  bc::fiber fiber;      // held by the scheduler while the thread is suspended
  bc::fiber scheduler;  // held by the thread while it runs
  Collective op{};
  ValueKind vkind = ValueKind::Bits;  // what the operand of its shuffle is
  int vbytes = 8;
  uint64_t result = 0;
  // Its last shuffle result that was undefined (read from a lane never launched or exited):
  // not a fault by itself; reported when the value is used (see Block::execute).
  bool undef = false;
  CollectiveKind undef_kind{};
  int undef_src = 0;
  std::source_location undef_where;
  uint64_t path = 0;            // hash of the return addresses to its current collective (warp 64)
  const void* frame_top = nullptr;  // frame of the fiber's entry: where the call path ends
  uint32_t warp_sync = 0;   // its warp's collective count at its last collective
  uint64_t last_lanes = 0;  // the lanes of its last collective
  std::source_location barrier_where;
  // The stacks AddressSanitizer is told about at each switch: the fiber's own (from the pool)
  // and the scheduler's (the OS thread's, as the fiber found it when it first ran).
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
};

// Fiber switches told to AddressSanitizer (no-ops without it). Boost.Context's fcontext fibers
// switch stacks without a system call; its ucontext fibers, which annotate the switches
// themselves, cost a signal-mask system call and a clear of the whole stack's shadow memory per
// switch in the sanitizer's swapcontext interceptor, which made the address-sanitizer runs of
// the emulator several times slower. start: right before a switch to the stack at bottom (size
// bytes), `fake` keeping the leaving fiber's fake stack (nullptr: the leaving fiber ends);
// finish: right after arriving, with the fake stack kept when this side left, and where the
// stack just left lies.
#if defined(__SANITIZE_ADDRESS__)
void start_switch(void** fake, const void* bottom, size_t size) { __sanitizer_start_switch_fiber(fake, bottom, size); }
void finish_switch(void* fake, const void** from_bottom, size_t* from_size) {
  __sanitizer_finish_switch_fiber(fake, from_bottom, from_size);
}
#else
void start_switch(void**, const void*, size_t) {}
void finish_switch(void*, const void**, size_t*) {}
#endif

// Stacks are reused across the blocks an OS thread runs in one launch.
class StackPool {
 public:
  explicit StackPool(size_t bytes) : bytes_(bytes) {}
  ~StackPool() {
    for (void* p : free_) std::free(p);
  }
  bc::stack_context allocate() {
    void* p;
    if (free_.empty()) {
      p = std::aligned_alloc(64, bytes_);
      if (!p) throw std::bad_alloc();
    } else {
      p = free_.back();
      free_.pop_back();
    }
    bc::stack_context sc;
    sc.size = bytes_;
    sc.sp = static_cast<char*>(p) + bytes_;
    return sc;
  }
  void deallocate(bc::stack_context& sc) { free_.push_back(static_cast<char*>(sc.sp) - sc.size); }

 private:
  size_t bytes_;
  std::vector<void*> free_;
};

// Allocates a fiber's stack from the pool and notes where it lies in the thread that runs on it.
struct PoolAllocator {
  StackPool* pool;
  Thread* thread;
  bc::stack_context allocate() {
    bc::stack_context sc = pool->allocate();
    thread->stack_bottom = static_cast<char*>(sc.sp) - sc.size;
    thread->stack_size = sc.size;
    return sc;
  }
  void deallocate(bc::stack_context& sc) { pool->deallocate(sc); }
};

size_t stack_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("LW_SIMT_STACK_KB");
    long kb = env ? std::atol(env) : 128;
    return static_cast<size_t>(std::max(16L, kb)) * 1024;
  }();
  return bytes;
}

std::string where_str(const std::source_location& w) {
  if (!w.file_name() || !*w.file_name()) return "";
  std::string f = w.file_name();
  return f + ":" + std::to_string(w.line());
}

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

// Hash of the return addresses from frame `from` (the device function that made a collective) up
// to, not including, frame `top` (the fiber's entry), walked over the frame-pointer chain (lw_simt
// and the code linking it keep frame pointers). The first address is where that function was
// called from, so two calls of one helper from the two sides of a branch differ. Addresses inside
// the function itself are left out: a host compiler may duplicate a shuffle into two paths of one
// function (jump threading), which a GPU compiler never does to a convergent operation. The walk
// stays inside the fiber's stack: each next frame lies above the last and below `top`.
uint64_t call_path(const void* from, const void* top) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto fp = static_cast<void* const*>(from);
  for (int depth = 0; depth < 64 && fp && static_cast<const void*>(fp) < top; ++depth) {
    h = (h ^ reinterpret_cast<uintptr_t>(fp[1])) * 0x100000001b3ull;
    auto next = static_cast<void* const*>(fp[0]);
    if (next <= fp || reinterpret_cast<uintptr_t>(next) % sizeof(void*) != 0) break;
    fp = next;
  }
  return h;
}

// The frame of the function that called the function this is expanded in: the built-ins of
// device.h are always inlined, so for the entry points below it is the device function that
// made the collective.
#define LW_SIMT_CALLER_FRAME() (*static_cast<void* const*>(__builtin_frame_address(0)))

const char* kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::ShflIdx: return "shfl";
    case CollectiveKind::ShflUp: return "shfl_up";
    case CollectiveKind::ShflDown: return "shfl_down";
    case CollectiveKind::ShflXor: return "shfl_xor";
    case CollectiveKind::Ballot: return "ballot";
    case CollectiveKind::Any: return "any";
    case CollectiveKind::All: return "all";
    case CollectiveKind::SyncWarp: return "syncwarp";
    case CollectiveKind::Matrix: return "matrix op";
  }
  return "?";
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// The value an undefined shuffle result is given: a quiet NaN whose payload is kept by
// arithmetic (x86 and ARM return a NaN operand's payload) for float and double, 0xa5 bytes for
// anything else. The sign is ignored when recognising it (negation flips it).
constexpr uint64_t kPoisonF32 = 0x7fe5a5a5ull;
constexpr uint64_t kPoisonF64 = 0x7ffca5a5a5a5a5a5ull;
uint64_t poison_bits(ValueKind k, int bytes) {
  switch (k) {
    case ValueKind::F32: return kPoisonF32;
    case ValueKind::F64: return kPoisonF64;
    case ValueKind::Bits: break;
  }
  return bytes >= 8 ? 0xa5a5a5a5a5a5a5a5ull : 0xa5a5a5a5a5a5a5a5ull >> (64 - 8 * bytes);
}
bool is_poison(uint64_t v, ValueKind k, int bytes) {
  switch (k) {
    case ValueKind::F32: return (v & 0x7fffffffull) == kPoisonF32;
    case ValueKind::F64: return (v & 0x7fffffffffffffffull) == kPoisonF64;
    case ValueKind::Bits: break;
  }
  return v == poison_bits(k, bytes);
}

std::atomic<int> g_sanitize{-1};
std::atomic<uint64_t> g_block_runs{0};

class Block {
 public:
  Block(const LaunchParams& p, const std::function<void()>& body, StackPool& stacks)
      : params_(p), body_(body), stacks_(stacks) {
    nthreads_ = static_cast<int>(p.block.x * p.block.y * p.block.z);
    nwarps_ = (nthreads_ + W - 1) / W;
    threads_.resize(nthreads_);
    if (p.dynamic_shared_bytes) dyn_smem_.reset(static_cast<std::byte*>(std::aligned_alloc(64, round_up(p.dynamic_shared_bytes))));
    sanitize_ = sanitize();
  }

  // Runs block `idx`; returns the faults it found (empty when it ran clean).
  std::vector<Report> run(uint3 idx);

  // ---- called from the device thread that is running ----
  // `caller_frame`: frame of the device function that made the collective (see call_path).
  uint64_t collective(const Collective& c, const void* caller_frame);
  void barrier(std::source_location where);
  bool undefined_values_seen() const { return undefined_reads_ != 0; }
  void check_defined(uint64_t bits, ValueKind k, int bytes, const std::string& what);
  [[noreturn]] void fault_here(Fault f, const std::string& detail, std::source_location where);
  void* dynamic_shared() { return dyn_smem_.get(); }
  SharedRegion& dynamic_region() { return dyn_region_; }
  const char* kernel() const { return params_.kernel; }
  uint3 index() const { return idx_; }
  AccessPoint access_point() const;

 private:
  static size_t round_up(size_t n) { return (n + 63) / 64 * 64; }
  void resume(Thread& t);
  void yield(Thread& t);
  bool resolve_collectives();
  void execute(std::vector<Thread*>& group);
  bool execute_matrix(std::vector<Thread*>& group, uint64_t present);
  bool resolve_barrier();
  void report(Fault f, const Thread& t, std::string where, std::string detail);
  void abort_all();
  // What lane `lane` of `warp` is doing, in words; `asking` is the lane at the collective that misses it.
  std::string lane_status(int warp, int lane, const Thread* asking = nullptr) const;
  std::string undefined_origin(const Thread& holder) const;
  static bool same_collective(const Thread& a, const Thread& b) {
    return same_site(a.op.where, b.op.where) && (W != 64 || a.path == b.path);
  }
  Thread* lane_thread(int warp, int lane) {
    int i = warp * W + lane;
    return i < nthreads_ ? &threads_[i] : nullptr;
  }

  const LaunchParams& params_;
  const std::function<void()>& body_;
  StackPool& stacks_;
  int nthreads_ = 0;
  int nwarps_ = 0;
  bool sanitize_ = false;
  bool aborted_ = false;
  uint3 idx_{};
  std::vector<Thread> threads_;
  std::unique_ptr<std::byte, decltype(&std::free)> dyn_smem_{nullptr, &std::free};
  SharedRegion dyn_region_{"dynamic shared memory"};
  uint32_t epoch_ = 0;                  // barriers passed by this block
  std::vector<uint32_t> warp_counter_;  // collectives resolved per warp
  uint64_t run_id_ = 0;
  int undefined_reads_ = 0;  // shuffles of this block that returned an undefined value
  std::vector<Report> reports_;
};

thread_local Block* tl_block = nullptr;
thread_local Thread* tl_thread = nullptr;

AccessPoint Block::access_point() const {
  return AccessPoint{static_cast<int>(tl_thread->linear), epoch_, tl_thread->warp_sync, run_id_};
}

std::vector<Report> Block::run(uint3 idx) {
  idx_ = idx;
  aborted_ = false;
  epoch_ = 0;
  undefined_reads_ = 0;
  forget_pending_address();
  warp_counter_.assign(nwarps_, 0);
  run_id_ = g_block_runs.fetch_add(1);
  reports_.clear();
  const dim3 bd = params_.block;
  for (int i = 0; i < nthreads_; ++i) {
    Thread& t = threads_[i];
    t.view.thread_idx = {static_cast<unsigned>(i) % bd.x, (static_cast<unsigned>(i) / bd.x) % bd.y,
                         static_cast<unsigned>(i) / (bd.x * bd.y)};
    t.view.block_idx = idx;
    t.view.block_dim = bd;
    t.view.grid_dim = params_.grid;
    t.linear = static_cast<unsigned>(i);
    t.warp = i / W;
    t.lane = i % W;
    t.state = State::Ready;
    t.started = false;
    t.abort = false;
    t.warp_sync = 0;
    t.last_lanes = 0;
    t.undef = false;
  }
  // Poison dynamic shared memory (all-ones bytes: NaN floats, -1 integers) and reset its shadow.
  if (dyn_smem_) dyn_region_.bind(dyn_smem_.get(), params_.dynamic_shared_bytes, run_id_);

  tl_block = this;
  for (;;) {
    for (Thread& t : threads_) {
      if (t.state == State::Ready) resume(t);
    }
    // A fault during the pass makes every thread runnable again (to unwind), including those
    // the pass already visited: look again before judging collectives and barriers.
    bool any_live = false, any_ready = false;
    for (const Thread& t : threads_) {
      any_live |= t.state != State::Exited;
      any_ready |= t.state == State::Ready;
    }
    if (!any_live) break;
    if (any_ready) continue;
    if (resolve_collectives()) continue;
    if (resolve_barrier()) continue;
    // Safety net: the rules above always let some thread move, so this is a scheduler bug.
    for (Thread& t : threads_) {
      if (t.state != State::Exited) {
        report(Fault::Deadlock, t, "", "no thread of the block can make progress");
        break;
      }
    }
    abort_all();
  }
  forget_pending_address();
  tl_block = nullptr;
  tl_thread = nullptr;
  return std::move(reports_);
}

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer's report names the host stack; add the device thread that made the access.
void asan_report(const char*) {
  if (!tl_block || !tl_thread) return;
  const Report r{Fault::MemoryError, tl_block->kernel(), tl_block->index(), tl_thread->view.thread_idx, tl_thread->warp,
                 tl_thread->lane, "", "the memory access reported above"};
  std::fprintf(stderr, "%s\n", r.to_string().c_str());
}
[[maybe_unused]] const bool g_asan_hook = (__asan_set_error_report_callback(asan_report), true);
#endif

void Block::resume(Thread& t) {
  if (!t.started) {
    t.started = true;
    t.fiber = bc::fiber(std::allocator_arg, PoolAllocator{&stacks_, &t}, [this, &t](bc::fiber&& sched) {
      finish_switch(nullptr, &t.scheduler_bottom, &t.scheduler_size);
      t.scheduler = std::move(sched);
      t.frame_top = __builtin_frame_address(0);
      if (!t.abort) {
        try {
          body_();
        } catch (const bc::detail::forced_unwind&) {
          throw;
        } catch (const Abort&) {
        } catch (const std::exception& e) {
          report(Fault::Exception, t, "", std::string("exception escaped the kernel: ") + e.what());
          abort_all();
        } catch (...) {
          report(Fault::Exception, t, "", "unknown exception escaped the kernel");
          abort_all();
        }
      }
      commit_pending_address();  // a raw shared pointer it took is out of sight from here
      t.state = State::Exited;
      start_switch(nullptr, t.scheduler_bottom, t.scheduler_size);  // its fake stack ends with it
      return std::move(t.scheduler);
    });
  }
  tl_thread = &t;
  void* fake = nullptr;
  start_switch(&fake, t.stack_bottom, t.stack_size);
  t.fiber = std::move(t.fiber).resume();
  finish_switch(fake, nullptr, nullptr);
  tl_thread = nullptr;
}

void Block::yield(Thread& t) {
  void* fake = nullptr;
  start_switch(&fake, t.scheduler_bottom, t.scheduler_size);
  t.scheduler = std::move(t.scheduler).resume();
  finish_switch(fake, &t.scheduler_bottom, &t.scheduler_size);
  tl_thread = &t;
  if (t.abort) throw Abort{};
}

void Block::report(Fault f, const Thread& t, std::string where, std::string detail) {
  if (reports_.size() >= 8) return;
  reports_.push_back(Report{f, params_.kernel, idx_, t.view.thread_idx, t.warp, t.lane, std::move(where), std::move(detail)});
}

void Block::abort_all() {
  aborted_ = true;
  for (Thread& t : threads_) {
    if (t.state != State::Exited) {
      t.abort = true;
      t.state = State::Ready;
    }
  }
}

void Block::fault_here(Fault f, const std::string& detail, std::source_location where) {
  Thread& t = *tl_thread;
  report(f, t, where_str(where), detail);
#if defined(__SANITIZE_ADDRESS__)
  if (where_str(where).empty()) {
    std::fprintf(stderr, "lw-simt: %s; stack of the faulting device thread:\n", fault_name(f));
    __sanitizer_print_stack_trace();
  }
#endif
  abort_all();
  throw Abort{};
}

std::string Block::lane_status(int warp, int lane, const Thread* asking) const {
  const int i = warp * W + lane;
  if (i >= nthreads_) {
    const int launched = std::min(W, nthreads_ - warp * W);
    return "was never launched: the block has " + std::to_string(nthreads_) + " threads, so warp " +
           std::to_string(warp) + " of this " + std::to_string(W) + "-lane target has only " +
           std::to_string(launched) + " lanes";
  }
  const Thread& t = threads_[i];
  switch (t.state) {
    case State::Exited: return "has already exited";
    case State::AtBarrier: return "is waiting at __syncthreads (" + where_str(t.barrier_where) + "): it diverged";
    case State::AtCollective:
      if (asking && same_site(t.op.where, asking->op.where))
        return std::string("reached this ") + kind_name(t.op.kind) +
               " through another call path: it diverged, and a 64-lane wavefront (no independent thread "
               "scheduling) runs each side of a branch under its own EXEC mask, so a collective in a helper "
               "called from both sides spans the lanes of one side only (call the helper once, after the branch)";
      return std::string("is at another warp collective (") + kind_name(t.op.kind) + " at " + where_str(t.op.where) +
             "): it diverged";
    case State::Ready: return "is running elsewhere";
  }
  return "is inactive";
}

// Where an undefined value held by `holder` came from, in words.
std::string Block::undefined_origin(const Thread& holder) const {
  if (!holder.undef) return "is undefined: a shuffle read it from a lane that was never launched or had exited";
  return "is undefined: lane " + std::to_string(holder.lane) + "'s " + kind_name(holder.undef_kind) + " at " +
         where_str(holder.undef_where) + " read lane " + std::to_string(holder.undef_src) + ", which " +
         lane_status(holder.warp, holder.undef_src);
}

void Block::check_defined(uint64_t bits, ValueKind k, int bytes, const std::string& what) {
  Thread& t = *tl_thread;
  if (!is_poison(bits, k, bytes) || (k == ValueKind::Bits && !t.undef)) return;
  fault_here(Fault::InactiveLaneRead,
             "stores to " + what + " a value that " + undefined_origin(t) + " (the value was used)" +
                 "; guard the use (if (lane + offset < valid)) or read only lanes that exist",
             t.undef ? t.undef_where : std::source_location{});
}

uint64_t Block::collective(const Collective& c, const void* caller_frame) {
  Thread& t = *tl_thread;
  const bool is_shuffle = c.kind <= CollectiveKind::ShflXor;
  if (is_shuffle && (c.width <= 0 || (c.width & (c.width - 1)) != 0 || c.width > W)) {
    fault_here(Fault::BadWidth,
               std::string(kind_name(c.kind)) + " width " + std::to_string(c.width) +
                   (c.width > W ? " exceeds the " + std::to_string(W) + "-lane warp" : " is not a power of two"),
               c.where);
  }
  // A butterfly written for a 64-lane warp (lane mask 32 first) on a 32-lane one: lane ^ 32 is
  // outside the width, so each lane gets its own value back and the reduction counts it twice.
  if (c.kind == CollectiveKind::ShflXor && sanitize_ && (c.arg < 0 || c.arg >= c.width)) {
    fault_here(Fault::BadLaneMask,
               "shfl_xor lane mask " + std::to_string(c.arg) + " is not below the width " + std::to_string(c.width) +
                   ": every lane reads its own value (a butterfly written for a " + std::to_string(2 * c.width) +
                   "-lane warp?); start the masks at width / 2",
               c.where);
  }
  commit_pending_address();  // other threads run now: a raw shared pointer leaves the checker
  t.op = c;
  if constexpr (W == 64) t.path = call_path(caller_frame, t.frame_top);
  t.state = State::AtCollective;
  yield(t);
  return t.result;
}

bool Block::resolve_collectives() {
  bool progressed = false;
  std::vector<Thread*> pending, group;
  for (int w = 0; w < nwarps_; ++w) {
    pending.clear();
    for (int l = 0; l < W; ++l) {
      Thread* t = lane_thread(w, l);
      if (t && t->state == State::AtCollective) pending.push_back(t);
    }
    // Lanes stopped at the same call site (at warp 64: reached through the same call path) form
    // one collective; other sites go separately.
    while (!pending.empty() && !aborted_) {
      group.clear();
      const Thread* first = pending.front();
      auto split = std::stable_partition(pending.begin(), pending.end(), [&](Thread* t) { return same_collective(*t, *first); });
      group.assign(pending.begin(), split);
      pending.erase(pending.begin(), split);
      execute(group);
      progressed = true;
    }
  }
  return progressed;
}

void Block::execute(std::vector<Thread*>& group) {
  const Collective& c0 = group.front()->op;
  const int warp = group.front()->warp;
  uint64_t present = 0;
  for (Thread* t : group) present |= 1ull << t->lane;

  for (Thread* t : group) {
    const Collective& c = t->op;
    if (c.kind != c0.kind || c.width != c0.width || c.has_mask != c0.has_mask || (c.has_mask && c.mask != c0.mask)) {
      report(Fault::CollectiveMismatch, *t, where_str(c.where),
             std::string("lanes of one warp collective disagree: lane ") + std::to_string(group.front()->lane) +
                 " calls " + kind_name(c0.kind) + " (width " + std::to_string(c0.width) +
                 (c0.has_mask ? ", mask " + hex(c0.mask) : "") + "), lane " + std::to_string(t->lane) + " calls " +
                 kind_name(c.kind) + " (width " + std::to_string(c.width) + (c.has_mask ? ", mask " + hex(c.mask) : "") +
                 ")");
      abort_all();
      return;
    }
  }

  if (sanitize_ && c0.has_mask) {
    const uint64_t unnamed = present & ~c0.mask;
    if (unnamed) {
      const int lane = std::countr_zero(unnamed);
      Thread* t = lane_thread(warp, lane);
      report(Fault::MaskMismatch, *t, where_str(c0.where),
             std::string(kind_name(c0.kind)) + " mask " + hex(c0.mask) + " does not name lane " + std::to_string(lane) +
                 ", which takes part" +
                 (W == 64 && (c0.mask >> 32) == 0 ? " (a 32-bit mask used on a 64-lane warp)" : ""));
      abort_all();
      return;
    }
    const uint64_t missing = c0.mask & ~present;
    if (missing) {
      const int lane = std::countr_zero(missing);
      std::string why = (missing & ~kFullWarp) ? "does not exist on this " + std::to_string(W) + "-lane warp"
                                          : lane_status(warp, lane, group.front());
      report(Fault::MaskMismatch, *group.front(), where_str(c0.where),
             std::string(kind_name(c0.kind)) + " mask " + hex(c0.mask) + " names lane " + std::to_string(lane) +
                 ", which never arrives: it " + why);
      abort_all();
      return;
    }
  }

  switch (c0.kind) {
    case CollectiveKind::ShflIdx:
    case CollectiveKind::ShflUp:
    case CollectiveKind::ShflDown:
    case CollectiveKind::ShflXor: {
      for (Thread* t : group) {
        const int lane = t->lane, width = c0.width, arg = t->op.arg;
        const int base = lane & ~(width - 1);
        int src = lane;
        switch (c0.kind) {
          case CollectiveKind::ShflIdx: src = base + (arg & (width - 1)); break;
          case CollectiveKind::ShflUp: src = (lane - base) >= arg ? lane - arg : lane; break;
          case CollectiveKind::ShflDown: src = (lane - base) + arg < width ? lane + arg : lane; break;
          default: src = lane ^ arg; if (src >= base + width || src < 0) src = lane; break;
        }
        if (src >= W) src = lane;
        if (src == lane || (present >> src) & 1) {
          const Thread& s = *lane_thread(warp, src);
          t->result = s.op.value;
          // A value that was an undefined shuffle result (or computed from one) read by another
          // lane: it is used, which is the bug the undefined read alone is not.
          if (sanitize_ && undefined_reads_ && src != lane && is_poison(s.op.value, s.vkind, s.vbytes) &&
              (s.undef || s.vkind != ValueKind::Bits)) {
            report(Fault::InactiveLaneRead, s, s.undef ? where_str(s.undef_where) : where_str(c0.where),
                   std::string(kind_name(c0.kind)) + " at " + where_str(c0.where) + " in lane " +
                       std::to_string(lane) + " reads the value of lane " + std::to_string(src) + ", which " +
                       undefined_origin(s) + "; guard the use (if (lane + offset < valid)) or read only lanes that exist");
            abort_all();
            return;
          }
        } else if (sanitize_ && (!lane_thread(warp, src) || lane_thread(warp, src)->state == State::Exited)) {
          // A lane that was never launched or has exited: CUDA calls the value undefined, not the
          // read an error (a guarded partial-warp reduction reads it and discards it). The value
          // is made recognisable and reported only where it is used.
          t->result = poison_bits(t->vkind, t->vbytes);
          t->undef = true;
          t->undef_kind = c0.kind;
          t->undef_src = src;
          t->undef_where = c0.where;
          ++undefined_reads_;
        } else if (sanitize_) {
          report(Fault::InactiveLaneRead, *t, where_str(c0.where),
                 std::string(kind_name(c0.kind)) + " in lane " + std::to_string(lane) + " reads lane " +
                     std::to_string(src) + ", which " + lane_status(warp, src, t));
          abort_all();
          return;
        } else {
          t->result = 0;  // what AMD hardware returns for an inactive lane
        }
      }
      break;
    }
    case CollectiveKind::Ballot:
    case CollectiveKind::Any:
    case CollectiveKind::All: {
      uint64_t ballot = 0;
      for (Thread* t : group) ballot |= (t->op.value != 0 ? 1ull : 0ull) << t->lane;
      uint64_t r = c0.kind == CollectiveKind::Ballot ? ballot
                   : c0.kind == CollectiveKind::Any  ? (ballot != 0)
                                                     : (ballot == present);
      for (Thread* t : group) t->result = r;
      break;
    }
    case CollectiveKind::SyncWarp:
      for (Thread* t : group) t->result = 0;
      break;
    case CollectiveKind::Matrix:
      if (!execute_matrix(group, present)) return;
      break;
  }
  const uint32_t sync = ++warp_counter_[warp];
  for (Thread* t : group) {
    t->warp_sync = sync;
    t->last_lanes = present;
    t->state = State::Ready;
  }
}

// Matrix cores take their operands from every lane of the wavefront: a lane that is not there
// makes the result undefined on the hardware (and a hang on some).
bool Block::execute_matrix(std::vector<Thread*>& group, uint64_t present) {
  const Collective& c0 = group.front()->op;
  const int warp = group.front()->warp;
  MatrixOp* lanes[64] = {};
  for (Thread* t : group) lanes[t->lane] = reinterpret_cast<MatrixOp*>(t->op.value);
  for (Thread* t : group) {
    if (lanes[t->lane]->run != lanes[group.front()->lane]->run) {
      report(Fault::CollectiveMismatch, *t, where_str(c0.where),
             "lanes of one matrix op disagree on the operation: lane " + std::to_string(group.front()->lane) +
                 " and lane " + std::to_string(t->lane) + " call different fragment shapes or types");
      abort_all();
      return false;
    }
  }
  if (sanitize_ && present != kFullWarp) {
    const int lane = std::countr_zero(~present & kFullWarp);
    report(Fault::PartialWarpMatrix, *group.front(), where_str(c0.where),
           "a matrix-fragment operation is reached by " + std::to_string(std::popcount(present)) + " of the " +
               std::to_string(W) + " lanes of warp " + std::to_string(warp) + "; lane " + std::to_string(lane) + " " +
               lane_status(warp, lane, group.front()) + " (matrix cores need every lane of the warp: keep the call out of divergent code "
               "and launch whole warps)");
    abort_all();
    return false;
  }
  lanes[group.front()->lane]->run(lanes, W);
  for (Thread* t : group) t->result = 0;
  return true;
}

bool Block::resolve_barrier() {
  Thread* first = nullptr;
  Thread* exited = nullptr;
  Thread* elsewhere = nullptr;
  for (Thread& t : threads_) {
    if (t.state == State::AtBarrier) {
      if (!first) first = &t;
      else if (!elsewhere && !same_site(t.barrier_where, first->barrier_where)) elsewhere = &t;
    } else if (t.state == State::Exited && !exited) {
      exited = &t;
    }
  }
  if (!first) return false;
  if (sanitize_ && (exited || elsewhere)) {
    int waiting = 0;
    for (Thread& t : threads_) waiting += t.state == State::AtBarrier;
    std::string detail;
    if (exited) {
      const uint3 e = exited->view.thread_idx;
      detail = "__syncthreads at " + where_str(first->barrier_where) + " is reached by " + std::to_string(waiting) +
               " of " + std::to_string(nthreads_) + " threads; thread (" + std::to_string(e.x) + "," +
               std::to_string(e.y) + "," + std::to_string(e.z) +
               ") exited while the others wait (a barrier inside divergent control flow?)";
    } else {
      detail = "threads wait at different __syncthreads: " + where_str(first->barrier_where) + " and " +
               where_str(elsewhere->barrier_where) + " (a barrier inside divergent control flow)";
    }
    report(Fault::DivergentBarrier, exited ? *exited : *elsewhere, where_str(first->barrier_where), detail);
    abort_all();
    return true;
  }
  for (Thread& t : threads_)
    if (t.state == State::AtBarrier) t.state = State::Ready;
  ++epoch_;
  return true;
}

void Block::barrier(std::source_location where) {
  Thread& t = *tl_thread;
  commit_pending_address();
  t.barrier_where = where;
  t.state = State::AtBarrier;
  yield(t);
}

Thread& current_thread(const char* what) {
  if (!tl_thread || !tl_block) {
    throw std::logic_error(std::string("lw::simt: ") + what + " used outside a kernel launched on the emulator");
  }
  return *tl_thread;
}

void validate(const LaunchParams& p) {
  auto bad = [&](const std::string& why) {
    throw KernelError({Report{Fault::InvalidLaunch, p.kernel, {0, 0, 0}, {0, 0, 0}, 0, 0, "", why}});
  };
  const dim3 g = p.grid, b = p.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) bad("grid and block dimensions must be >= 1");
  if (uint64_t(b.x) * b.y * b.z > kMaxBlockThreads)
    bad("block of " + std::to_string(uint64_t(b.x) * b.y * b.z) + " threads exceeds " + std::to_string(kMaxBlockThreads));
  if (b.x > 1024 || b.y > 1024 || b.z > 64) bad("block dimension out of range (x,y <= 1024, z <= 64)");
  if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) bad("grid dimension out of range (x < 2^31, y,z <= 65535)");
  if (p.dynamic_shared_bytes > kMaxDynamicShared)
    bad(std::to_string(p.dynamic_shared_bytes) + " bytes of dynamic shared memory exceed the 65536 bytes an AMD CDNA work-group has");
}

}  // namespace

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::InactiveLaneRead: return "inactive-lane read";
    case Fault::BadWidth: return "bad shuffle width";
    case Fault::BadLaneMask: return "bad XOR lane mask";
    case Fault::MaskMismatch: return "mask mismatch";
    case Fault::CollectiveMismatch: return "collective mismatch";
    case Fault::DivergentBarrier: return "divergent barrier";
    case Fault::Deadlock: return "deadlock";
    case Fault::UninitSharedRead: return "uninitialised shared read";
    case Fault::SharedRace: return "shared-memory race";
    case Fault::SharedOutOfBounds: return "shared out of bounds";
    case Fault::BallotTruncated: return "ballot truncated";
    case Fault::PartialWarpMatrix: return "partial-warp matrix op";
    case Fault::MemoryError: return "device memory error";
    case Fault::InvalidLaunch: return "invalid launch";
    case Fault::Trap: return "trap";
    case Fault::Exception: return "exception";
  }
  return "fault";
}

std::string Report::to_string() const {
  std::ostringstream s;
  s << "lw-simt " << fault_name(fault) << " in kernel " << kernel << ", block (" << block.x << "," << block.y << ","
    << block.z << "), thread (" << thread.x << "," << thread.y << "," << thread.z << ") [warp " << warp << ", lane "
    << lane << ", warp size " << W << "]";
  if (!where.empty()) s << " at " << where;
  s << ": " << detail;
  return s.str();
}

static std::string join_reports(const std::vector<Report>& reports) {
  std::string s;
  for (const Report& r : reports) s += (s.empty() ? "" : "\n") + r.to_string();
  return s.empty() ? "lw-simt: kernel failed" : s;
}

KernelError::KernelError(std::vector<Report> reports)
    : std::runtime_error(join_reports(reports)), reports_(std::move(reports)) {}

bool KernelError::has(Fault f) const {
  return std::any_of(reports_.begin(), reports_.end(), [f](const Report& r) { return r.fault == f; });
}

bool sanitize() {
  int v = g_sanitize.load();
  if (v < 0) {
    const char* env = std::getenv("LW_SIMT_SANITIZE");
    v = env && *env && std::strcmp(env, "0") != 0 ? 1 : 0;
    g_sanitize.store(v);
  }
  return v == 1;
}

void set_sanitize(bool on) { g_sanitize.store(on ? 1 : 0); }

int worker_threads() {
  static const int n = [] {
    const char* env = std::getenv("LW_SIMT_THREADS");
    int v = env ? std::atoi(env) : 0;
    if (v <= 0) v = static_cast<int>(std::thread::hardware_concurrency());
    return std::max(1, v);
  }();
  return n;
}

void launch(const LaunchParams& params, const std::function<void()>& body) {
  if (tl_block) throw std::logic_error("lw::simt: a kernel cannot launch another kernel");
  validate(params);
  const uint64_t nblocks = uint64_t(params.grid.x) * params.grid.y * params.grid.z;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::vector<Report> reports;

  auto worker = [&] {
    StackPool stacks(stack_bytes());
    Block block(params, body, stacks);
    for (;;) {
      const uint64_t b = next.fetch_add(1);
      if (b >= nblocks || failed.load()) break;
      const uint3 idx{static_cast<unsigned>(b % params.grid.x), static_cast<unsigned>((b / params.grid.x) % params.grid.y),
                      static_cast<unsigned>(b / (uint64_t(params.grid.x) * params.grid.y))};
      std::vector<Report> r = block.run(idx);
      if (!r.empty()) {
        std::lock_guard lock(mu);
        failed = true;
        if (reports.size() < 8) reports.insert(reports.end(), r.begin(), r.end());
      }
    }
  };

  const int nworkers = static_cast<int>(std::min<uint64_t>(worker_threads(), nblocks));
  std::vector<std::thread> helpers;
  for (int i = 1; i < nworkers; ++i) helpers.emplace_back(worker);
  worker();
  for (std::thread& t : helpers) t.join();
  if (!reports.empty()) throw KernelError(std::move(reports));
}

const ThreadView& this_thread() { return current_thread("threadIdx/blockIdx").view; }
unsigned linear_thread_id() { return current_thread("a lane id").linear; }
void* dynamic_shared() {
  current_thread("dynamic shared memory");
  return tl_block->dynamic_shared();
}

[[gnu::noinline]] uint64_t warp_collective(const Collective& c) {
  Thread& t = current_thread("a warp collective");
  t.vkind = ValueKind::Bits;
  t.vbytes = 8;
  return tl_block->collective(c, LW_SIMT_CALLER_FRAME());
}

[[gnu::noinline]] void warp_matrix_op(MatrixOp* op, std::source_location where) {
  Thread& t = current_thread("a matrix-fragment operation");
  t.vkind = ValueKind::Bits;
  t.vbytes = 8;
  tl_block->collective({CollectiveKind::Matrix, reinterpret_cast<uint64_t>(op), 0, W, false, 0, where},
                       LW_SIMT_CALLER_FRAME());
}

[[gnu::noinline]] uint64_t warp_shuffle(const Collective& c, ValueKind k, int bytes) {
  Thread& t = current_thread("a warp shuffle");
  t.vkind = k;
  t.vbytes = bytes;
  return tl_block->collective(c, LW_SIMT_CALLER_FRAME());
}

bool undefined_values_seen() { return tl_block && tl_thread && tl_block->undefined_values_seen(); }

void check_defined(uint64_t bits, ValueKind k, int bytes, const std::string& what) {
  current_thread("shared memory");
  tl_block->check_defined(bits, k, bytes, what);
}

uint64_t last_collective_lanes() { return current_thread("a warp collective").last_lanes; }

AccessPoint access_point() {
  current_thread("shared memory");
  return tl_block->access_point();
}

SharedRegion& dynamic_shared_region() {
  current_thread("dynamic shared memory");
  return tl_block->dynamic_region();
}

void fault(Fault f, const std::string& detail, std::source_location where) {
  current_thread("a device-side fault");
  tl_block->fault_here(f, detail, where);
}

void syncthreads(std::source_location where) {
  current_thread("__syncthreads");
  tl_block->barrier(where);
}

void trap(const char* what, std::source_location where) {
  current_thread("__trap");
  tl_block->fault_here(Fault::Trap, what, where);
}

}  // namespace lw::simt
