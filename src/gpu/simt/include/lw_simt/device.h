// Device-side built-ins (threadIdx, __syncthreads, warp shuffles, atomics, math intrinsics)
// for CUDA C++ compiled by a host C++ compiler against the SIMT emulator.
#pragma once
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "lw_simt/emulator.h"
#include "lw_simt/half.h"
#include "lw_simt/shared.h"
#include "lw_simt/types.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
// The warp built-ins are always inlined into the device function that calls them: the emulator
// starts a collective's call path at that function's frame (see warp_collective).
#define LW_SIMT_BUILTIN inline __attribute__((always_inline))
#define __constant__
#define __managed__
#define __launch_bounds__(...)
#define __grid_constant__
// Static shared memory: one copy per OS thread, and an OS thread runs one block at a time.
#define __shared__ static thread_local

#define threadIdx (::lw::simt::this_thread().thread_idx)
#define blockIdx (::lw::simt::this_thread().block_idx)
#define blockDim (::lw::simt::this_thread().block_dim)
#define gridDim (::lw::simt::this_thread().grid_dim)
#define warpSize LW_WARP_SIZE

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  lw::simt::syncthreads(where);
}
inline void __trap(std::source_location where = std::source_location::current()) {
  lw::simt::trap("__trap() called", where);
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline long long clock64() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

#if LW_SIMT_DEVICE_API  // the warp built-ins (types.h)
namespace lw::simt::detail {

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffles move at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
template <class T>
LW_SIMT_BUILTIN T shfl(CollectiveKind k, T v, int arg, int width, bool has_mask, uint64_t mask, std::source_location w) {
  return from_bits<T>(
      warp_shuffle({k, to_bits(v), arg, width, has_mask, mask, w}, value_kind<T>(), static_cast<int>(sizeof(T))));
}

}  // namespace lw::simt::detail

// CUDA spelling: the mask names the lanes that take part.
#define LW_SIMT_SHFL_SYNC(NAME, KIND, ARGT)                                                          \
  template <class T>                                                                                \
  LW_SIMT_BUILTIN T NAME(uint64_t mask, T v, ARGT arg, int width = warpSize,                                        \
         std::source_location where = std::source_location::current()) {                            \
    return lw::simt::detail::shfl(lw::simt::CollectiveKind::KIND, v, static_cast<int>(arg), width, true, mask, where); \
  }
// HIP spelling: every active lane takes part.
#define LW_SIMT_SHFL(NAME, KIND, ARGT)                                                               \
  template <class T>                                                                                \
  LW_SIMT_BUILTIN T NAME(T v, ARGT arg, int width = warpSize, std::source_location where = std::source_location::current()) { \
    return lw::simt::detail::shfl(lw::simt::CollectiveKind::KIND, v, static_cast<int>(arg), width, false, 0, where); \
  }
LW_SIMT_SHFL_SYNC(__shfl_sync, ShflIdx, int)
LW_SIMT_SHFL_SYNC(__shfl_up_sync, ShflUp, unsigned)
LW_SIMT_SHFL_SYNC(__shfl_down_sync, ShflDown, unsigned)
LW_SIMT_SHFL_SYNC(__shfl_xor_sync, ShflXor, int)
LW_SIMT_SHFL(__shfl, ShflIdx, int)
LW_SIMT_SHFL(__shfl_up, ShflUp, unsigned)
LW_SIMT_SHFL(__shfl_down, ShflDown, unsigned)
LW_SIMT_SHFL(__shfl_xor, ShflXor, int)
#undef LW_SIMT_SHFL_SYNC
#undef LW_SIMT_SHFL

namespace lw::simt {

// A ballot result. It converts to 64-bit integers freely; converting it to a 32-bit integer
// on a 64-lane warp whose lanes 32..63 voted is the classic wave64 bug (the upper votes are
// lost), and the sanitizer reports it.
class BallotMask {
 public:
  BallotMask(uint64_t bits, uint64_t lanes, std::source_location where) : bits_(bits), lanes_(lanes), where_(where) {}
  operator unsigned long long() const { return bits_; }
  operator unsigned long() const { return bits_; }
  operator long long() const { return static_cast<long long>(bits_); }
  operator long() const { return static_cast<long>(bits_); }
  operator unsigned() const { return static_cast<unsigned>(narrow("unsigned int")); }
  operator int() const { return static_cast<int>(narrow("int")); }
  explicit operator bool() const { return bits_ != 0; }
  uint64_t bits() const { return bits_; }

#define LW_SIMT_BALLOT_OP(OP)                                                                            \
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>                                   \
  friend unsigned long long operator OP(BallotMask a, I b) { return a.bits_ OP static_cast<unsigned long long>(b); } \
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>                                   \
  friend unsigned long long operator OP(I a, BallotMask b) { return static_cast<unsigned long long>(a) OP b.bits_; }
  LW_SIMT_BALLOT_OP(&)
  LW_SIMT_BALLOT_OP(|)
  LW_SIMT_BALLOT_OP(^)
#undef LW_SIMT_BALLOT_OP
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
  friend unsigned long long operator>>(BallotMask a, I n) { return a.bits_ >> n; }
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
  friend unsigned long long operator<<(BallotMask a, I n) { return a.bits_ << n; }
  friend unsigned long long operator~(BallotMask a) { return ~a.bits_; }
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
  friend bool operator==(BallotMask a, I b) { return a.bits_ == static_cast<unsigned long long>(b); }
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
  friend bool operator!=(BallotMask a, I b) { return a.bits_ != static_cast<unsigned long long>(b); }

 private:
  uint64_t narrow(const char* type) const {
    if (kWarpSize == 64 && (lanes_ >> 32) != 0 && sanitize()) {
      fault(Fault::BallotTruncated,
            std::string("a ballot of a 64-lane warp is stored in 32 bits (") + type +
                "): the votes of lanes 32..63 are lost; keep it in a 64-bit integer and count it with __popcll",
            where_);
    }
    return bits_;
  }
  uint64_t bits_;
  uint64_t lanes_;
  std::source_location where_;
};

LW_SIMT_BUILTIN BallotMask ballot(bool has_mask, uint64_t mask, int pred, std::source_location w) {
  const uint64_t bits = warp_collective({CollectiveKind::Ballot, pred != 0, 0, kWarpSize, has_mask, mask, w});
  return BallotMask(bits, last_collective_lanes(), w);
}

}  // namespace lw::simt

LW_SIMT_BUILTIN lw::simt::BallotMask __ballot_sync(uint64_t mask, int pred, std::source_location w = std::source_location::current()) {
  return lw::simt::ballot(true, mask, pred, w);
}
LW_SIMT_BUILTIN int __any_sync(uint64_t mask, int pred, std::source_location w = std::source_location::current()) {
  return static_cast<int>(lw::simt::warp_collective({lw::simt::CollectiveKind::Any, pred != 0, 0, warpSize, true, mask, w}));
}
LW_SIMT_BUILTIN int __all_sync(uint64_t mask, int pred, std::source_location w = std::source_location::current()) {
  return static_cast<int>(lw::simt::warp_collective({lw::simt::CollectiveKind::All, pred != 0, 0, warpSize, true, mask, w}));
}
LW_SIMT_BUILTIN lw::simt::BallotMask __ballot(int pred, std::source_location w = std::source_location::current()) {
  return lw::simt::ballot(false, 0, pred, w);
}
LW_SIMT_BUILTIN int __any(int pred, std::source_location w = std::source_location::current()) {
  return static_cast<int>(lw::simt::warp_collective({lw::simt::CollectiveKind::Any, pred != 0, 0, warpSize, false, 0, w}));
}
LW_SIMT_BUILTIN int __all(int pred, std::source_location w = std::source_location::current()) {
  return static_cast<int>(lw::simt::warp_collective({lw::simt::CollectiveKind::All, pred != 0, 0, warpSize, false, 0, w}));
}
LW_SIMT_BUILTIN void __syncwarp(uint64_t mask = (warpSize == 64 ? ~0ull : 0xffffffffull),
                       std::source_location w = std::source_location::current()) {
  lw::simt::warp_collective({lw::simt::CollectiveKind::SyncWarp, 0, 0, warpSize, true, mask, w});
}
// The lanes that reach this point together with the caller.
LW_SIMT_BUILTIN lw::simt::BallotMask __activemask(std::source_location w = std::source_location::current()) {
  return lw::simt::ballot(false, 0, 1, w);
}
inline unsigned __lane_id() { return lw::simt::linear_thread_id() % warpSize; }

#endif  // LW_SIMT_DEVICE_API

// Integer intrinsics
inline int __popc(unsigned v) { return std::popcount(v); }
inline int __popcll(unsigned long long v) { return std::popcount(v); }
inline int __clz(int v) { return std::countl_zero(static_cast<unsigned>(v)); }
inline int __clzll(long long v) { return std::countl_zero(static_cast<unsigned long long>(v)); }
inline int __ffs(int v) { return v == 0 ? 0 : std::countr_zero(static_cast<unsigned>(v)) + 1; }
inline int __ffsll(long long v) { return v == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(v)) + 1; }
inline unsigned __brev(unsigned v) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

