// The format-independent view of a checkpoint: named tensors whose bytes lie in mapped files,
// and open_checkpoint, which picks the reader from the path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lw::weights {

// How a tensor is stored in its file. `unsupported` covers types this layer lists but cannot
// load (GGML K-quants and the like, safetensors F64/U8/BOOL/F8...); TensorRecord::type_name
// says which.
// The q types are GGML's block formats (GGUF files).
enum class FileDType : uint8_t {
  f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, i8, i32, i64,
  f8_e4m3,  // FP8 E4M3 (e4m3fn) bytes: scaled weights (kernels/quant/fp8.h)
  unsupported
};

const char* file_dtype_name(FileDType t);
// Elements per block and bytes per block (1 and the element size for plain types); 0, 0 for
// `unsupported`.
int64_t file_dtype_block_elems(FileDType t);
int64_t file_dtype_block_bytes(FileDType t);
// Bytes that `numel` elements take; throws lw::Error when numel is not a whole number of blocks.
size_t file_dtype_bytes(FileDType t, int64_t numel);

struct TensorRecord {
  std::string name;
  FileDType dtype = FileDType::f32;
  std::vector<int64_t> shape;  // row-major, outermost first (Hugging Face order)
  const std::byte* data = nullptr;  // in the file's mapping; valid while the checkpoint lives
  size_t bytes = 0;
  std::string file;       // the file holding the bytes
  std::string type_name;  // the type as the file spells it: "Q4_K", "BF16", ...

  int64_t numel() const;
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;
  virtual const TensorRecord* find(std::string_view name) const = 0;
  // Throws lw::Error naming the tensor and description() when it is absent.
  virtual const TensorRecord& get(std::string_view name) const;
  // GGUF: file order; safetensors: by shard, then by name.
  virtual std::vector<std::string> names() const = 0;
  // "GGUF v3 '<path>'", "safetensors '<dir>' (2 shards)", for messages.
  virtual std::string description() const = 0;
};

// A .gguf file, a .safetensors file, or a directory holding model.safetensors or
// model.safetensors.index.json. Anything else throws lw::Error saying what was expected.
std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path);

}  // namespace lw::weights
