#include "model/weight_loader.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "gpu/runtime.h"
#include "core/logging.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "weights/load.h"
#include "weights/random_blocks.h"

namespace lw::model {

namespace {

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

ops::Weight projection(const Tensor& t) { return t.defined() ? ops::Weight::dense(t) : ops::Weight(); }

}  // namespace

WeightStorage weight_storage_from_env() {
  const char* env = std::getenv("LW_WEIGHT_STORAGE");
  if (env == nullptr || *env == '\0' || std::string(env) == "auto") return WeightStorage::automatic;
  if (std::string(env) == "quantized") return WeightStorage::quantized;
  if (std::string(env) == "dense") return WeightStorage::dense;
  LW_FAIL("LW_WEIGHT_STORAGE='" << env << "' is not one of auto, quantized, dense");
}

WeightLoader::WeightLoader(Context& ctx, const weights::Checkpoint* ckpt, DType dtype, bool dry, size_t total, uint64_t seed,
                           weights::FileDType random_blocks)
    : ctx_(ctx), ckpt_(ckpt), dtype_(dtype), dry_(dry), total_(total), bar_(total > 0 && isatty(STDERR_FILENO)), seed_(seed),
      random_blocks_(random_blocks) {
  LW_CHECK(random_blocks == weights::FileDType::f32 || weights::has_random_blocks(random_blocks),
           "random weights in " << weights::file_dtype_name(random_blocks) << " blocks: not a quantised GGML type");
  const WeightStorage storage = weight_storage_from_env();
  keep_quantized_ = storage == WeightStorage::quantized || (storage == WeightStorage::automatic && !ctx.caps().emulator());
}

WeightLoader::~WeightLoader() {
  if (bar_ && drawn_) std::fprintf(stderr, "\n");
}

bool WeightLoader::has(const std::string& name) const { return !ckpt_ || ckpt_->find(name) != nullptr; }

Tensor WeightLoader::get(const std::string& name, const std::vector<int64_t>& shape, Part part) {
  if (part.dim < 0) return get(name, shape);
  const size_t before = bytes_;
  Tensor whole = get(name, shape);
  bytes_ = before + static_cast<size_t>(elements(shape) / shape[static_cast<size_t>(part.dim)] * (part.end - part.start)) *
                        dtype_size(dtype_);
  if (dry_) return Tensor();
  return ops::contiguous(ctx_, whole.slice(part.dim, part.start, part.end));
}

Tensor WeightLoader::get_padded(const std::string& name, const std::vector<int64_t>& shape, int64_t start, int64_t end,
                                int64_t padded) {
  const size_t before = bytes_;
  Tensor part = get(name, shape, {0, start, end});
  bytes_ = before + static_cast<size_t>(padded * shape[1]) * dtype_size(dtype_);
  if (dry_ || end - start == padded) return part;
  Tensor t = ctx_.empty({padded, shape[1]}, dtype_);
  LW_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), ctx_.stream().get()));
  if (end > start) ops::copy(ctx_, part, t.slice(0, 0, end - start));
  return t;
}

Tensor WeightLoader::get(const std::string& name, const std::vector<int64_t>& shape) {
  if (!ckpt_) return random_tensor(name, shape);
  const weights::TensorRecord& rec = ckpt_->get(name);
  LW_CHECK(rec.shape == shape, "tensor '" << name << "' in " << ckpt_->description() << " has shape " << shape_str(rec.shape)
                                          << "; the model config needs " << shape_str(shape));
  LW_CHECK(weights::block_format(rec.dtype).has_value(),
           "tensor '" << name << "' in " << ckpt_->description() << " has type " << rec.type_name
                      << "; weights must be F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K");
  bytes_ += static_cast<size_t>(elements(shape)) * dtype_size(dtype_);
  if (dry_) return Tensor();
  Tensor t = weights::load_tensor(ctx_, rec, dtype_);
  draw();
  return t;
}

Tensor WeightLoader::fuse(const std::vector<Tensor>& parts, const std::vector<int64_t>& shape, int dim) {
  if (dry_) return Tensor();
  return ops::concat(ctx_, parts, dim).view(shape);
}

bool WeightLoader::keeps_blocks(const weights::TensorRecord& rec) const {
  const std::optional<kernels::BlockFormat> f = weights::block_format(rec.dtype);
  return keep_quantized_ && f && kernels::is_quantized(*f) && rec.shape.size() == 2;
}

ops::Weight WeightLoader::get_weight(const std::string& name, const std::vector<int64_t>& shape, Part part) {
  kept_format_ = ops::WeightFormat::dense;
  const size_t before = bytes_;
  ops::Weight w = get_weight_as_stored(name, shape, part);
  if (dry_) {
    int64_t elements = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      elements *= static_cast<int>(d) == part.dim ? part.end - part.start : shape[d];
    dry_weights_.push_back({kept_format_, elements, bytes_ - before});
  }
  return w;
}