namespace lw::simt {

// A 64-bit integer handed to a 32-bit intrinsic. CUDA narrows it silently: harmless where the
// upper half is zero (a 32-lane ballot kept in 64 bits), the wave64 bug where it is not (a
// 64-lane ballot that left its BallotMask type, then counted with __popc): reported then.
inline unsigned narrowed(unsigned long long v, const char* fn, std::source_location where) {
  if ((v >> 32) != 0 && sanitize()) {
    fault(Fault::BallotTruncated,
          std::string(fn) + " of a 64-bit value whose upper 32 bits are set: they are dropped (the votes of lanes "
                            "32..63 of a ballot); use the 64-bit form (" + fn + "ll)",
          where);
  }
  return static_cast<unsigned>(v);
}
template <class I>
concept Wide = std::is_integral_v<I> && sizeof(I) == 8;

}  // namespace lw::simt

template <lw::simt::Wide I>
int __popc(I v, std::source_location w = std::source_location::current()) {
  return std::popcount(lw::simt::narrowed(static_cast<unsigned long long>(v), "__popc", w));
}
template <lw::simt::Wide I>
int __ffs(I v, std::source_location w = std::source_location::current()) {
  return __ffs(static_cast<int>(lw::simt::narrowed(static_cast<unsigned long long>(v), "__ffs", w)));
}
template <lw::simt::Wide I>
int __clz(I v, std::source_location w = std::source_location::current()) {
  return __clz(static_cast<int>(lw::simt::narrowed(static_cast<unsigned long long>(v), "__clz", w)));
}

