// FP8 E4M3 as OCP's "e4m3fn" (the format of Hugging Face's F8_E4M3 tensors and of NVIDIA's
// __nv_fp8_e4m3): 1 sign bit, 4 exponent bits of bias 7, 3 mantissa bits; no infinities, the
// two codes 0x7F and 0xFF are NaN; the largest finite value is 448. Decoded exactly, in
// software, on every target: AMD's gfx942 hardware format (e4m3fnuz, bias 8) is another
// encoding of other values, so kernels never hand these bytes to its instructions unconverted.
#pragma once
#include <cmath>
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

LW_HOST_DEVICE inline bool fp8_e4m3_is_nan(uint8_t b) { return (b & 0x7Fu) == 0x7Fu; }

LW_HOST_DEVICE inline float fp8_e4m3_to_float(uint8_t b) {
  const uint32_t exponent = (b >> 3) & 0xFu, mantissa = b & 0x7u;
  float magnitude;
  if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0.001953125f;  // subnormal: mantissa / 8 * 2^-6
  } else if (exponent == 0xFu && mantissa == 0x7u) {
    magnitude = NAN;
  } else {
    // 2^(exponent - 7) x 1.mantissa as an fp32 bit pattern (fp32 exponent bias 127).
    magnitude = __builtin_bit_cast(float, ((exponent + 120u) << 23) | (mantissa << 20));
  }
  return (b & 0x80u) ? -magnitude : magnitude;
}

// Byte i (0..3, little-endian) of `word` decoded as e4m3fn and divided by 2^120, in a few
// integer operations and no conversion: the sign goes to bit 31 and the 7 exponent-and-mantissa
// bits to bits 26..20, so fp32's exponent field holds e4m3's (bias 127 instead of 7: hence 2^-120)
// and e4m3's subnormals become fp32 subnormals of the same mantissa. Multiplying by 2^120 (exact)
// gives the value; that needs fp32 subnormals kept (no flush-to-zero build). The NaN codes
// decode as +-480: callers refuse them before (weights are checked at load).
LW_HOST_DEVICE inline float fp8_e4m3_times_2_pow_minus_120(uint32_t word, int i) {
  const uint32_t t = word << (24 - 8 * i);
  return __builtin_bit_cast(float, (t & 0x80000000u) | ((t >> 4) & 0x07F00000u));
}

// The e4m3fn code nearest to v, ties to the even code; magnitudes beyond the largest finite
// value saturate to +-448 (the convention of FP8 activation quantisation: the scale is chosen so
// that only rounding error reaches past it); NaN -> 0x7F.
LW_HOST_DEVICE inline uint8_t fp8_e4m3_from_float(float v) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float a = fabsf(v);
  if (a != a) return 0x7Fu;
  if (a >= 448.0f) return sign | 0x7Eu;
  if (a < 0.015625f) {
    // Subnormal codes are multiples of 2^-9; rounding up to 8 gives 0x08, the smallest normal.
    return sign | static_cast<uint8_t>(rintf(a * 512.0f));
  }
  // Round fp32's 23 mantissa bits to 3, to nearest even; a carry moves into the exponent.
  uint32_t m = __builtin_bit_cast(uint32_t, a);
  m += 0x7FFFFu + ((m >> 20) & 1u);
  m >>= 20;                                            // fp32 exponent << 3 | 3 mantissa bits
  return sign | static_cast<uint8_t>(m - (120u << 3));  // rebias 127 -> 7
}

}  // namespace lw::kernels
