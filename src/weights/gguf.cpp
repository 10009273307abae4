#include "weights/gguf.h"

#include <cstring>
#include <limits>

#include "base/error.h"

namespace lw::weights {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32

// The GGML tensor types this layer knows by id: its name, block size and block bytes, and
// what it loads as (unsupported for the rest; their sizes still bound-check the file).
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
  FileDType dtype;
};

constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4, FileDType::f32},          {1, "F16", 1, 2, FileDType::f16},
    {2, "Q4_0", 32, 18, FileDType::q4_0},      {3, "Q4_1", 32, 20, FileDType::q4_1},
    {6, "Q5_0", 32, 22, FileDType::q5_0}, {7, "Q5_1", 32, 24, FileDType::q5_1},
    {8, "Q8_0", 32, 34, FileDType::q8_0},      {9, "Q8_1", 32, 40, FileDType::unsupported},
    {10, "Q2_K", 256, 84, FileDType::q2_k}, {11, "Q3_K", 256, 110, FileDType::q3_k},
    {12, "Q4_K", 256, 144, FileDType::q4_k}, {13, "Q5_K", 256, 176, FileDType::q5_k},
    {14, "Q6_K", 256, 210, FileDType::q6_k}, {15, "Q8_K", 256, 292, FileDType::unsupported},
    {16, "IQ2_XXS", 256, 66, FileDType::unsupported}, {17, "IQ2_XS", 256, 74, FileDType::unsupported},
    {18, "IQ3_XXS", 256, 98, FileDType::unsupported}, {19, "IQ1_S", 256, 50, FileDType::unsupported},
    {20, "IQ4_NL", 32, 18, FileDType::unsupported}, {21, "IQ3_S", 256, 110, FileDType::unsupported},
    {22, "IQ2_S", 256, 82, FileDType::unsupported}, {23, "IQ4_XS", 256, 136, FileDType::unsupported},
    {24, "I8", 1, 1, FileDType::i8},           {25, "I16", 1, 2, FileDType::unsupported},
    {26, "I32", 1, 4, FileDType::i32},         {27, "I64", 1, 8, FileDType::i64},
    {28, "F64", 1, 8, FileDType::unsupported}, {29, "IQ1_M", 256, 56, FileDType::unsupported},
    {30, "BF16", 1, 2, FileDType::bf16},       {34, "TQ1_0", 256, 54, FileDType::unsupported},
    {35, "TQ2_0", 256, 66, FileDType::unsupported}, {39, "MXFP4", 32, 17, FileDType::unsupported},
};

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

bool is_unsigned(GgufType t) { return t == GgufType::u8 || t == GgufType::u16 || t == GgufType::u32 || t == GgufType::u64; }
bool is_signed(GgufType t) { return t == GgufType::i8 || t == GgufType::i16 || t == GgufType::i32 || t == GgufType::i64; }
bool is_integer(GgufType t) { return is_unsigned(t) || is_signed(t); }
bool is_floating(GgufType t) { return t == GgufType::f32 || t == GgufType::f64; }

// Bounds-checked little-endian reads over the mapped header.
class Reader {
 public:
  explicit Reader(const MappedFile& f) : f_(f) {}

  void need(uint64_t n, const std::string& what) const {
    LW_CHECK(n <= f_.size() && pos_ <= f_.size() - n,
             "file truncated: " << what << " needs bytes [" << pos_ << ", " << pos_ + n << ") but '" << f_.path()
                                << "' has " << f_.size() << " bytes");
  }
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, f_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(f_.data() + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  uint64_t pos() const { return pos_; }

 private:
  const MappedFile& f_;
  uint64_t pos_ = 0;
};

GgufValue read_value(Reader& r, GgufType type, const std::string& what, const std::string& path, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::u8: v.value = uint64_t{r.read<uint8_t>(what)}; break;
    case GgufType::u16: v.value = uint64_t{r.read<uint16_t>(what)}; break;
    case GgufType::u32: v.value = uint64_t{r.read<uint32_t>(what)}; break;
    case GgufType::u64: v.value = r.read<uint64_t>(what); break;
    case GgufType::i8: v.value = int64_t{r.read<int8_t>(what)}; break;
    case GgufType::i16: v.value = int64_t{r.read<int16_t>(what)}; break;
    case GgufType::i32: v.value = int64_t{r.read<int32_t>(what)}; break;
    case GgufType::i64: v.value = r.read<int64_t>(what); break;
    case GgufType::f32: v.value = double{r.read<float>(what)}; break;
    case GgufType::f64: v.value = r.read<double>(what); break;
    case GgufType::boolean: {
      const uint8_t b = r.read<uint8_t>(what);
      LW_CHECK(b <= 1, what << " in '" << path << "' is a bool of value " << int{b});
      v.value = b != 0;
      break;
    }
    case GgufType::string: v.value = r.read_string(what); break;
    case GgufType::array: {
      LW_CHECK(depth < 8, what << " in '" << path << "' nests arrays too deeply");
      const uint32_t et = r.read<uint32_t>(what);
      LW_CHECK(et <= static_cast<uint32_t>(GgufType::f64),
               what << " in '" << path << "' has an array of unknown value type " << et);
      v.elem_type = static_cast<GgufType>(et);
      const uint64_t n = r.read<uint64_t>(what);
      // Every element takes at least one byte: a larger count cannot fit in the file.
      r.need(n, what);
      std::vector<GgufValue> items;
      items.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(r, v.elem_type, what, path, depth + 1));
      v.value = std::move(items);
      break;
    }
    default: LW_FAIL(what << " in '" << path << "' has unknown value type " << static_cast<uint32_t>(type));
  }
  return v;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::u8: return "uint8";
    case GgufType::i8: return "int8";
    case GgufType::u16: return "uint16";
    case GgufType::i16: return "int16";
    case GgufType::u32: return "uint32";
    case GgufType::i32: return "int32";
    case GgufType::f32: return "float32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "uint64";
    case GgufType::i64: return "int64";
    case GgufType::f64: return "float64";
  }
  return "?";
}

