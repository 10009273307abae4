// The shared-memory checker: one shadow record per byte, reset when a new block binds the
// region. Epochs count the block's __syncthreads; two accesses by different threads in the
// same epoch are ordered only when they are in one warp and a warp collective separates them.
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

static bool ordered(int16_t other, uint32_t other_sync, const AccessPoint& me) {
  return other / kWarpSize == me.thread / kWarpSize && me.warp_sync > other_sync;
}

void SharedRegion::read(const void* p, size_t n) {
  if (escaped_ || !sanitize()) return;
  const AccessPoint ap = access_point();
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
  for (size_t b = off; b < off + n && b < shadow_.size(); ++b) {
    Shadow& s = shadow_[b];
    if (s.writer < 0) {
      fault(Fault::UninitSharedRead, "reads " + describe(b) + ", which no thread of this block has written",
            std::source_location{});
    }
    if (s.writer != ap.thread && s.w_epoch == ap.epoch && !ordered(s.writer, s.w_sync, ap)) {
      fault(Fault::SharedRace,
            "reads " + describe(b) + ", written by thread " + std::to_string(s.writer) +
                " with no __syncthreads between the write and this read",
            std::source_location{});
    }
    s.reader = static_cast<int16_t>(ap.thread);
    s.r_epoch = ap.epoch;
    s.r_sync = ap.warp_sync;
  }
}

void SharedRegion::write(const void* p, size_t n) {
  if (escaped_ || !sanitize()) return;
  const AccessPoint ap = access_point();
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
  for (size_t b = off; b < off + n && b < shadow_.size(); ++b) {
    Shadow& s = shadow_[b];
    if (s.writer >= 0 && s.writer != ap.thread && s.w_epoch == ap.epoch && !ordered(s.writer, s.w_sync, ap)) {
      fault(Fault::SharedRace,
            "writes " + describe(b) + ", also written by thread " + std::to_string(s.writer) +
                " with no __syncthreads between the two writes",
            std::source_location{});
    }
    if (s.reader >= 0 && s.reader != ap.thread && s.r_epoch == ap.epoch && !ordered(s.reader, s.r_sync, ap)) {
      fault(Fault::SharedRace,
            "writes " + describe(b) + ", read by thread " + std::to_string(s.reader) +
                " with no __syncthreads between the read and this write",
            std::source_location{});
    }
    s.writer = static_cast<int16_t>(ap.thread);
    s.w_epoch = ap.epoch;
    s.w_sync = ap.warp_sync;
  }
}

}  // namespace lw::simt
