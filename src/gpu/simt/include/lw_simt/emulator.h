// The host SIMT emulator: runs a kernel on the CPU with each block's threads as fibers that
// switch at barriers and warp collectives, grouped into warps of LW_WARP_SIZE lanes in
// linear thread order (x fastest, then y, then z), as the hardware groups them.
//
// Sanitizer mode (LW_SIMT_SANITIZE=1 in the environment, or set_sanitize(true)) turns the
// wave-portability faults into a KernelError whose reports name the kernel, the block, the
// thread and the fault. See docs/SIMT.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "lw_simt/types.h"

namespace lw::simt {

#if LW_SIMT_DEVICE_API
inline constexpr int kWarpSize = LW_WARP_SIZE;
#endif
inline constexpr int kMaxBlockThreads = 1024;

enum class Fault {
  InactiveLaneRead,   // a shuffle reads a lane on the other side of a divergent branch, or a value read from a
                      // lane that was never launched or has exited is used (shuffled on, stored to shared memory)
  BadWidth,           // shuffle width not a power of two, or wider than the warp
  BadLaneMask,        // an XOR shuffle whose lane mask is not below its width: every lane reads itself
  MaskMismatch,       // a mask names a lane that never arrives, or omits one that takes part
  CollectiveMismatch, // lanes of one collective disagree on its kind, width or mask
  DivergentBarrier,   // __syncthreads not reached by every live thread, or reached at different places
  BarrierExit,        // a thread exited while others wait at a barrier
  Deadlock,           // no thread can make progress
  UninitSharedRead,   // a read (or an atomic) of shared memory that no thread of this block has written
  SharedRace,         // two threads touch the same shared bytes (one writes) with no barrier between
  SharedOutOfBounds,  // an index outside a shared array
  BallotTruncated,    // a 64-lane ballot stored or counted in 32 bits: the votes of lanes 32..63 are lost
  PartialWarpMatrix,  // a matrix-fragment operation reached by part of a warp (matrix cores need every lane)
  MemoryError,        // AddressSanitizer: device memory accessed out of bounds or after free
  InvalidLaunch,      // grid/block/shared-memory configuration the hardware would reject
  Trap,               // __trap() or a failed device-side check
  Exception,          // a C++ exception escaped the kernel
};

const char* fault_name(Fault f);

struct Report {
  Fault fault;
  std::string kernel;
  uint3 block;
  uint3 thread;  // the thread the fault is charged to
  int warp;
  int lane;
  std::string where;   // file:line of the device code, when known
  std::string detail;  // what happened, in words
  std::string to_string() const;
};

// Thrown by launch() when a kernel faults; what() holds every report, one per line block.
class KernelError : public std::runtime_error {
 public:
  explicit KernelError(std::vector<Report> reports);
  const std::vector<Report>& reports() const { return reports_; }
  bool has(Fault f) const;

 private:
  std::vector<Report> reports_;
};

struct LaunchParams {
  const char* kernel = "kernel";
  dim3 grid;
  dim3 block;
  size_t dynamic_shared_bytes = 0;
};

// Runs body once per thread of every block; returns when the grid has finished.
void launch(const LaunchParams& params, const std::function<void()>& body);

// Sanitizer switch; the initial value comes from LW_SIMT_SANITIZE (unset or 0: off).
bool sanitize();
void set_sanitize(bool on);

// Number of OS threads that run blocks (LW_SIMT_THREADS, default: hardware threads).
int worker_threads();

// ---- called from device code (through the builtins of lw_simt/device.h) ----

struct ThreadView {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
const ThreadView& this_thread();
unsigned linear_thread_id();
void* dynamic_shared();

enum class CollectiveKind : uint8_t { ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp, Matrix };

struct Collective {
  CollectiveKind kind;
  uint64_t value;   // the lane's operand, as raw bits (shuffles) or a predicate
  int arg;          // source lane, delta or lane mask
  int width;
  bool has_mask;
  uint64_t mask;
  std::source_location where;
};

// Blocks the calling device thread until the collective is resolved; returns the raw result.
uint64_t warp_collective(const Collective& c);

// A warp-wide matrix operation (the emulation of a matrix-core instruction: lw gpu/matrix_fragment.h).
// Each lane hands its operands; once every lane of the warp has arrived, `run` of the first lane
// gets them all, indexed by lane, and writes each lane's results into its operands. A lane that
// is absent (never launched, exited, elsewhere) is a PartialWarpMatrix fault under the sanitizer;
// without it, its entry is null.
struct MatrixOp {
  void (*run)(MatrixOp* const* lanes, int warp_size);
};
void warp_matrix_op(MatrixOp* op, std::source_location where);

// What a shuffled value is, so that the result of reading a lane that was never launched or
// has exited can be made recognisable: a quiet NaN with a payload of its own for float and
// double (it survives arithmetic), a fixed byte pattern (0xa5...) for anything else.
enum class ValueKind : uint8_t { Bits, F32, F64 };
template <class T>
constexpr ValueKind value_kind() {
  return std::is_same_v<T, float> ? ValueKind::F32 : std::is_same_v<T, double> ? ValueKind::F64 : ValueKind::Bits;
}
// A shuffle of a value of `bytes` bytes and kind k (warp_collective for the shuffle kinds).
uint64_t warp_shuffle(const Collective& c, ValueKind k, int bytes);
// Whether any shuffle of the running block has returned an undefined value (cheap; gates the
// checks of values stored to shared memory).
bool undefined_values_seen();
// Reports InactiveLaneRead when `bits` (a value of kind k, `bytes` long, about to be stored to
// `what`) is an undefined shuffle result.
void check_defined(uint64_t bits, ValueKind k, int bytes, const std::string& what);
// The lanes that took part in the calling thread's last warp collective.
uint64_t last_collective_lanes();
void syncthreads(std::source_location where);
[[noreturn]] void trap(const char* what, std::source_location where);
// Reports a fault at the calling device thread and unwinds its block.
[[noreturn]] void fault(Fault f, const std::string& detail, std::source_location where);

// Where the calling device thread stands, for the shared-memory checker: its linear id, the
// number of __syncthreads its block has passed, the warp-collective count of its last
// collective, and an id of this execution of the block (unique across launches).
struct AccessPoint {
  int thread;
  uint32_t epoch;
  uint32_t warp_sync;
  uint64_t block_run;
};
AccessPoint access_point();

}  // namespace lw::simt
