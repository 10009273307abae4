#include "weights/checkpoint.h"

#include <filesystem>

#include "base/error.h"
#include "weights/gguf.h"
#include "weights/safetensors.h"

namespace lw::weights {

const char* file_dtype_name(FileDType t) {
  switch (t) {
    case FileDType::f32: return "f32";
    case FileDType::f16: return "f16";
    case FileDType::bf16: return "bf16";
    case FileDType::q8_0: return "q8_0";
    case FileDType::q4_0: return "q4_0";
    case FileDType::q4_1: return "q4_1";
    case FileDType::q5_0: return "q5_0";
    case FileDType::q5_1: return "q5_1";
    case FileDType::q2_k: return "q2_k";
    case FileDType::q3_k: return "q3_k";
    case FileDType::q4_k: return "q4_k";
    case FileDType::q5_k: return "q5_k";
    case FileDType::q6_k: return "q6_k";
    case FileDType::i8: return "i8";
    case FileDType::i32: return "i32";
    case FileDType::i64: return "i64";
    case FileDType::f8_e4m3: return "f8_e4m3";
    case FileDType::unsupported: return "unsupported";
  }
  return "?";
}

int64_t file_dtype_block_elems(FileDType t) {
  switch (t) {
    case FileDType::q8_0:
    case FileDType::q4_0:
    case FileDType::q4_1:
    case FileDType::q5_0:
    case FileDType::q5_1: return 32;
    case FileDType::q2_k:
    case FileDType::q3_k:
    case FileDType::q4_k:
    case FileDType::q5_k:
    case FileDType::q6_k: return 256;
    case FileDType::unsupported: return 0;
    default: return 1;
  }
}

int64_t file_dtype_block_bytes(FileDType t) {
  switch (t) {
    case FileDType::f32: return 4;
    case FileDType::f16: return 2;
    case FileDType::bf16: return 2;
    case FileDType::q8_0: return 34;
    case FileDType::q4_0: return 18;
    case FileDType::q4_1: return 20;
    case FileDType::q5_0: return 22;
    case FileDType::q5_1: return 24;
    case FileDType::q2_k: return 84;
    case FileDType::q3_k: return 110;
    case FileDType::q4_k: return 144;
    case FileDType::q5_k: return 176;
    case FileDType::q6_k: return 210;
    case FileDType::i8: return 1;
    case FileDType::i32: return 4;
    case FileDType::i64: return 8;
    case FileDType::f8_e4m3: return 1;
    case FileDType::unsupported: return 0;
  }
  return 0;
}

size_t file_dtype_bytes(FileDType t, int64_t numel) {
  const int64_t blk = file_dtype_block_elems(t);
  LW_CHECK(blk > 0, "the size of " << file_dtype_name(t) << " tensors is not known");
  LW_CHECK(numel >= 0 && numel % blk == 0,
           numel << " elements are not a whole number of " << file_dtype_name(t) << " blocks of " << blk);
  return static_cast<size_t>(numel / blk) * static_cast<size_t>(file_dtype_block_bytes(t));
}

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorRecord& Checkpoint::get(std::string_view name) const {
  const TensorRecord* rec = find(name);
  LW_CHECK(rec != nullptr, "tensor '" << name << "' not found in " << description());
  return *rec;
}

std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  LW_CHECK(fs::exists(st), "checkpoint '" << path << "' does not exist");
  if (fs::is_directory(st)) return std::make_unique<SafetensorsCheckpoint>(SafetensorsCheckpoint::open(path));
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".gguf") return std::make_unique<GgufFile>(GgufFile::open(path));
  if (ext == ".safetensors") return std::make_unique<SafetensorsCheckpoint>(SafetensorsCheckpoint::open(path));
  LW_FAIL("cannot tell the format of checkpoint '"
          << path << "': expected a .gguf file, a .safetensors file, or a directory with model.safetensors or "
          << "model.safetensors.index.json");
}

}  // namespace lw::weights
