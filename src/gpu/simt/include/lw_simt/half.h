// fp16 and bf16 storage types for the SIMT emulator, with the names and conversions of
// cuda_fp16.h / cuda_bf16.h. Conversions from float round to nearest even; arithmetic is
// done in float and rounded back, as the GPU's half instructions do for a single op.
#pragma once
#include <cstdint>
#include <cstring>

namespace lw::simt::detail {

inline uint32_t f2u(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float u2f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = f2u(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24 bits dropped
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return u2f(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return u2f(sign);
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
    return u2f(sign | static_cast<uint32_t>(112 - e) << 23 | (mant & 0x3ffu) << 13);
  }
  return u2f(sign | (exp + 112u) << 23 | mant << 13);
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) { return u2f(static_cast<uint32_t>(b) << 16); }

}  // namespace lw::simt::detail

#define LW_SIMT_HALF_TYPE(NAME, TO_BITS, FROM_BITS)                                                 \
  struct NAME {                                                                                    \
    uint16_t bits_;                                                                                \
    NAME() = default;                                                                              \
    NAME(float f) : bits_(lw::simt::detail::TO_BITS(f)) {}                                         \
    NAME(double d) : NAME(static_cast<float>(d)) {}                                                \
    NAME(int i) : NAME(static_cast<float>(i)) {}                                                   \
    operator float() const { return lw::simt::detail::FROM_BITS(bits_); }                          \
    NAME& operator+=(NAME o) { return *this = NAME(float(*this) + float(o)); }                     \
    NAME& operator-=(NAME o) { return *this = NAME(float(*this) - float(o)); }                     \
    NAME& operator*=(NAME o) { return *this = NAME(float(*this) * float(o)); }                     \
    NAME& operator/=(NAME o) { return *this = NAME(float(*this) / float(o)); }                     \
    friend NAME operator+(NAME a, NAME b) { return NAME(float(a) + float(b)); }                    \
    friend NAME operator-(NAME a, NAME b) { return NAME(float(a) - float(b)); }                    \
    friend NAME operator*(NAME a, NAME b) { return NAME(float(a) * float(b)); }                    \
    friend NAME operator/(NAME a, NAME b) { return NAME(float(a) / float(b)); }                    \
    friend NAME operator-(NAME a) { NAME r; r.bits_ = a.bits_ ^ 0x8000u; return r; }               \
    friend bool operator==(NAME a, NAME b) { return float(a) == float(b); }                        \
    friend bool operator<(NAME a, NAME b) { return float(a) < float(b); }                          \
    friend bool operator>(NAME a, NAME b) { return float(a) > float(b); }                          \
    friend bool operator<=(NAME a, NAME b) { return float(a) <= float(b); }                        \
    friend bool operator>=(NAME a, NAME b) { return float(a) >= float(b); }                        \
  };                                                                                               \
  struct NAME##2 {                                                                                 \
    NAME x, y;                                                                                     \
  };

LW_SIMT_HALF_TYPE(__half, float_to_half_bits, half_bits_to_float)
LW_SIMT_HALF_TYPE(__nv_bfloat16, float_to_bf16_bits, bf16_bits_to_float)
#undef LW_SIMT_HALF_TYPE

static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2, "half types must be 2 bytes");

using half = __half;
using half2 = __half2;

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 v) { return {__half(v.x), __half(v.y)}; }
inline float2 __half22float2(__half2 v) { return {float(v.x), float(v.y)}; }
inline float __low2float(__half2 v) { return float(v.x); }
inline float __high2float(__half2 v) { return float(v.y); }
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.bits_ = u; return h; }
inline unsigned short __half_as_ushort(__half h) { return h.bits_; }

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return {__nv_bfloat16(v.x), __nv_bfloat16(v.y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {float(v.x), float(v.y)}; }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.bits_ = u; return h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits_; }
