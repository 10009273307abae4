// Checked shared memory. In the emulator, LW_SHARED / LW_DYNAMIC_SHARED (gpu/compat.h) give
// views whose element accesses go through a per-byte shadow, so the sanitizer can report a
// read of bytes no thread of the block has wrote, a race between two threads with no barrier
// between them, and an index outside the array. The memory is poisoned (all bytes 0xff) when
// a block starts using it. Taking a raw pointer (`&s[i]`, or letting the array decay) hands
// the region to unchecked code: checks stop for that region until the block ends, unless the
// pointer goes straight to an atomic (`atomicAdd(&s[i], v)`), which is checked as an access.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "lw_simt/emulator.h"

namespace lw::simt {

class SharedRegion {
 public:
  explicit SharedRegion(const char* name) : name_(name) {}
  // Makes `data` the region of the block now running on this OS thread; when the block
  // changed since the last bind, poisons the bytes and forgets every access.
  void bind(void* data, size_t bytes);
  void bind(void* data, size_t bytes, uint64_t block_run);
  // Checks and records an access of n bytes at p by the calling device thread.
  void read(const void* p, size_t n);
  void write(const void* p, size_t n);
  // A write of a value (raw bits, kind k): also reports an undefined shuffle result stored.
  void write_value(const void* p, size_t n, uint64_t bits, ValueKind k);
  // An atomic read-modify-write of n bytes at p (named `op`): the bytes must have been
  // written; atomics of different threads are not races with each other.
  void atomic(const void* p, size_t n, const char* op);
  // A raw pointer to p was taken: the region escapes the checker at the calling thread's next
  // step (its next checked access, collective, barrier or exit) unless an atomic on exactly p
  // comes first (see take_address in shared.cpp).
  void take_address(const void* p, size_t n);
  void escape() { escaped_ = true; }
  size_t bytes() const { return bytes_; }

 private:
  struct Shadow {
    int16_t writer = -1;  // -1: never written in this block
    int16_t reader = -1;
    bool w_atomic = false;  // the last write was an atomic
    uint32_t w_epoch = 0, r_epoch = 0;
    uint32_t w_sync = 0, r_sync = 0;
  };
  std::string describe(size_t byte) const;
  bool unwritten(size_t byte) const;
  [[noreturn]] void race(const char* what, size_t byte, const char* other_did, int16_t other) const;

  const char* name_;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  uint64_t block_run_ = ~0ull;
  bool escaped_ = false;
  std::vector<Shadow> shadow_;
};

template <class T>
class SharedRef {
 public:
  SharedRef(T* p, SharedRegion* r) : p_(p), r_(r) {}
  operator T() const {
    r_->read(p_, sizeof(T));
    return *p_;
  }
  SharedRef& operator=(const T& v) {
    if constexpr (sizeof(T) <= 8 && std::is_trivially_copyable_v<T>) {
      uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof(T));
      r_->write_value(p_, sizeof(T), bits, value_kind<T>());
    } else {
      r_->write(p_, sizeof(T));
    }
    *p_ = v;
    return *this;
  }
  SharedRef& operator=(const SharedRef& o) { return *this = static_cast<T>(o); }
#define LW_SIMT_COMPOUND(OP)                            \
  template <class V>                                    \
  SharedRef& operator OP##=(const V& v) {               \
    const T cur = static_cast<T>(*this);                \
    return *this = static_cast<T>(cur OP v);            \
  }
  LW_SIMT_COMPOUND(+)
  LW_SIMT_COMPOUND(-)
  LW_SIMT_COMPOUND(*)
  LW_SIMT_COMPOUND(/)
  LW_SIMT_COMPOUND(%)
  LW_SIMT_COMPOUND(&)
  LW_SIMT_COMPOUND(|)
  LW_SIMT_COMPOUND(^)
  LW_SIMT_COMPOUND(<<)
  LW_SIMT_COMPOUND(>>)
