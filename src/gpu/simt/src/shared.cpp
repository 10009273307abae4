// The shared-memory checker: one shadow record per byte, reset when a new block binds the
// region. Epochs count the block's __syncthreads; two accesses by different threads in the
// same epoch are ordered only when they are in one warp and a warp collective separates them.
#include <algorithm>
#include <cstring>

#include "lw_simt/shared.h"

namespace lw::simt {

namespace {

// The raw pointer the running device thread took last (`&s[i]`, a decay) and has not used
// yet. Fibers of one OS thread switch only inside the emulator, and every such entry commits
// it first, so one slot per OS thread holds it. An atomic on exactly that address is the
// pointer's whole use (`atomicAdd(&s[i], v)`) and is checked; anything else escapes the
// region. Should the pointer be kept and also written through (`p[1] = 0` after the atomic),
// those bytes are no longer the poison: a checked read of them is not reported (see
// unwritten()).
struct Pending {
  SharedRegion* region = nullptr;
  const void* p = nullptr;
  size_t n = 0;
};
thread_local Pending tl_pending;

}  // namespace

void commit_pending_address() {
  if (SharedRegion* r = tl_pending.region) {
    tl_pending.region = nullptr;
    r->escape();
  }
}

void forget_pending_address() { tl_pending.region = nullptr; }

void SharedRegion::take_address(const void* p, size_t n) {
  commit_pending_address();
  if (escaped_ || !sanitize()) {
    escaped_ = true;
    return;
  }
  tl_pending.region = this;
  tl_pending.p = p;
  tl_pending.n = n;
}

void shared_atomic(const void* addr, size_t n, const char* op) {
  Pending& pd = tl_pending;
  if (!pd.region) return;
  if (pd.p != addr || pd.n != n) {
    commit_pending_address();
    return;
  }
  SharedRegion* r = pd.region;
  pd.region = nullptr;
  r->atomic(addr, n, op);
}

void SharedRegion::bind(void* data, size_t bytes) { bind(data, bytes, access_point().block_run); }

void SharedRegion::bind(void* data, size_t bytes, uint64_t block_run) {
  if (block_run == block_run_ && data == base_) return;
  block_run_ = block_run;
  base_ = static_cast<char*>(data);
  bytes_ = bytes;
  escaped_ = false;
  std::memset(base_, 0xff, bytes_);  // NaN in every float type, -1 in every integer
  if (sanitize()) shadow_.assign(bytes_, Shadow{});
}

// No checked write has recorded the byte, and it still holds the poison: a byte that changed
// was written through a raw pointer that an atomic used and the thread kept.
bool SharedRegion::unwritten(size_t byte) const {
  return shadow_[byte].writer < 0 && static_cast<unsigned char>(base_[byte]) == 0xff;
}

std::string SharedRegion::describe(size_t byte) const {
  return std::string(name_) + " (byte " + std::to_string(byte) + " of " + std::to_string(bytes_) + ")";
}

// Whether another thread's access in this barrier epoch is unordered with this one (same warp
// with a warp collective between them is ordered). Called for every checked byte: messages are
// built only when a fault fires.
static bool conflicts(int16_t other, uint32_t other_epoch, uint32_t other_sync, const AccessPoint& me) {
  if (other < 0 || other == me.thread || other_epoch != me.epoch) return false;
  return !(other / kWarpSize == me.thread / kWarpSize && me.warp_sync > other_sync);
}

void SharedRegion::race(const char* what, size_t byte, const char* other_did, int16_t other) const {
  fault(Fault::SharedRace,
        std::string(what) + " " + describe(byte) + ", " + other_did + " thread " + std::to_string(other) +
            " with no __syncthreads between",
        std::source_location{});
}

void SharedRegion::read(const void* p, size_t n) {
  commit_pending_address();
  if (escaped_ || !sanitize()) return;
  const AccessPoint ap = access_point();
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
  const size_t end = std::min(off + n, shadow_.size());
  for (size_t b = off; b < end; ++b) {
    Shadow& s = shadow_[b];
    if (unwritten(b)) {
      fault(Fault::UninitSharedRead, "reads " + describe(b) + ", which no thread of this block has written",
            std::source_location{});
    }
    if (conflicts(s.writer, s.w_epoch, s.w_sync, ap)) race("reads", b, "written by", s.writer);
    s.reader = static_cast<int16_t>(ap.thread);
    s.r_epoch = ap.epoch;
    s.r_sync = ap.warp_sync;
  }
}

void SharedRegion::write(const void* p, size_t n) {
  commit_pending_address();
  if (escaped_ || !sanitize()) return;
  const AccessPoint ap = access_point();
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
  const size_t end = std::min(off + n, shadow_.size());
  for (size_t b = off; b < end; ++b) {
    Shadow& s = shadow_[b];
    if (conflicts(s.writer, s.w_epoch, s.w_sync, ap)) race("writes", b, "also written by", s.writer);
    if (conflicts(s.reader, s.r_epoch, s.r_sync, ap)) race("writes", b, "read by", s.reader);
    s.writer = static_cast<int16_t>(ap.thread);
    s.w_atomic = false;
    s.w_epoch = ap.epoch;
    s.w_sync = ap.warp_sync;
  }
}

void SharedRegion::write_value(const void* p, size_t n, uint64_t bits, ValueKind k) {
  write(p, n);
  if (sanitize() && undefined_values_seen()) {
    check_defined(bits, k, static_cast<int>(n),
                  describe(static_cast<size_t>(static_cast<const char*>(p) - base_)));
  }
}

void SharedRegion::atomic(const void* p, size_t n, const char* op) {
  if (escaped_ || !sanitize()) return;
  const AccessPoint ap = access_point();
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
  const size_t end = std::min(off + n, shadow_.size());
  for (size_t b = off; b < end; ++b) {
    Shadow& s = shadow_[b];
    if (unwritten(b)) {
      fault(Fault::UninitSharedRead,
            std::string(op) + " on " + describe(b) +
                ", which no thread of this block has written: it adds to (or compares with) poison; "
                "initialise it and __syncthreads before the atomics",
            std::source_location{});
    }
    // Atomics of different threads are ordered among themselves; a plain access is not.
    if (!s.w_atomic && conflicts(s.writer, s.w_epoch, s.w_sync, ap)) race("atomically updates", b, "written by", s.writer);
    if (conflicts(s.reader, s.r_epoch, s.r_sync, ap)) race("atomically updates", b, "read by", s.reader);
    s.writer = static_cast<int16_t>(ap.thread);
    s.w_atomic = true;
    s.w_epoch = ap.epoch;
    s.w_sync = ap.warp_sync;
  }
}

}  // namespace lw::simt