ops::Weight WeightLoader::get_weight_as_stored(const std::string& name, const std::vector<int64_t>& shape, Part part) {
  if (shape.size() != 2) return projection(get(name, shape, part));
  if (!ckpt_) {
    if (random_blocks_ == weights::FileDType::f32) return projection(get(name, shape, part));
    const int64_t elems = weights::file_dtype_block_elems(random_blocks_);
    LW_CHECK(shape[1] % elems == 0, "random " << weights::file_dtype_name(random_blocks_) << " weights: tensor '" << name
                                              << "' " << shape_str(shape) << " has " << shape[1]
                                              << " columns, not whole blocks of " << elems);
    // The whole matrix from a seed of its name (a shard slices what the whole model holds),
    // generated only when the real run needs the bytes.
    std::vector<std::byte> bytes;
    weights::TensorRecord rec;
    rec.name = name;
    rec.dtype = random_blocks_;
    rec.shape = shape;
    rec.bytes = weights::file_dtype_bytes(random_blocks_, shape[0] * shape[1]);
    rec.file = "random";
    rec.type_name = weights::file_dtype_name(random_blocks_);
    if (!dry_) {
      // Weights within +-1/sqrt(fan-in), as random_tensor draws dense ones (random_blocks: ~0.3).
      const float scale = 1.0f / (0.3f * std::sqrt(static_cast<float>(shape[1])));
      bytes = weights::random_blocks(random_blocks_, shape[0], shape[1], seed_ ^ std::hash<std::string>{}(name), scale);
      rec.data = bytes.data();
    }
    return block_weight(rec, part, [&] {
      const ops::Weight whole = block_weight(rec, Part{}, {});
      Tensor t = ops::expand(ctx_, whole, dtype_);
      return projection(part.dim < 0 ? t : ops::contiguous(ctx_, t.slice(part.dim, part.start, part.end)));
    });
  }
  const weights::TensorRecord& rec = ckpt_->get(name);
  if (rec.shape != shape || !keeps_blocks(rec)) return projection(get(name, shape, part));  // get() names a wrong shape
  return block_weight(rec, part, [&] { return projection(get(name, shape, part)); });
}

ops::Weight WeightLoader::block_weight(const weights::TensorRecord& rec, Part part, const std::function<ops::Weight()>& dense) {
  const kernels::BlockFormat block = *weights::block_format(rec.dtype);
  const ops::WeightFormat format = *ops::gguf_weight_format(block);
  const int64_t elems = kernels::block_format_elems(block), block_bytes = kernels::block_format_bytes(block);
  int64_t r0 = 0, r1 = rec.shape[0], c0 = 0, c1 = rec.shape[1];
  if (part.dim == 0) r0 = part.start, r1 = part.end;
  if (part.dim == 1) c0 = part.start, c1 = part.end;
  if (c0 % elems != 0 || c1 % elems != 0 || (!keep_quantized_ && dense)) {
    if (keep_quantized_)
      log().info("tensor '{}': a shard's columns [{}, {}) are not whole {} blocks of {}: expanded to {}", rec.name, c0, c1,
                 rec.type_name, elems, dtype_name(dtype_));
    if (dry_) {  // the dense bytes, without loading
      bytes_ += static_cast<size_t>((r1 - r0) * (c1 - c0)) * dtype_size(dtype_);
      return ops::Weight();
    }
    const size_t before = bytes_;
    ops::Weight w = dense();
    bytes_ = before + static_cast<size_t>((r1 - r0) * (c1 - c0)) * dtype_size(dtype_);
    return w;
  }
  bytes_ += static_cast<size_t>((r1 - r0) * ((c1 - c0) / elems) * block_bytes);
  kept_format_ = format;
  if (dry_) return ops::Weight();
  const Tensor raw = weights::load_raw(ctx_, rec, r0, r1, c0 / elems * block_bytes, c1 / elems * block_bytes);
  draw();
  return ops::Weight::gguf(format, r1 - r0, c1 - c0, raw);
}

ops::Weight WeightLoader::get_padded_weight(const std::string& name, const std::vector<int64_t>& shape, int64_t start,
                                            int64_t end, int64_t padded) {
  const size_t before = bytes_;
  ops::Weight part = get_weight(name, shape, {0, start, end});
  if (end - start == padded) return part;
  const ops::WeightFormat format = kept_format_;
  const bool blocks = ops::is_gguf_block_format(format);
  const int64_t row_bytes = blocks ? shape[1] / ops::gguf_block_elems(format) * ops::gguf_block_bytes(format)
                                   : shape[1] * static_cast<int64_t>(dtype_size(dtype_));
  bytes_ = before + static_cast<size_t>(padded * row_bytes);
  if (dry_) return ops::Weight();
  Tensor t = ctx_.empty({padded, blocks ? row_bytes : shape[1]}, blocks ? DType::i8 : dtype_);
  cudaStream_t stream = ctx_.stream().get();
  LW_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream));  // zero blocks decode to zeros
  if (end > start)
    LW_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), part.data().data_ptr(), part.data().nbytes(), cudaMemcpyDeviceToDevice, stream));
  return blocks ? ops::Weight::gguf(format, padded, shape[1], t) : ops::Weight::dense(t);
}