#undef LW_SIMT_COMPOUND
  SharedRef& operator++() { return *this += 1; }
  SharedRef& operator--() { return *this -= 1; }
  T operator++(int) { const T old = *this; *this += 1; return old; }
  T operator--(int) { const T old = *this; *this -= 1; return old; }
  // A raw pointer leaves the checker's sight (vector casts, pointer arithmetic): checking of the
  // region stops, unless the pointer goes straight to an atomic, which is then checked.
  T* operator&() const {
    r_->take_address(p_, sizeof(T));
    return p_;
  }

 private:
  T* p_;
  SharedRegion* r_;
};

// A view of a statically sized shared array T[N]... ; indexing is bounds-checked.
template <class A>
class SharedView {
  static_assert(std::is_array_v<A> && std::extent_v<A> > 0, "LW_SHARED declares arrays");
  using Elem = std::remove_extent_t<A>;
  using Scalar = std::remove_all_extents_t<A>;

 public:
  SharedView(A* p, SharedRegion* r) : p_(p), r_(r) {}
  auto operator[](size_t i) const {
    check(i);
    if constexpr (std::is_array_v<Elem>) {
      return SharedView<Elem>(&(*p_)[i], r_);
    } else {
      return SharedRef<Elem>(&(*p_)[i], r_);
    }
  }
  // Decay to a pointer, as a C array does: unchecked from here on.
  operator Elem*() const {
    r_->take_address(&(*p_)[0], sizeof(Elem));
    return &(*p_)[0];
  }

 private:
  void check(size_t i) const;
  A* p_;
  SharedRegion* r_;
};

// A pointer into the block's dynamic shared memory; indexing is bounds-checked.
template <class T>
class SharedPtr {
 public:
  SharedPtr(T* p, T* base, SharedRegion* r) : p_(p), base_(base), r_(r) {}
  SharedRef<T> operator[](ptrdiff_t i) const { return *(*this + i); }
  SharedRef<T> operator*() const {
    const ptrdiff_t off = reinterpret_cast<const char*>(p_) - reinterpret_cast<const char*>(base_);
    if (off < 0 || static_cast<size_t>(off) + sizeof(T) > r_->bytes()) {
      fault(Fault::SharedOutOfBounds,
            "dynamic shared memory accessed at byte " + std::to_string(off) + ", outside the " +
                std::to_string(r_->bytes()) + " bytes the launch gave",
            std::source_location{});
    }
    return SharedRef<T>(p_, r_);
  }
  SharedPtr operator+(ptrdiff_t i) const { return SharedPtr(p_ + i, base_, r_); }
  SharedPtr operator-(ptrdiff_t i) const { return SharedPtr(p_ - i, base_, r_); }
  operator T*() const {
    r_->take_address(p_, sizeof(T));
    return p_;
  }

 private:
  T* p_;
  T* base_;
  SharedRegion* r_;
};

template <class A>
void SharedView<A>::check(size_t i) const {
  if (i >= std::extent_v<A>) {
    fault(Fault::SharedOutOfBounds,
          "index " + std::to_string(static_cast<long long>(i)) + " outside a shared array dimension of " +
              std::to_string(std::extent_v<A>),
          std::source_location{});
  }
}

// The storage of one LW_SHARED declaration on this OS thread (one block at a time).
template <class A>
struct SharedSlot {
  explicit SharedSlot(const char* name) : region(name) {}
  SharedView<A> bind() {
    region.bind(&storage, sizeof(A));
    return SharedView<A>(&storage, &region);
  }
  alignas(16) A storage;
  SharedRegion region;
};

// The raw shared pointer taken last by the running device thread and not yet used: its region
// escapes now (commit), or it is dropped at a block's start and end (forget). An atomic on
// T* calls shared_atomic first, which checks the access when addr is that pointer.
void commit_pending_address();
void forget_pending_address();
void shared_atomic(const void* addr, size_t n, const char* op);

// The dynamic shared memory of the running block, as a checked pointer.
SharedRegion& dynamic_shared_region();
template <class T>
SharedPtr<T> dynamic_shared_ptr() {
  T* base = static_cast<T*>(dynamic_shared());
  return SharedPtr<T>(base, base, &dynamic_shared_region());
}

}  // namespace lw::simt