// CUDA's device min and max: one per pair of arithmetic types, in their common type (its
// overloads follow the usual arithmetic conversions: min(int, unsigned) is unsigned). Checked
// shared-memory elements (SharedRef) take part as their values.
namespace lw::simt::detail {
template <class T>
struct ScalarOf {
  using type = T;
};
template <class T>
struct ScalarOf<SharedRef<T>> {
  using type = T;
};
template <class T>
using scalar_of = typename ScalarOf<std::remove_cvref_t<T>>::type;
template <class T>
concept Scalar = std::is_arithmetic_v<scalar_of<T>>;
}  // namespace lw::simt::detail

template <lw::simt::detail::Scalar A, lw::simt::detail::Scalar B>
auto min(const A& a, const B& b) {
  using C = std::common_type_t<lw::simt::detail::scalar_of<A>, lw::simt::detail::scalar_of<B>>;
  const C x = static_cast<C>(static_cast<lw::simt::detail::scalar_of<A>>(a));
  const C y = static_cast<C>(static_cast<lw::simt::detail::scalar_of<B>>(b));
  return y < x ? y : x;
}
template <lw::simt::detail::Scalar A, lw::simt::detail::Scalar B>
auto max(const A& a, const B& b) {
  using C = std::common_type_t<lw::simt::detail::scalar_of<A>, lw::simt::detail::scalar_of<B>>;
  const C x = static_cast<C>(static_cast<lw::simt::detail::scalar_of<A>>(a));
  const C y = static_cast<C>(static_cast<lw::simt::detail::scalar_of<B>>(b));
  return x < y ? y : x;
}

// Float intrinsics
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return std::clamp(x, 0.0f, 1.0f); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __int_as_float(int v) { return std::bit_cast<float>(v); }
inline int __float_as_int(float v) { return std::bit_cast<int>(v); }
inline float __uint_as_float(unsigned v) { return std::bit_cast<float>(v); }
inline unsigned __float_as_uint(float v) { return std::bit_cast<unsigned>(v); }
inline double __longlong_as_double(long long v) { return std::bit_cast<double>(v); }
inline long long __double_as_longlong(double v) { return std::bit_cast<long long>(v); }
// expf, logf, sqrtf, tanhf, fmaxf, fminf, ... come from <cmath> in the global namespace.

template <class T>
T __ldg(const T* p) { return *p; }

// Atomics: blocks run on several OS threads, so these are real atomics. On checked shared
// memory (`atomicAdd(&s[i], v)`) the access is checked first: its bytes must have been written.
#define LW_SIMT_ATOMIC(NAME, EXPR)                                         \
  template <class T>                                                      \
  T NAME(T* addr, T val) {                                                \
    lw::simt::shared_atomic(addr, sizeof(T), #NAME);                      \
    std::atomic_ref<T> ref(*addr);                                        \
    T old = ref.load();                                                   \
    while (!ref.compare_exchange_weak(old, static_cast<T>(EXPR))) {       \
    }                                                                     \
    return old;                                                           \
  }
LW_SIMT_ATOMIC(atomicAdd, old + val)
LW_SIMT_ATOMIC(atomicSub, old - val)
LW_SIMT_ATOMIC(atomicMax, old > val ? old : val)
LW_SIMT_ATOMIC(atomicMin, old < val ? old : val)
LW_SIMT_ATOMIC(atomicExch, val)
LW_SIMT_ATOMIC(atomicAnd, old & val)
LW_SIMT_ATOMIC(atomicOr, old | val)
LW_SIMT_ATOMIC(atomicXor, old ^ val)
#undef LW_SIMT_ATOMIC
template <class T>
T atomicCAS(T* addr, T compare, T val) {
  lw::simt::shared_atomic(addr, sizeof(T), "atomicCAS");
  std::atomic_ref<T> ref(*addr);
  ref.compare_exchange_strong(compare, val);
  return compare;
}
// fp16 pairs: CUDA updates the two halves as one 32-bit word.
inline __half2 atomicAdd(__half2* addr, __half2 val) {
  lw::simt::shared_atomic(addr, sizeof(__half2), "atomicAdd");
  std::atomic_ref<uint32_t> ref(*reinterpret_cast<uint32_t*>(addr));
  uint32_t old = ref.load();
  for (;;) {
    __half2 o = std::bit_cast<__half2>(old);
    __half2 n{__half(float(o.x) + float(val.x)), __half(float(o.y) + float(val.y))};
    if (ref.compare_exchange_weak(old, std::bit_cast<uint32_t>(n))) return o;
  }
}
