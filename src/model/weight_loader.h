// Where a model's weights come from: a checkpoint (each tensor resolved, shape-checked and
// converted to the compute dtype) or random values of a seed. A dry run does no device work
// and only adds up the bytes the weights will take; the real run draws a progress bar.
#pragma once
#include <map>
#include <memory>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/config.h"
#include "ops/weight.h"
#include "weights/checkpoint.h"

namespace lw::model {

// How quantised projection matrices (GGML blocks, FP8 and INT8 with scales) reach the device:
// kept as stored (the linear kernels decode them; ops/weight.h), or expanded to the model dtype
// at load.
// LW_WEIGHT_STORAGE=auto|quantized|dense; auto keeps them quantised on GPUs and expands them on
// the host target, whose fast GEMM is OpenBLAS over dense matrices (the emulated GEMV is the
// oracle there, not a fast path). Embeddings and norms are always expanded.
enum class WeightStorage { automatic, quantized, dense };
WeightStorage weight_storage_from_env();

// The GGML types of a random model's projection matrices (benchmarks of named shapes): one type
// for all, or llama.cpp's Q4_K_M choice by tensor (q4_k_m): Q6_K for the LM head and for v_proj and
// down_proj of the layers llama.cpp gives more bits (the first and last eighth and every third
// between, its use_more_bits), Q4_K elsewhere -- the mix of a real Q4_K_M file.
struct RandomProjections {
  weights::FileDType type = weights::FileDType::f32;
  int q4_k_m_layers = 0;  // the mix over this many layers (0: `type` everywhere)
  RandomProjections(weights::FileDType t = weights::FileDType::f32) : type(t) {}  // NOLINT: one type for all
  static RandomProjections q4_k_m(int layers);
  // The type of the projection `name` (HF names: "model.layers.<i>.self_attn.v_proj.weight").
  weights::FileDType type_of(const std::string& name) const;
};

class WeightLoader {
 public:
  // ckpt null: random weights from `seed` (benchmarks of named shapes). total: the bytes the
  // dry run counted; with it (and a terminal on stderr) the real run draws a progress bar.
  // random_blocks: for random weights, the GGML types of the projection matrices, or f8_e4m3
  // (128 x 128 block scales) or i8 (per-row scales) (weights/random_blocks.h), or i32 for 4-bit
  // GPTQ words of group 128 (random values, zero points and scales); f32 makes them dense in
  // `dtype` like every other tensor.
  WeightLoader(Context& ctx, const weights::Checkpoint* ckpt, DType dtype, bool dry, size_t total = 0,
               uint64_t seed = 0, RandomProjections random_blocks = {});
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  // The checkpoint's quantization_config: how block-wise scales of 8-bit projections are laid
  // out. Random FP8 weights keep their own (128 x 128 blocks).
  void set_quantization(const WeightQuantization& q) {
    if (ckpt_) quantization_ = q;
  }

  // Random weights have every tensor the model asks for, under the names it asks.
  bool random() const { return ckpt_ == nullptr; }
  // Random weights whose projections are quantised (random_blocks other than f32).
  bool random_quantized() const { return random() && random_blocks_.type != weights::FileDType::f32; }
  // A dry run: no device work, undefined tensors and weights, only the byte count.
  bool dry() const { return dry_; }
  // The context the weights are loaded on.
  Context& context() { return ctx_; }
  // Whether the checkpoint holds `name` (always, for random weights).
  bool has(const std::string& name) const;
  // A checkpoint's per-head scales `name` (one value for every head, or one per head of
  // `heads`), heads [first, first + count) as f32 on the device; undefined where the
  // checkpoint has no such tensor (and for random weights). Non-finite or non-positive scales
  // and other shapes are refused by name.
  Tensor head_scales(const std::string& name, int64_t heads, int64_t first, int64_t count);

  // The name under which get and get_weight read expert `expert` of the stacked [experts, N, K]
  // tensor `stacked` (a GGUF file's "ffn_*_exps") as an [N, K] tensor of its own:
  // "<stacked>[<expert>]".
  static std::string expert_name(const std::string& stacked, int64_t expert);

  // Rows/columns [start, end) of dimension `dim` (a rank's shard); dim < 0: the whole tensor.
  struct Part {
    int dim = -1;
    int64_t start = 0, end = 0;
  };
  // The tensor `name` of the whole model's `shape`, in the model dtype (a 4-bit or 8-bit matrix
  // expanded with its scales; one log line).
  Tensor get(const std::string& name, const std::vector<int64_t>& shape);
  // Only `part` of it: the whole tensor is read, sliced and freed.
  Tensor get(const std::string& name, const std::vector<int64_t>& shape, Part part);
  // Rows [start, end) of a [rows, cols] tensor, zero-padded to `padded` rows (a rank's share
  // of the vocabulary).
  Tensor get_padded(const std::string& name, const std::vector<int64_t>& shape, int64_t start, int64_t end, int64_t padded);
  // Parts concatenated along dimension `dim`, viewed as `shape`.
  Tensor fuse(const std::vector<Tensor>& parts, const std::vector<int64_t>& shape, int dim = 0);