std::string GgufValue::type_string() const {
  if (type != GgufType::array) return gguf_type_name(type);
  const auto& items = std::get<std::vector<GgufValue>>(value);
  if (elem_type == GgufType::array && !items.empty()) return "array[" + items.front().type_string() + "]";
  return std::string("array[") + gguf_type_name(elem_type) + "]";
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile g;
  g.file_ = MappedFile(path);
  Reader r(g.file_);
  LW_CHECK(g.file_.size() >= 4, "'" << path << "' is not a GGUF file: " << g.file_.size() << " bytes");
  const uint32_t magic = r.read<uint32_t>("the magic");
  LW_CHECK(magic == kMagic, "'" << path << "' is not a GGUF file: bad magic 0x" << std::hex << magic
                                << " (expected 0x" << kMagic << ", \"GGUF\")");
  g.version_ = r.read<uint32_t>("the version");
  LW_CHECK(g.version_ == 2 || g.version_ == 3,
           "'" << path << "' is GGUF version " << g.version_ << "; supported versions are 2 and 3");
  const uint64_t n_tensors = r.read<uint64_t>("the tensor count");
  const uint64_t n_kv = r.read<uint64_t>("the metadata count");

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string what = "metadata entry " + std::to_string(i);
    std::string key = r.read_string(what);
    const std::string kwhat = "metadata key '" + key + "'";
    const uint32_t type = r.read<uint32_t>(kwhat);
    LW_CHECK(type <= static_cast<uint32_t>(GgufType::f64),
             kwhat << " in '" << path << "' has unknown value type " << type);
    GgufValue v = read_value(r, static_cast<GgufType>(type), kwhat, path, 0);
    LW_CHECK(!g.metadata_.contains(key), kwhat << " appears twice in '" << path << "'");
    g.keys_.push_back(key);
    g.metadata_.emplace(std::move(key), std::move(v));
  }
  if (g.has("general.alignment")) {
    const uint32_t a = g.get_u32("general.alignment");
    LW_CHECK(a > 0 && (a & (a - 1)) == 0,
             "general.alignment in '" << path << "' is " << a << "; it must be a power of two");
    g.alignment_ = a;
  }

  struct Info {
    uint64_t offset;
    uint32_t type;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorRecord rec;
    rec.name = r.read_string("tensor info " + std::to_string(i));
    const std::string what = "tensor info '" + rec.name + "'";
    const uint32_t n_dims = r.read<uint32_t>(what);
    LW_CHECK(n_dims >= 1 && n_dims <= 8, what << " in '" << path << "' has " << n_dims << " dimensions");
    std::vector<int64_t> ne(n_dims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = r.read<uint64_t>(what);
      LW_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                   (n == 0 || numel <= std::numeric_limits<int64_t>::max() / static_cast<int64_t>(n)),
               what << " in '" << path << "' has an impossible size");
      ne[d] = static_cast<int64_t>(n);
      numel *= ne[d];
    }
    rec.shape.assign(ne.rbegin(), ne.rend());
    const uint32_t type = r.read<uint32_t>(what);
    const uint64_t offset = r.read<uint64_t>(what);
    const GgmlTypeInfo* ti = ggml_type_info(type);
    LW_CHECK(ti != nullptr, "tensor '" << rec.name << "' in '" << path << "' has unknown GGML type id " << type);
    LW_CHECK(ne[0] % ti->block_elems == 0, "tensor '" << rec.name << "' in '" << path << "' of type " << ti->name
                                                       << " has rows of " << ne[0] << " elements, not a multiple of its block of "
                                                       << ti->block_elems);
    LW_CHECK(offset % g.alignment_ == 0, "tensor '" << rec.name << "' in '" << path << "' starts at data offset "
                                                     << offset << ", not a multiple of the alignment " << g.alignment_);
    rec.dtype = ti->dtype;
    rec.type_name = ti->name;
    const uint64_t blocks = static_cast<uint64_t>(numel / ti->block_elems);
    LW_CHECK(blocks <= std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(ti->block_bytes),
             what << " in '" << path << "' has an impossible size");
    rec.bytes = static_cast<size_t>(blocks * static_cast<uint64_t>(ti->block_bytes));
    rec.file = path;
    LW_CHECK(!g.index_.contains(rec.name), "tensor '" << rec.name << "' appears twice in '" << path << "'");
    g.index_.emplace(rec.name, g.tensors_.size());
    g.tensors_.push_back(std::move(rec));
    infos.push_back({offset, type});
  }

  const uint64_t end_of_infos = r.pos();
  g.data_offset_ = (end_of_infos + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  const uint64_t size = g.file_.size();
  for (size_t i = 0; i < g.tensors_.size(); ++i) {
    TensorRecord& rec = g.tensors_[i];
    const uint64_t begin = g.data_offset_ + infos[i].offset;
    const bool fits = infos[i].offset <= size && begin <= size && rec.bytes <= size - begin;
    LW_CHECK(fits, "file truncated: tensor '" << rec.name << "' needs bytes [" << begin << ", " << begin + rec.bytes
                                              << ") but '" << path << "' has " << size << " bytes");
    rec.data = g.file_.data() + begin;
    g.ggml_types_.push_back(infos[i].type);
  }
  return g;
}

