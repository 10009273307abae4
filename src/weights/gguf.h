// GGUF (v2, v3, little-endian) reader: metadata, tensor infos and the mapped tensor data.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "weights/checkpoint.h"
#include "weights/mapped_file.h"

namespace lw::weights {

// The GGUF metadata value types, with their on-disk ids.
enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
  u64 = 10, i64 = 11, f64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Integers are held widened (unsigned in u64, signed in i64), floats in a
// double; `type` keeps the stored type. An array holds its elements, each with elem_type.
struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType elem_type = GgufType::u8;  // arrays only
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> value;

  // "uint32", "array[string]", "array[array[int32]]", for messages.
  std::string type_string() const;
};

class GgufFile : public Checkpoint {
 public:
  // Throws lw::Error naming the path for a bad magic, an unsupported version, a malformed or
  // truncated header, a tensor whose bytes lie outside the file, or an unknown GGML type id.
  static GgufFile open(const std::string& path);

  uint32_t version() const { return version_; }
  const std::string& path() const { return file_.path(); }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section

  // Metadata, in file order.
  bool has(std::string_view key) const;
  const GgufValue* find_value(std::string_view key) const;
  const GgufValue& value(std::string_view key) const;  // throws when absent
  const std::vector<std::string>& keys() const { return keys_; }

  // Typed getters. Missing keys and wrong types throw lw::Error naming the key, the expected
  // and the stored type, and the file. Integer getters accept any stored integer type whose
  // value fits; get_f32 also accepts float64.
  const std::string& get_string(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;

  // The GGML type id of a tensor as stored (e.g. 12 for Q4_K).
  uint32_t ggml_type(std::string_view tensor) const;

  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  const TensorRecord* find(std::string_view name) const override;
  std::vector<std::string> names() const override;
  std::string description() const override;

 private:
  GgufFile() = default;
  [[noreturn]] void type_error(std::string_view key, const char* expected, const GgufValue& v) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::unordered_map<std::string, GgufValue> metadata_;
  std::vector<TensorRecord> tensors_;
  std::vector<uint32_t> ggml_types_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace lw::weights
