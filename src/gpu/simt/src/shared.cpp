// The shared-memory checker: one shadow record per byte, reset when a new block binds the
// region. Epochs count the block's __syncthreads; two accesses by different threads in the
// same epoch are ordered only when they are in one warp and a warp collective separates them.
#include <algorithm>
#include <cstring>

#include "lw_simt/shared.h"

namespace lw::simt {

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
  if (escaped_ || !sanitize()) return;
  const AccessPoint ap = access_point();
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
  const size_t end = std::min(off + n, shadow_.size());
  for (size_t b = off; b < end; ++b) {
    Shadow& s = shadow_[b];
    if (s.writer < 0) {
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
  if (escaped_ || !sanitize()) return;
  const AccessPoint ap = access_point();
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
  const size_t end = std::min(off + n, shadow_.size());
  for (size_t b = off; b < end; ++b) {
    Shadow& s = shadow_[b];
    if (conflicts(s.writer, s.w_epoch, s.w_sync, ap)) race("writes", b, "also written by", s.writer);
    if (conflicts(s.reader, s.r_epoch, s.r_sync, ap)) race("writes", b, "read by", s.reader);
    s.writer = static_cast<int16_t>(ap.thread);
    s.w_epoch = ap.epoch;
    s.w_sync = ap.warp_sync;
  }
}

}  // namespace lw::simt
