// Element types of tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpu/compat.h"

namespace lw {

enum class DType : uint8_t { f32, f16, bf16, i8, i32, i64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32"/"float32", "f16"/"float16"/"half", "bf16"/"bfloat16", "i8", "i32", "i64";
// throws lw::Error listing the accepted names otherwise.
DType parse_dtype(std::string_view name);
bool is_float(DType t);

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<half> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::i8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace lw
