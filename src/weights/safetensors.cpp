#include "weights/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace lw::weights {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Loadable dtypes by their safetensors names; the element sizes of others only bound-check.
struct StDType {
  const char* name;
  size_t size;
  FileDType dtype;
};
constexpr StDType kStDTypes[] = {
    {"F32", 4, FileDType::f32},         {"F16", 2, FileDType::f16},         {"BF16", 2, FileDType::bf16},
    {"I8", 1, FileDType::i8},           {"I32", 4, FileDType::i32},         {"I64", 8, FileDType::i64},
    {"F64", 8, FileDType::unsupported}, {"U8", 1, FileDType::unsupported},  {"BOOL", 1, FileDType::unsupported},
    {"I16", 2, FileDType::unsupported}, {"U16", 2, FileDType::unsupported}, {"U32", 4, FileDType::unsupported},
    {"U64", 8, FileDType::unsupported}, {"F8_E4M3", 1, FileDType::f8_e4m3},
    {"F8_E5M2", 1, FileDType::unsupported},
};

const StDType* st_dtype(const std::string& name) {
  for (const auto& t : kStDTypes)
    if (name == t.name) return &t;
  return nullptr;
}

json parse_json(const MappedFile& f, size_t begin, size_t n, const char* what) {
  try {
    const char* p = reinterpret_cast<const char*>(f.data()) + begin;
    return json::parse(p, p + n);
  } catch (const json::exception& e) {
    LW_FAIL("malformed " << what << " in '" << f.path() << "': " << e.what());
  }
}

}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint c;
  c.path_ = path;
  if (!fs::is_directory(path)) {
    c.add_file(path);
    return c;
  }
  const fs::path dir(path);
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(index)) {
    c.sharded_ = true;
    const MappedFile f(index.string());
    const json j = parse_json(f, 0, f.size(), "index JSON");
    LW_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
             "'" << index.string() << "' has no weight_map object");
    // Shards in order of first mention, then every tensor checked against its shard.
    std::vector<std::string> shards;
    std::map<std::string, std::string> where;
    for (const auto& [tensor, shard] : j["weight_map"].items()) {
      LW_CHECK(shard.is_string(), "weight_map entry '" << tensor << "' in '" << index.string() << "' is not a file name");
      const std::string s = shard.get<std::string>();
      if (std::find(shards.begin(), shards.end(), s) == shards.end()) shards.push_back(s);
      where[tensor] = s;
    }
    for (const std::string& s : shards) {
      const fs::path p = dir / s;
      LW_CHECK(fs::exists(p), "shard '" << s << "' named in '" << index.string() << "' is missing (no '"
                                        << p.string() << "')");
      c.add_file(p.string());
    }
    for (const auto& [tensor, shard] : where) {
      const TensorRecord* rec = c.find(tensor);
      LW_CHECK(rec != nullptr && fs::path(rec->file).filename() == fs::path(shard).filename(),
               "tensor '" << tensor << "' is mapped to shard '" << shard << "' by '" << index.string()
                          << "' but that shard does not hold it");
    }
    return c;
  }
  LW_CHECK(fs::exists(single), "'" << path << "' holds neither model.safetensors nor model.safetensors.index.json");
  c.add_file(single.string());
  return c;
}

void SafetensorsCheckpoint::add_file(const std::string& path) {
  MappedFile f(path);
  const size_t size = f.size();
  LW_CHECK(size >= 8, "file truncated: the safetensors header size needs bytes [0, 8) but '" << path << "' has "
                                                                                           << size << " bytes");
  uint64_t n = 0;
  std::memcpy(&n, f.data(), 8);
  LW_CHECK(n <= size - 8, "file truncated: the safetensors header needs bytes [8, " << (n > size ? n : n + 8)
                                                                                   << ") but '" << path << "' has "
                                                                                   << size << " bytes");
  const json header = parse_json(f, 8, static_cast<size_t>(n), "safetensors header");
  LW_CHECK(header.is_object(), "the safetensors header of '" << path << "' is not a JSON object");
  const uint64_t data_start = 8 + n;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "' in '" + path + "'";
    LW_CHECK(entry.is_object() && entry.contains("dtype") && entry["dtype"].is_string() && entry.contains("shape") &&
                 entry["shape"].is_array() && entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                 entry["data_offsets"].size() == 2,
             what << " lacks dtype, shape or data_offsets: " << entry.dump());
    TensorRecord rec;
    rec.name = name;
    rec.type_name = entry["dtype"].get<std::string>();
    rec.file = path;
    int64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      LW_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
               what << " has a bad shape " << entry["shape"].dump());
      const int64_t v = d.get<int64_t>();
      LW_CHECK(v == 0 || numel <= std::numeric_limits<int64_t>::max() / v, what << " has an impossible shape");
      rec.shape.push_back(v);
      numel *= v;
    }
    const auto& off = entry["data_offsets"];
    LW_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(), what << " has bad data_offsets " << off.dump());
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    LW_CHECK(b <= e, what << " has data_offsets " << off.dump() << " that end before they begin");
    const StDType* t = st_dtype(rec.type_name);
    rec.dtype = t != nullptr ? t->dtype : FileDType::unsupported;
    if (t != nullptr) {
      LW_CHECK(static_cast<uint64_t>(numel) <= std::numeric_limits<uint64_t>::max() / t->size &&
                   e - b == static_cast<uint64_t>(numel) * t->size,
               what << " of dtype " << rec.type_name << " and shape " << entry["shape"].dump() << " needs "
                    << static_cast<uint64_t>(numel) * t->size << " bytes but data_offsets " << off.dump() << " hold "
                    << e - b);
    }
    const bool fits = e <= size && data_start <= size - e;
    LW_CHECK(fits, "file truncated: tensor '" << name << "' needs bytes [" << data_start + b << ", " << data_start + e
                                              << ") but '" << path << "' has " << size << " bytes");
    rec.data = f.data() + data_start + b;
    rec.bytes = static_cast<size_t>(e - b);
    LW_CHECK(!index_.contains(name), "tensor '" << name << "' appears twice in " << description() << " (again in '"
                                                << path << "')");
    index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(rec));
  }
  files_.push_back(std::move(f));
}

const TensorRecord* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

std::string SafetensorsCheckpoint::description() const {
  if (sharded_) return "safetensors '" + path_ + "' (" + std::to_string(files_.size()) + " shards)";
  return "safetensors '" + path_ + "'";
}

}  // namespace lw::weights