ops::Weight WeightLoader::fuse_weights(const std::vector<ops::Weight>& parts) {
  if (parts.empty()) return ops::Weight();
  if (dry_) {
    // The parts are the last parts.size() weights get_weight returned: parts of mixed formats
    // will be expanded, which their byte count left out.
    LW_CHECK(dry_weights_.size() >= parts.size(),
             "fuse_weights: " << parts.size() << " parts but " << dry_weights_.size() << " weights read");
    const auto first = dry_weights_.end() - static_cast<std::ptrdiff_t>(parts.size());
    DryWeight fused{first->format, 0, 0};
    for (auto it = first; it != dry_weights_.end(); ++it) {
      if (it->format != fused.format) fused.format = ops::WeightFormat::dense;
      fused.elements += it->elements;
      fused.bytes += it->bytes;
    }
    if (fused.format == ops::WeightFormat::dense) {
      const size_t dense = static_cast<size_t>(fused.elements) * dtype_size(dtype_);
      bytes_ += dense - fused.bytes;
      fused.bytes = dense;
    }
    dry_weights_.erase(first, dry_weights_.end());
    dry_weights_.push_back(fused);
    return ops::Weight();
  }
  if (parts.size() == 1) return parts[0];
  const ops::WeightFormat format = parts[0].format();
  const int64_t k = parts[0].in_features();
  bool same = true;
  int64_t n = 0;
  std::vector<Tensor> data;
  for (const ops::Weight& p : parts) {
    LW_CHECK(p.in_features() == k, "fuse_weights: parts of " << k << " and " << p.in_features() << " input features");
    same = same && p.format() == format;
    n += p.out_features();
    data.push_back(p.data());
  }
  if (same && format == ops::WeightFormat::dense) return ops::Weight::dense(ops::concat(ctx_, data, 0));
  if (same && ops::is_gguf_block_format(format)) {  // whole rows of blocks: the bytes one after another
    Tensor blocks = ctx_.empty({n, data[0].numel() / parts[0].out_features()}, DType::i8);
    size_t at = 0;
    for (const Tensor& d : data) {
      LW_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(blocks.data_ptr()) + at, d.data_ptr(), d.nbytes(),
                                    cudaMemcpyDeviceToDevice, ctx_.stream().get()));
      at += d.nbytes();
    }
    return ops::Weight::gguf(format, n, k, blocks);
  }
  // One matrix needs one format: expand them all.
  std::string formats;
  std::vector<Tensor> dense;
  for (const ops::Weight& p : parts) {
    formats += std::string(formats.empty() ? "" : ", ") + p.name();
    dense.push_back(ops::expand(ctx_, p, dtype_));
    bytes_ += dense.back().nbytes() - p.device_bytes();
  }
  log().info("a fused projection [{}, {}] of parts in formats {} is expanded to {}", n, k, formats, dtype_name(dtype_));
  return ops::Weight::dense(ops::concat(ctx_, dense, 0));
}

// Norm weights near 1, matrices within +-1/sqrt(fan-in): activations keep their scale through
// the layers, as in a trained model. The seed mixes in the name, so a shard slices the same
// values the whole model holds.
Tensor WeightLoader::random_tensor(const std::string& name, const std::vector<int64_t>& shape) {
  bytes_ += static_cast<size_t>(elements(shape)) * dtype_size(dtype_);
  if (dry_) return Tensor();
  Tensor t = ctx_.empty(shape, dtype_);
  const bool norm = name.find("norm") != std::string::npos;
  const float bound = norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(shape.back()));
  ops::fill_uniform(ctx_, t, norm ? 1.0f - bound : -bound, norm ? 1.0f + bound : bound, seed_ ^ std::hash<std::string>{}(name));
  draw();
  return t;
}

void WeightLoader::draw() {
  if (!bar_) return;
  const int width = 40, filled = static_cast<int>(width * static_cast<double>(bytes_) / static_cast<double>(total_));
  std::fprintf(stderr, "\rloading weights [%s%s] %5.1f / %.1f GiB", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), static_cast<double>(bytes_) / (1 << 30),
               static_cast<double>(total_) / (1 << 30));
  drawn_ = true;
}

}  // namespace lw::model
