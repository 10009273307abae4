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

}  // namespace lw::kernels
