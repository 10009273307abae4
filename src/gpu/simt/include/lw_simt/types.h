// Built-in CUDA types (dim3, uint3, vector types) for code compiled against the SIMT emulator.
#pragma once
#include <cstdint>

#ifndef LW_WARP_SIZE
#error "LW_WARP_SIZE (32 or 64) must be defined when compiling against the lightwave SIMT emulator"
#endif
#if LW_WARP_SIZE != 32 && LW_WARP_SIZE != 64
#error "LW_WARP_SIZE must be 32 or 64"
#endif

// The declarations that depend on the warp size (the warp built-ins, kWarpSize) are left out of
// sources compiled with LW_SIMT_HOST_ONLY unless they also define LW_DEVICE_CODE: lightwave's
// own build marks every source but its kernels so, which makes a host-only source's
// preprocessed text (what ccache keys an object on) the same at warp 32 and 64, and one object
// serves both builds. Outside code defines neither and sees everything.
#if !defined(LW_SIMT_HOST_ONLY) || defined(LW_DEVICE_CODE)
#define LW_SIMT_DEVICE_API 1
#else
#define LW_SIMT_DEVICE_API 0
#endif

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

#define LW_SIMT_VEC2(T, N, A) \
  struct alignas(A) N##2 { T x, y; }; \
  inline N##2 make_##N##2(T x, T y) { return {x, y}; }
#define LW_SIMT_VEC4(T, N, A) \
  struct alignas(A) N##4 { T x, y, z, w; }; \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }

LW_SIMT_VEC2(float, float, 8)
LW_SIMT_VEC4(float, float, 16)
LW_SIMT_VEC2(int, int, 8)
LW_SIMT_VEC4(int, int, 16)
LW_SIMT_VEC2(unsigned, uint, 8)
LW_SIMT_VEC4(unsigned, uint, 16)
LW_SIMT_VEC2(double, double, 16)
#undef LW_SIMT_VEC2
#undef LW_SIMT_VEC4
