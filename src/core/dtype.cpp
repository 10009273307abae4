#include "core/dtype.h"

#include "base/error.h"

namespace lw {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  LW_FAIL("unknown dtype " << static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "unknown";
}

DType parse_dtype(std::string_view n) {
  if (n == "f32" || n == "float32" || n == "float") return DType::f32;
  if (n == "f16" || n == "float16" || n == "half" || n == "fp16") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "i8" || n == "int8") return DType::i8;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  LW_FAIL("unknown dtype '" << n << "'; expected one of f32, f16, bf16, i8, i32, i64");
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

}  // namespace lw
