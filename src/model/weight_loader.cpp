#include "model/weight_loader.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "gpu/runtime.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "weights/load.h"

namespace lw::model {

namespace {

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

WeightLoader::WeightLoader(Context& ctx, const weights::Checkpoint* ckpt, DType dtype, bool dry, size_t total, uint64_t seed)
    : ctx_(ctx), ckpt_(ckpt), dtype_(dtype), dry_(dry), total_(total), bar_(total > 0 && isatty(STDERR_FILENO)), seed_(seed) {}

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
  const bool integer =
      rec.dtype == weights::FileDType::i8 || rec.dtype == weights::FileDType::i32 || rec.dtype == weights::FileDType::i64;
  LW_CHECK(!integer && rec.dtype != weights::FileDType::unsupported,
           "tensor '" << name << "' in " << ckpt_->description() << " has type " << rec.type_name
                      << "; weights must be F32, F16, BF16, Q8_0, Q4_0 or Q4_1");
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