  // A projection matrix [N, K] (`shape`) as a Weight: GGML blocks stay blocks when the storage
  // keeps them (a shard's columns only on block boundaries); F8_E4M3 and I8 matrices with their
  // scale tensor ("<name>_scale_inv" or "<name>_scale": one, one per row, or one per block)
  // stay 8-bit where the storage keeps them (a shard only on scale-block boundaries, else
  // expanded); everything else is dense.
  ops::Weight get_weight(const std::string& name, const std::vector<int64_t>& shape, Part part);
  ops::Weight get_weight(const std::string& name, const std::vector<int64_t>& shape) { return get_weight(name, shape, Part()); }
  // Weights stacked by rows into one [sum N, K]: blocks of one format stay blocks; FP8 parts
  // with per-tensor or per-row scales become one per-row FP8 weight, int8 parts one int8
  // weight, FP8 parts of one scale block (all but the last whole blocks of rows) one block
  // weight; parts of mixed formats are expanded to dense (one log line each time).
  ops::Weight fuse_weights(const std::vector<ops::Weight>& parts);
  // Rows [start, end) of a [rows, cols] projection as a Weight, zero-padded to `padded` rows (a
  // rank's share of the vocabulary; zero blocks decode to zero in every GGML format).
  ops::Weight get_padded_weight(const std::string& name, const std::vector<int64_t>& shape, int64_t start, int64_t end,
                                int64_t padded);
  // The bytes of the weights on the device so far.
  size_t bytes() const { return bytes_; }

 private:
  Tensor random_tensor(const std::string& name, const std::vector<int64_t>& shape);
  // The checkpoint's record of `name`, or of one expert of a stacked tensor (expert_name):
  // null where absent; record() throws naming it.
  const weights::TensorRecord* find_record(const std::string& name) const;
  const weights::TensorRecord& record(const std::string& name) const;
  void draw();
  // Whether `rec` is a block format the loader keeps as blocks (storage and format).
  bool keeps_blocks(const weights::TensorRecord& rec) const;
  // Rows/columns `part` of the [N, K] matrix `rec` of GGML blocks as a Weight (dense when a
  // shard's columns split blocks: `dense` loads it so).
  ops::Weight block_weight(const weights::TensorRecord& rec, Part part, const std::function<ops::Weight()>& dense);
  ops::Weight get_weight_as_stored(const std::string& name, const std::vector<int64_t>& shape, Part part);
  // Rows/columns `part` of the 8-bit matrix `rec` (F8_E4M3 or I8) with its scales (null: none,
  // an error) as a Weight; `block`: the size of block scales.
  ops::Weight scaled_weight(const weights::TensorRecord& rec, const weights::TensorRecord* scale, ops::WeightBlock block,
                            Part part);
  // Whether the checkpoint holds projection `name` ("<prefix>.weight") as 4-bit tensors
  // ("<prefix>.qweight": GPTQ, AWQ; "<prefix>.weight_packed": compressed-tensors).
  bool has_int4(const std::string& name) const;
  // Rows/columns `part` of that projection [N, K] (`shape`): int4 where the storage keeps
  // quantised weights and the part stays whole groups, else expanded to the model dtype.
  ops::Weight int4_weight(const std::string& name, const std::vector<int64_t>& shape, Part part);
  // The same for 8-bit GPTQ (quantization_.gptq_bits 8): int8_per_group (zero points where
  // they are not all 128, act-order columns sorted by group) where the storage keeps quantised
  // weights and the part keeps whole groups (a column part of an act-order weight does not);
  // else expanded to the model dtype.
  ops::Weight gptq8_weight(const std::string& name, const std::vector<int64_t>& shape, Part part);
  // Random 4-bit GPTQ weights of group 128 (random_blocks i32), packed as a checkpoint's are.
  ops::Weight random_int4(const std::string& name, const std::vector<int64_t>& shape, Part part);
  // Scaled 8-bit parts stacked by rows, or an undefined Weight where their formats do not stack.
  ops::Weight fuse_scaled(const std::vector<ops::Weight>& parts);

  Context& ctx_;
  const weights::Checkpoint* ckpt_;
  mutable std::map<std::string, weights::TensorRecord> expert_records_;  // by expert_name
  DType dtype_;
  bool dry_;
  size_t total_;
  bool bar_;
  uint64_t seed_;
  RandomProjections random_blocks_;
  bool keep_quantized_;
  bool drawn_ = false;
  size_t bytes_ = 0;
  using ColumnOrder = std::shared_ptr<const std::vector<int32_t>>;
  // What the dry run's get_weight calls would have returned, newest last: fuse_weights adds what
  // expanding parts of mixed formats will take (its parts are undefined in a dry run), and
  // takes off a column permutation the stacked parts share.
  struct DryWeight {
    ops::WeightFormat format;
    int64_t elements, rows;
    size_t bytes;
    ColumnOrder order;  // int4, int8_per_group: the permutation kept (null: none)
    bool zeros = false;     // int8_per_group: zero points kept
    size_t zero_bytes = 0;  // int8_per_group without zero points: what stacking with some adds
  };
  std::vector<DryWeight> dry_weights_;
  // Of the last get_weight: its format and, as DryWeight, its permutation (dry run only) and
  // zero points.
  ops::WeightFormat kept_format_ = ops::WeightFormat::dense;
  ColumnOrder kept_order_;
  bool kept_zeros_ = false;
  size_t kept_zero_bytes_ = 0;
  WeightQuantization quantization_;
  bool logged_w8a16_ = false;
  bool logged_expanded_8bit_ = false;
  bool logged_expanded_int4_ = false;
  bool logged_expanded_gptq8_ = false;
};

}  // namespace lw::model
