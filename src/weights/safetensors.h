// safetensors reader: one file, or a directory with model.safetensors or a sharded
// model.safetensors.index.json.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "weights/checkpoint.h"
#include "weights/mapped_file.h"

namespace lw::weights {

class SafetensorsCheckpoint : public Checkpoint {
 public:
  // `path` is a .safetensors file or a model directory. Throws lw::Error naming the file for a
  // malformed header, offsets outside the file, a missing shard, or a weight_map entry whose
  // shard lacks the tensor. Tensors of dtypes other than F32/F16/BF16/I8/I32/I64 are listed as
  // FileDType::unsupported; loading one throws.
  static SafetensorsCheckpoint open(const std::string& path);

  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  const TensorRecord* find(std::string_view name) const override;
  std::vector<std::string> names() const override;
  std::string description() const override;

 private:
  SafetensorsCheckpoint() = default;
  void add_file(const std::string& path);

  std::string path_;
  bool sharded_ = false;
  std::vector<MappedFile> files_;
  std::vector<TensorRecord> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace lw::weights