bool GgufFile::has(std::string_view key) const { return find_value(key) != nullptr; }

const GgufValue* GgufFile::find_value(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::value(std::string_view key) const {
  const GgufValue* v = find_value(key);
  LW_CHECK(v != nullptr, "GGUF metadata key '" << key << "' not found in '" << path() << "'");
  return *v;
}

void GgufFile::type_error(std::string_view key, const char* expected, const GgufValue& v) const {
  LW_FAIL("GGUF metadata key '" << key << "' in '" << path() << "' is " << v.type_string() << ", expected "
                                << expected);
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::string) type_error(key, "string", v);
  return std::get<std::string>(v.value);
}

namespace {
// The value of an integer entry, if it lies in [lo, hi].
bool integer_in(const GgufValue& v, int64_t lo, uint64_t hi, int64_t* out) {
  if (is_unsigned(v.type)) {
    const uint64_t u = std::get<uint64_t>(v.value);
    if (u > hi) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (is_signed(v.type)) {
    const int64_t s = std::get<int64_t>(v.value);
    if (s < lo || (s > 0 && static_cast<uint64_t>(s) > hi)) return false;
    *out = s;
    return true;
  }
  return false;
}
}  // namespace

uint32_t GgufFile::get_u32(std::string_view key) const {
  const GgufValue& v = value(key);
  int64_t x = 0;
  if (!is_integer(v.type)) type_error(key, "uint32", v);
  LW_CHECK(integer_in(v, 0, std::numeric_limits<uint32_t>::max(), &x),
           "GGUF metadata key '" << key << "' in '" << path() << "' (" << v.type_string()
                                 << ") holds a value outside the range of uint32");
  return static_cast<uint32_t>(x);
}

int64_t GgufFile::get_i64(std::string_view key) const {
  const GgufValue& v = value(key);
  int64_t x = 0;
  if (!is_integer(v.type)) type_error(key, "int64", v);
  LW_CHECK(integer_in(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &x),
           "GGUF metadata key '" << key << "' in '" << path() << "' (" << v.type_string()
                                 << ") holds a value outside the range of int64");
  return x;
}

float GgufFile::get_f32(std::string_view key) const {
  const GgufValue& v = value(key);
  if (!is_floating(v.type)) type_error(key, "float32", v);
  return static_cast<float>(std::get<double>(v.value));
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::boolean) type_error(key, "bool", v);
  return std::get<bool>(v.value);
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::array || v.elem_type != GgufType::string) type_error(key, "array[string]", v);
  std::vector<std::string> out;
  for (const GgufValue& e : std::get<std::vector<GgufValue>>(v.value)) out.push_back(std::get<std::string>(e.value));
  return out;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::array || !is_floating(v.elem_type)) type_error(key, "array[float32]", v);
  std::vector<float> out;
  for (const GgufValue& e : std::get<std::vector<GgufValue>>(v.value))
    out.push_back(static_cast<float>(std::get<double>(e.value)));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::array || !is_integer(v.elem_type)) type_error(key, "array[int32]", v);
  std::vector<int32_t> out;
  const auto& items = std::get<std::vector<GgufValue>>(v.value);
  for (size_t i = 0; i < items.size(); ++i) {
    int64_t x = 0;
    LW_CHECK(integer_in(items[i], std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &x),
             "GGUF metadata key '" << key << "' in '" << path() << "' (" << v.type_string() << ") holds element " << i
                                   << " outside the range of int32");
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

uint32_t GgufFile::ggml_type(std::string_view tensor) const {
  auto it = index_.find(std::string(tensor));
  LW_CHECK(it != index_.end(), "tensor '" << tensor << "' not found in " << description());
  return ggml_types_[it->second];
}

const TensorRecord* GgufFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> GgufFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

std::string GgufFile::description() const { return "GGUF v" + std::to_string(version_) + " '" + path() + "'"; }

}  // namespace lw::weights
