// Reading make_fixtures.py's reference values, and the rounding a correct conversion applies.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gpu/numeric.h"

namespace lw::test {

// The values of a binary file of T (little-endian, as the fixture script writes them).
template <class T>
std::vector<T> read_values(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  const std::vector<char> b((std::istreambuf_iterator<char>(f)), {});
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// What a correct conversion of an f32 value to dtype holds (round to nearest even, once).
inline double rounded_to(float v, DType dtype) {
  switch (dtype) {
    case DType::f16: return gpu::to_float(gpu::from_float<half>(v));
    case DType::bf16: return gpu::to_float(gpu::from_float<bfloat16>(v));
    default: return v;
  }
}

}  // namespace lw::test
