// Arithmetic that gives the same bits on every target (CUDA, HIP, the emulator), for results
// that must agree across targets, such as which token a seeded sampler picks. Only IEEE
// operations with one rounding each are used: explicit fmaf, rintf, + - * /; no library
// transcendental (their last bits differ between vendors) and no implicit contraction.
#pragma once
#include <cmath>
#include <cstdint>

#include "gpu/compat.h"

namespace lw::gpu {

// a * b + c with two roundings (the product, then the sum), never fused into one FMA: what a
// reference computed without contraction (numpy, ggml's C) gets. nvcc and hipcc contract the
// plain expression in device code, so it gets the intrinsics there; host compilers (the
// emulator's, in ISO mode; the host pass of nvcc and hipcc) do not contract, and a plain C++
// file has no __fmul_rn / __fadd_rn.
__device__ __forceinline__ float mul_add_unfused(float a, float b, float c) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fadd_rn(__fmul_rn(a, b), c);
#else
  return a * b + c;
#endif
}

// e^x, within 2 ulp, identical on every target. Underflows to 0 below -87.3, inf above 88.7.
LW_HOST_DEVICE inline float exp_portable(float x) {
  if (!(x > -87.3f)) return x != x ? x : 0.0f;  // NaN stays NaN
  if (x > 88.7f) return INFINITY;
  const float n = rintf(x * 1.44269504088896341f);
  float r = fmaf(n, -0.693145751953125f, x);  // Cody-Waite: ln 2 in two parts
  r = fmaf(n, -1.428606765330187e-06f, r);
  float p = 1.9875691500e-4f;                 // e^r on [-ln2/2, ln2/2]
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p, r * r, r);
  p = p + 1.0f;
  return ldexpf(p, static_cast<int>(n));  // exact: a power-of-two scaling
}

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): four 32-bit
// words from a 128-bit counter and a 64-bit key; the same everywhere.
struct Philox4 {
  uint32_t v[4];
};
LW_HOST_DEVICE inline Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                            uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// A uniform float in [0, 1) with 24 random bits, from a 64-bit seed and a 64-bit counter.
LW_HOST_DEVICE inline float uniform_portable(uint64_t seed, uint64_t counter) {
  const Philox4 r = philox4x32_10(static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0,
                                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(r.v[0] >> 8) * 5.9604644775390625e-8f;  // 2^-24
}

}  // namespace lw::gpu
