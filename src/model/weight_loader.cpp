#include "model/weight_loader.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

#include "gpu/runtime.h"
#include "core/logging.h"
#include "ops/check.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/int4_weight.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/gptq8.h"
#include "kernels/quant/int4.h"
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

// The format of parts (format, rows) stacked by rows (WeightLoader::fuse_weights): GGUF blocks
// of several formats each keep theirs (gguf_mixed); otherwise dense where they do not stack in
// their own format.
ops::WeightFormat stacked_format(const std::vector<std::pair<ops::WeightFormat, int64_t>>& parts, int64_t block_rows) {
  const ops::WeightFormat first = parts.front().first;
  bool same = true, fp8_rows = true, whole_blocks = true, gguf = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto [f, rows] = parts[i];
    same = same && f == first;
    gguf = gguf && ops::is_gguf_block_format(f);
    fp8_rows = fp8_rows && (f == ops::WeightFormat::fp8_e4m3_per_tensor || f == ops::WeightFormat::fp8_e4m3_per_channel);
    // fp8 block scales stack in whole blocks of rows, int4 tiles in whole tiles
    const int64_t unit = f == ops::WeightFormat::int4 ? kernels::kInt4TileRows : block_rows;
    whole_blocks = whole_blocks && (i + 1 == parts.size() || (unit > 0 && rows % unit == 0));
  }
  if (parts.size() == 1) return first;
  if (fp8_rows) return ops::WeightFormat::fp8_e4m3_per_channel;
  const bool by_rows = first == ops::WeightFormat::fp8_e4m3_per_block || first == ops::WeightFormat::int4;
  if (same && (!by_rows || whole_blocks)) return first;
  if (gguf) return ops::WeightFormat::gguf_mixed;
  return ops::WeightFormat::dense;
}

// The bytes of `parts` one after another, as an i8 [rows, width] (rows x width: their total).
Tensor stack_bytes(Context& ctx, const std::vector<Tensor>& parts, int64_t rows, int64_t width) {
  std::vector<Tensor> flat;
  for (const Tensor& p : parts) flat.push_back(p.view({p.numel()}));
  return ops::stack_rows(ctx, flat).view({rows, width});
}

// Sets a flag for a scope, restoring its value after.
struct ScopedFlag {
  ScopedFlag(bool& flag, bool value) : flag_(flag), was_(flag) { flag_ = value; }
  ~ScopedFlag() { flag_ = was_; }
  ScopedFlag(const ScopedFlag&) = delete;
  ScopedFlag& operator=(const ScopedFlag&) = delete;

 private:
  bool& flag_;
  bool was_;
};

// f32 [n] holding `value` n times, on the device.
Tensor filled(Context& ctx, int64_t n, float value) {
  Tensor h = Tensor::empty_host({n}, DType::f32);
  std::fill_n(h.data<float>(), n, value);
  return ctx.to_device(h);
}

}  // namespace

WeightStorage weight_storage_from_env() {
  const char* env = std::getenv("LW_WEIGHT_STORAGE");
  if (env == nullptr || *env == '\0' || std::string(env) == "auto") return WeightStorage::automatic;
  if (std::string(env) == "quantized") return WeightStorage::quantized;
  if (std::string(env) == "dense") return WeightStorage::dense;
  LW_FAIL("LW_WEIGHT_STORAGE='" << env << "' is not one of auto, quantized, dense");
}

RandomProjections RandomProjections::q4_k_m(int layers) {
  LW_CHECK(layers >= 1, "random q4_k_m weights over " << layers << " layers");
  RandomProjections p(weights::FileDType::q4_k);
  p.q4_k_m_layers = layers;
  return p;
}

weights::FileDType RandomProjections::type_of(const std::string& name) const {
  if (q4_k_m_layers == 0) return type;
  if (name == "lm_head.weight") return weights::FileDType::q6_k;
  const std::string layers = "model.layers.";
  const bool more_bits_kind = name.find("self_attn.v_proj.") != std::string::npos ||
                              name.find("down_proj.") != std::string::npos;  // MoE experts' too
  if (!more_bits_kind || name.compare(0, layers.size(), layers) != 0) return weights::FileDType::q4_k;
  const int i = std::stoi(name.substr(layers.size())), n = q4_k_m_layers;
  const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
  return more_bits ? weights::FileDType::q6_k : weights::FileDType::q4_k;
}

WeightLoader::WeightLoader(Context& ctx, const weights::Checkpoint* ckpt, DType dtype, bool dry, size_t total,
                           uint64_t seed, RandomProjections random_projections)
    : ctx_(ctx),
      ckpt_(ckpt),
      dtype_(dtype),
      dry_(dry),
      total_(total),
      bar_(total > 0 && isatty(STDERR_FILENO)),
      seed_(seed),
      random_blocks_(random_projections) {
  const weights::FileDType random_blocks = random_projections.type;
  LW_CHECK(random_blocks == weights::FileDType::f32 || random_blocks == weights::FileDType::i32 ||
               weights::has_random_blocks(random_blocks) ||
               weights::has_random_scaled(random_blocks),
           "random weights of " << weights::file_dtype_name(random_blocks)
                                << ": not a quantised GGML type, f8_e4m3, i8 or i32 (4-bit GPTQ)");
  if (!ckpt && random_blocks == weights::FileDType::f8_e4m3) quantization_ = {"fp8", 128, 128};
  const WeightStorage storage = weight_storage_from_env();
  keep_quantized_ = storage == WeightStorage::quantized || (storage == WeightStorage::automatic && !ctx.caps().emulator());
}

WeightLoader::~WeightLoader() {
  if (bar_ && drawn_) std::fprintf(stderr, "\n");
}

bool WeightLoader::has(const std::string& name) const { return !ckpt_ || find_record(name) != nullptr || has_int4(name); }

std::string WeightLoader::expert_name(const std::string& stacked, int64_t expert) {
  return stacked + "[" + std::to_string(expert) + "]";
}

const weights::TensorRecord* WeightLoader::find_record(const std::string& name) const {
  if (!ckpt_) return nullptr;
  if (const weights::TensorRecord* r = ckpt_->find(name)) return r;
  const size_t open = name.rfind('[');
  if (name.empty() || name.back() != ']' || open == std::string::npos) return nullptr;
  if (auto it = expert_records_.find(name); it != expert_records_.end()) return &it->second;
  const weights::TensorRecord* stacked = ckpt_->find(name.substr(0, open));
  if (!stacked) return nullptr;
  const std::string digits = name.substr(open + 1, name.size() - open - 2);
  LW_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 10,
           "tensor '" << name << "': not an expert index");
  const int64_t expert = std::stoll(digits), experts = stacked->shape.empty() ? 0 : stacked->shape[0];
  LW_CHECK(stacked->shape.size() == 3 && expert < experts && stacked->bytes % static_cast<size_t>(experts) == 0,
           "tensor '" << stacked->name << "' in " << ckpt_->description() << " of shape " << shape_str(stacked->shape)
                      << " has no expert " << expert << " (a stack of [experts, N, K])");
  weights::TensorRecord r = *stacked;
  r.name = name;
  r.shape = {stacked->shape[1], stacked->shape[2]};
  r.bytes = stacked->bytes / static_cast<size_t>(experts);
  r.data = stacked->data + static_cast<size_t>(expert) * r.bytes;
  return &expert_records_.emplace(name, std::move(r)).first->second;
}

const weights::TensorRecord& WeightLoader::record(const std::string& name) const {
  const weights::TensorRecord* r = find_record(name);
  return r ? *r : ckpt_->get(name);  // get() names what is missing
}

namespace {

// "<prefix>.weight" -> "<prefix>", or "" for other names.
std::string weight_prefix(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return "";
  return name.substr(0, name.size() - suffix.size());
}

}  // namespace

bool WeightLoader::has_int4(const std::string& name) const {
  const std::string prefix = weight_prefix(name);
  return ckpt_ && !prefix.empty() && !ckpt_->find(name) &&
         (ckpt_->find(prefix + ".qweight") || ckpt_->find(prefix + ".weight_packed"));
}

ops::Weight WeightLoader::random_int4(const std::string& name, const std::vector<int64_t>& shape, Part part) {
  const int64_t n = shape[0], k = shape[1], kGroup = std::min<int64_t>(128, k);
  // Sizes 4-bit checkpoints cannot hold (an odd vocabulary's LM head) stay dense, as they do there.
  if (n % 8 != 0 || k % 8 != 0) return projection(get(name, shape, part));
  int64_t r0 = 0, r1 = n, c0 = 0, c1 = k;
  if (part.dim == 0) r0 = part.start, r1 = part.end;
  if (part.dim == 1) c0 = part.start, c1 = part.end;
  const int64_t pn = r1 - r0, pk = c1 - c0, groups = (k + kGroup - 1) / kGroup;
  const bool keep = keep_quantized_ && (part.dim != 1 || (c0 % kGroup == 0 && (c1 % kGroup == 0 || c1 == k)));
  if (keep) {
    bytes_ += static_cast<size_t>(kernels::int4_tile_count(pn, pk) * kernels::kInt4TileBytes +
                                  5 * pn * ((pk + kGroup - 1) / kGroup));
    kept_format_ = ops::WeightFormat::int4;
  } else {
    bytes_ += static_cast<size_t>(pn * pk) * dtype_size(dtype_);
  }
  if (dry_) return ops::Weight();
  // The whole matrix from a seed of its name (a shard takes its part of what the model holds);
  // weights (q - z) * s within about +-1/sqrt(fan-in), as dense random weights are.
  std::mt19937_64 rng(seed_ ^ std::hash<std::string>{}(name));
  auto words = [&](int64_t rows, int64_t cols) {
    Tensor h = Tensor::empty_host({rows, cols}, DType::i32);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<int32_t>()[i] = static_cast<int32_t>(rng());
    return ctx_.to_device(h);
  };
  ops::Int4Tensors t;
  t.n = n, t.k = k, t.group = kGroup;
  t.qweight = words(k / 8, n);
  t.qzeros = words(groups, n / 8);
  Tensor s = Tensor::empty_host({groups, n}, DType::f32);
  std::uniform_real_distribution<float> size(0.5f, 1.5f);
  for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] = size(rng) / (8.0f * std::sqrt(static_cast<float>(k)));
  t.scales = ctx_.to_device(s);
  ops::Weight w = keep ? ops::int4_weight(ctx_, t, {part.dim, part.start, part.end}) : ops::Weight();
  if (!w.defined()) {  // expanded: the storage's choice, or a shard's columns cut a group
    const Tensor dense = ops::expand(ctx_, ops::int4_weight(ctx_, t), dtype_);
    w = projection(ops::contiguous(ctx_, dense.slice(0, r0, r1).slice(1, c0, c1)));
  }
  draw();
  return w;
}

ops::Weight WeightLoader::int4_weight(const std::string& name, const std::vector<int64_t>& shape, Part part) {
  const std::string prefix = weight_prefix(name);
  const bool packed = ckpt_->find(prefix + ".weight_packed") != nullptr;
  const std::string where = "tensor '" + prefix + "' in " + ckpt_->description();
  const WeightQuantization& q = quantization_;
  LW_CHECK(shape.size() == 2, where << " holds 4-bit values, but the model reads it as " << shape_str(shape)
                                    << " (4-bit tensors load as matrices)");
  LW_CHECK(q.group_size != 0 && (packed ? q.method == "compressed-tensors" : q.method == "gptq" || q.method == "awq"),
           where << " holds " << (packed ? "4-bit pack-quantized" : "GPTQ/AWQ")
                 << " values, but the config's quantization_config ('" << q.method << "') does not describe them");
  if (!packed && q.method == "gptq" && q.gptq_bits == 8) return gptq8_weight(name, shape, part);
  // A group wider than K (a small layer of a checkpoint quantised with groups of 128) is one group.
  const int64_t n = shape[0], k = shape[1], group = q.group_size < 0 ? k : std::min(q.group_size, k);
  int64_t r0 = 0, r1 = n, c0 = 0, c1 = k;
  if (part.dim == 0) r0 = part.start, r1 = part.end;
  if (part.dim == 1) c0 = part.start, c1 = part.end;
  const int64_t pn = r1 - r0, pk = c1 - c0, groups = (pk + group - 1) / group;
  // Act-order (g_idx other than column / group), read from the file's mapping so that the dry
  // run counts what the load keeps: its columns cannot be cut for a shard.
  const std::string g_idx = prefix + (packed ? ".weight_g_idx" : ".g_idx");
  bool act_order = false;
  if (const weights::TensorRecord* gr = ckpt_->find(g_idx)) {
    LW_CHECK(gr->dtype == weights::FileDType::i32 && gr->numel() == k,
             where << ": " << g_idx << " " << gr->type_name << shape_str(gr->shape) << " must be I32[" << k << "]");
    const auto* g = reinterpret_cast<const int32_t*>(gr->data);
    for (int64_t col = 0; col < k && !act_order; ++col) act_order = g[col] != col / group;
  }
  const bool whole_groups =
      part.dim != 1 || (!act_order && c0 % group == 0 && (c1 % group == 0 || c1 == k));
  const bool keep = keep_quantized_ && whole_groups;
  if (keep_quantized_ && !whole_groups && !dry_)
    log().info("{}: a shard's columns [{}, {}) {}: expanded to {}", where, c0, c1,
               act_order ? "of an act-order weight (groups scattered over K)" : "cut its groups", dtype_name(dtype_));
  if (keep) {
    bytes_ += static_cast<size_t>(kernels::int4_tile_count(pn, pk) * kernels::kInt4TileBytes + 5 * groups * pn +
                                  (act_order ? 4 * pk : 0));
    kept_format_ = ops::WeightFormat::int4;
    if (act_order && dry_) {  // for fuse_weights' count (a g_idx of uneven groups is refused by the load)
      const weights::TensorRecord& gr = *ckpt_->find(g_idx);
      std::optional<std::vector<int32_t>> order = ops::act_order_columns(
          reinterpret_cast<const int32_t*>(gr.data), k, group, (k + group - 1) / group, where + ": " + g_idx);
      if (order) kept_order_ = std::make_shared<const std::vector<int32_t>>(std::move(*order));
    }
  } else {
    bytes_ += static_cast<size_t>(pn * pk) * dtype_size(dtype_);
  }
  if (dry_) return ops::Weight();

  // (integer tensors load as stored; f32 is the scales' compute dtype)
  auto load = [&](const std::string& suffix) { return weights::load_tensor(ctx_, ckpt_->get(prefix + suffix), DType::f32); };
  ops::Int4Tensors t;
  t.layout = packed ? ops::Int4Layout::packed_rows
             : q.method == "awq" ? ops::Int4Layout::awq
             : q.gptq_v2 ? ops::Int4Layout::gptq_v2
                         : ops::Int4Layout::gptq;
  t.n = n, t.k = k, t.group = group;
  t.qweight = load(packed ? ".weight_packed" : ".qweight");
  t.scales = load(packed ? ".weight_scale" : ".scales");
  if (!packed) t.qzeros = load(".qzeros");
  // pack-quantized zero points: required where the config says asymmetric, read wherever stored.
  if (packed && (q.int4_asymmetric || ckpt_->find(prefix + ".weight_zero_point"))) {
    LW_CHECK(ckpt_->find(prefix + ".weight_zero_point"),
             where << ": the config's asymmetric 4-bit weights need " << prefix << ".weight_zero_point");
    t.qzeros = load(".weight_zero_point");
  }
  if (ckpt_->find(g_idx)) t.g_idx = load(packed ? ".weight_g_idx" : ".g_idx");
  if (const weights::TensorRecord* ws = packed ? ckpt_->find(prefix + ".weight_shape") : nullptr) {
    LW_CHECK(ws->dtype == weights::FileDType::i64 && ws->numel() == 2,
             where << ": weight_shape " << ws->type_name << shape_str(ws->shape) << " must be I64[2]");
    const auto* d = reinterpret_cast<const int64_t*>(ws->data);
    LW_CHECK(d[0] == n && d[1] == k, where << ": weight_shape [" << d[0] << ", " << d[1] << "] does not say [" << n << ", "
                                           << k << "], the model config's shape");
  }
  if (keep) {
    const ops::Weight w = ops::int4_weight(ctx_, t, {part.dim, part.start, part.end});
    LW_CHECK(w.defined(), where << ": the part [" << r0 << ", " << r1 << ") x [" << c0 << ", " << c1
                                << ") could not stay 4-bit");  // whole_groups said it would
    draw();
    return w;
  }
  const Tensor dense = ops::expand(ctx_, ops::int4_weight(ctx_, t), dtype_);
  draw();
  return projection(ops::contiguous(ctx_, dense.slice(0, r0, r1).slice(1, c0, c1)));
}

ops::Weight WeightLoader::gptq8_weight(const std::string& name, const std::vector<int64_t>& shape, Part part) {
  const std::string prefix = weight_prefix(name);
  const std::string where = "tensor '" + prefix + "' in " + ckpt_->description();
  LW_CHECK(shape.size() == 2, where << " holds 8-bit GPTQ values, but the model reads it as " << shape_str(shape)
                                    << " (8-bit GPTQ tensors load as matrices)");
  const int64_t n = shape[0], k = shape[1];
  const int64_t group = quantization_.group_size < 0 ? k : std::min(quantization_.group_size, k);
  const int64_t groups = (k + group - 1) / group;
  LW_CHECK(n % 4 == 0 && k % 4 == 0, where << ": 8-bit GPTQ packs four values per int32 word; [" << n << ", " << k
                                           << "] is not whole words");
  // Every tensor's type and shape, named where it is wrong.
  auto record = [&](const std::string& suffix, std::vector<int64_t> want, bool integer) -> const weights::TensorRecord* {
    const weights::TensorRecord* r = ckpt_->find(prefix + suffix);
    if (!r) return nullptr;
    const bool type_ok = integer ? r->dtype == weights::FileDType::i32
                                 : r->dtype == weights::FileDType::f16 || r->dtype == weights::FileDType::bf16 ||
                                       r->dtype == weights::FileDType::f32;
    LW_CHECK(type_ok && r->shape == want, where << ": " << prefix << suffix << " is " << r->type_name << shape_str(r->shape)
                                                << "; 8-bit GPTQ [" << n << ", " << k << "] in groups of " << group
                                                << " needs " << (integer ? "I32" : "F16/BF16/F32") << shape_str(want));
    return r;
  };
  const weights::TensorRecord* qweight = record(".qweight", {k / 4, n}, true);
  const weights::TensorRecord* qzeros = record(".qzeros", {groups, n / 4}, true);
  const weights::TensorRecord* scales = record(".scales", {groups, n}, false);
  const weights::TensorRecord* g_idx = record(".g_idx", {k}, true);
  LW_CHECK(qweight && qzeros && scales, where << ": 8-bit GPTQ needs " << prefix << ".qweight, .qzeros and .scales");
  // Act-order columns (g_idx other than column / group: kept sorted by group) and zero points,
  // read from the file's mapping so that the dry run counts what the load keeps.
  std::optional<std::vector<int32_t>> order = std::vector<int32_t>();
  if (g_idx)
    order = ops::act_order_columns(reinterpret_cast<const int32_t*>(g_idx->data), k, group, groups,
                                   where + ": " + prefix + ".g_idx");
  const bool act_order = !order || !order->empty();
  const int zero_add = quantization_.gptq_v2 ? 0 : 1;
  bool symmetric = true;
  const auto* z = reinterpret_cast<const uint8_t*>(qzeros->data);
  for (size_t i = 0; i < qzeros->bytes && symmetric; ++i) symmetric = z[i] + zero_add == 128;

  int64_t r0 = 0, r1 = n, c0 = 0, c1 = k;
  if (part.dim == 0) r0 = part.start, r1 = part.end;
  if (part.dim == 1) c0 = part.start, c1 = part.end;
  const int64_t pn = r1 - r0, pk = c1 - c0;
  const bool whole_groups = part.dim != 1 || (!act_order && c0 % group == 0 && (c1 % group == 0 || c1 == k));
  const bool keep = keep_quantized_ && order && whole_groups;
  if (keep_quantized_ && !keep && !dry_ && !logged_expanded_gptq8_) {
    log().info("{}: 8-bit GPTQ weights {}: expanded to {} at load", where,
               !order      ? "whose g_idx gives groups of other sizes than the group size"
               : act_order ? "in act order (groups scattered over K) cut by a shard's columns"
                           : "cut inside a group by a shard's columns",
               dtype_name(dtype_));
    logged_expanded_gptq8_ = true;
  }
  const int64_t part_groups = (pk + group - 1) / group;
  if (keep) {
    bytes_ += static_cast<size_t>(pn * pk + (symmetric ? 4 : 8) * pn * part_groups + (act_order ? 4 * k : 0));
    kept_format_ = ops::WeightFormat::int8_per_group;
    if (act_order && dry_) kept_order_ = std::make_shared<const std::vector<int32_t>>(*order);  // fuse_weights' count
    kept_zeros_ = !symmetric;
    kept_zero_bytes_ = symmetric ? static_cast<size_t>(4 * pn * part_groups) : 0;
  } else {
    bytes_ += static_cast<size_t>(pn * pk) * dtype_size(dtype_);
  }
  if (dry_) return ops::Weight();

  const Tensor words = weights::load_tensor(ctx_, *qweight, DType::f32);  // integers load as stored
  const Tensor s = weights::load_tensor(ctx_, *scales, DType::f32);
  const Tensor host_scales = ctx_.to_host(s);
  for (int64_t i = 0; i < host_scales.numel(); ++i) {
    const float v = host_scales.data<float>()[i];
    LW_CHECK(std::isfinite(v), where << ": scale " << i << " of " << prefix << ".scales is " << v);
  }
  cudaStream_t stream = ctx_.stream().get();
  if (keep) {
    Tensor perm;
    if (act_order) {
      Tensor h = Tensor::empty_host({k}, DType::i32);
      std::copy(order->begin(), order->end(), h.data<int32_t>());
      perm = ctx_.to_device(h);
    }
    Tensor q = ctx_.empty({pn, pk}, DType::i8);
    kernels::gptq8_unpack(static_cast<int8_t*>(q.data_ptr()), words.data<int32_t>(), n, k, r0, pn, c0, pk,
                          perm.defined() ? perm.data<int32_t>() : nullptr, stream);
    // scales [G, N] -> the part's [rows, groups] (act-order: the sorted columns' groups in order)
    const int64_t g0 = c0 / group;
    const Tensor ps = ops::contiguous(ctx_, s.slice(1, r0, r1).slice(0, g0, g0 + part_groups).transpose(0, 1));
    // zero points [G, N / 4 words] -> the part's [rows, groups] of zero - 128 (integers in f32)
    Tensor zeros;
    if (!symmetric) {
      Tensor h = Tensor::empty_host({pn, part_groups}, DType::f32);
      for (int64_t r = 0; r < pn; ++r)
        for (int64_t g = 0; g < part_groups; ++g)
          h.data<float>()[r * part_groups + g] =
              static_cast<float>(static_cast<int>(z[((g0 + g) * (n / 4) + (r0 + r) / 4) * 4 + (r0 + r) % 4]) + zero_add - 128);
      zeros = ctx_.to_device(h);
    }
    const ops::Weight w = ops::Weight::int8_per_group(q, ps, group, zeros, perm);
    draw();
    return w;
  }
  const Tensor zeros = weights::load_tensor(ctx_, *qzeros, DType::f32);
  const Tensor gi = g_idx ? weights::load_tensor(ctx_, *g_idx, DType::f32) : Tensor();
  kernels::Gptq8Words wd;
  wd.qweight = words.data<int32_t>();
  wd.qzeros = zeros.data<int32_t>();
  wd.scales = s.data<float>();
  wd.g_idx = g_idx ? gi.data<int32_t>() : nullptr;
  wd.n = n, wd.k = k, wd.group = group, wd.groups = groups, wd.zero_add = zero_add;
  Tensor dense = ctx_.empty({n, k}, dtype_);
  ops::dispatch_float(dtype_, "gptq8_weight", [&]<class T>() { kernels::gptq8_expand<T>(dense.data<T>(), wd, stream); });
  draw();
  return projection(part.dim < 0 ? dense : ops::contiguous(ctx_, dense.slice(0, r0, r1).slice(1, c0, c1)));
}

Tensor WeightLoader::head_scales(const std::string& name, int64_t heads, int64_t first, int64_t count) {
  const weights::TensorRecord* rec = ckpt_ ? ckpt_->find(name) : nullptr;
  if (!rec || dry_) return Tensor();
  const int64_t n = rec->numel();
  LW_CHECK(n == 1 || n == heads, "tensor '" << name << "' in " << ckpt_->description() << " has shape "
                                             << shape_str(rec->shape) << ": a scale per key/value head takes one value or "
                                             << heads);
  const Tensor all = ctx_.to_host(weights::load_tensor(ctx_, *rec, DType::f32));
  Tensor mine = Tensor::empty_host({count}, DType::f32);
  for (int64_t h = 0; h < count; ++h) {
    const float v = all.data<float>()[n == 1 ? 0 : first + h];
    LW_CHECK(std::isfinite(v) && v > 0.0f, "tensor '" << name << "' in " << ckpt_->description() << ": scale "
                                                      << (n == 1 ? 0 : first + h) << " is " << v
                                                      << " (scales must be finite and positive)");
    mine.data<float>()[h] = v;
  }
  return ctx_.to_device(mine);
}

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
  if (has_int4(name)) {
    // 4-bit matrices the model reads as plain tensors (projections take get_weight).
    if (!dry_ && !logged_expanded_int4_) {
      log().info("tensor '{}' in {}: GPTQ/AWQ values the model reads as a plain tensor expanded to {} at load",
                 name, ckpt_->description(), dtype_name(dtype_));
      logged_expanded_int4_ = true;
    }
    const ScopedFlag expand(keep_quantized_, false);
    const ops::Weight w = int4_weight(name, shape, Part{});
    return dry_ ? Tensor() : w.data();
  }
  const weights::TensorRecord& rec = record(name);
  LW_CHECK(rec.shape == shape, "tensor '" << name << "' in " << ckpt_->description() << " has shape " << shape_str(rec.shape)
                                          << "; the model config needs " << shape_str(shape));
  if (rec.dtype == weights::FileDType::f8_e4m3 || rec.dtype == weights::FileDType::i8) {
    // 8-bit matrices the model reads as plain tensors (projections take get_weight): the values
    // times their scales, in the model dtype.
    LW_CHECK(shape.size() == 2, "tensor '" << name << "' in " << ckpt_->description() << " is " << rec.type_name
                                           << " of shape " << shape_str(shape)
                                           << ": 8-bit tensors load as matrices with their scales, not stacked");
    if (!dry_ && !logged_expanded_8bit_) {
      log().info("tensor '{}' in {}: {} values the model reads as a plain tensor expanded to {} at load", name,
                 ckpt_->description(), rec.type_name, dtype_name(dtype_));
      logged_expanded_8bit_ = true;
    }
    const weights::TensorRecord* scale = ckpt_->find(name + "_scale_inv");
    const ScopedFlag expand(keep_quantized_, false);
    const ops::Weight w = scaled_weight(rec, scale ? scale : ckpt_->find(name + "_scale"),
                                        {quantization_.block_rows, quantization_.block_cols}, Part{});
    return dry_ ? Tensor() : w.data();
  }
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
  kept_order_.reset();
  kept_zeros_ = false;
  kept_zero_bytes_ = 0;
  const size_t before = bytes_;
  ops::Weight w = get_weight_as_stored(name, shape, part);
  if (dry_) {
    int64_t elements = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      elements *= static_cast<int>(d) == part.dim ? part.end - part.start : shape[d];
    const int64_t rows = part.dim == 0 ? part.end - part.start : shape[0];
    dry_weights_.push_back({kept_format_, elements, rows, bytes_ - before, kept_order_, kept_zeros_, kept_zero_bytes_});
  }
  return w;
}

ops::Weight WeightLoader::get_weight_as_stored(const std::string& name, const std::vector<int64_t>& shape, Part part) {
  if (shape.size() != 2) return projection(get(name, shape, part));
  if (!ckpt_) {
    const weights::FileDType random_type = random_blocks_.type_of(name);
    if (random_type == weights::FileDType::f32) return projection(get(name, shape, part));
    if (random_type == weights::FileDType::i32) return random_int4(name, shape, part);
    if (weights::has_random_scaled(random_type)) {
      // 8-bit values and their scales from a seed of the name, generated only when the real run
      // needs them (the dry run reads shapes and types only).
      const int64_t block = quantization_.block_rows > 0 ? quantization_.block_rows : 128;
      weights::RandomScaled r;
      if (!dry_)
        r = weights::random_scaled(random_type, shape[0], shape[1], seed_ ^ std::hash<std::string>{}(name), block);
      else
        r.scale_shape = random_type == weights::FileDType::f8_e4m3
                            ? std::vector<int64_t>{(shape[0] + block - 1) / block, (shape[1] + block - 1) / block}
                            : std::vector<int64_t>{shape[0], 1};
      weights::TensorRecord rec, scale;
      rec.name = name;
      rec.dtype = random_type;
      rec.shape = shape;
      rec.data = r.values.data();
      rec.bytes = static_cast<size_t>(shape[0] * shape[1]);
      rec.file = scale.file = "random";
      rec.type_name = weights::file_dtype_name(random_type);
      scale.name = name + "_scale";
      scale.dtype = weights::FileDType::f32;
      scale.shape = r.scale_shape;
      scale.data = reinterpret_cast<const std::byte*>(r.scales.data());
      scale.bytes = r.scales.size() * sizeof(float);
      scale.type_name = "F32";
      return scaled_weight(rec, &scale, {block, block}, part);
    }
    const int64_t elems = weights::file_dtype_block_elems(random_type);
    LW_CHECK(shape[1] % elems == 0, "random " << weights::file_dtype_name(random_type) << " weights: tensor '" << name
                                              << "' " << shape_str(shape) << " has " << shape[1]
                                              << " columns, not whole blocks of " << elems);
    // The whole matrix from a seed of its name (a shard slices what the whole model holds),
    // generated only when the real run needs the bytes.
    std::vector<std::byte> bytes;
    weights::TensorRecord rec;
    rec.name = name;
    rec.dtype = random_type;
    rec.shape = shape;
    rec.bytes = weights::file_dtype_bytes(random_type, shape[0] * shape[1]);
    rec.file = "random";
    rec.type_name = weights::file_dtype_name(random_type);
    if (!dry_) {
      // Weights within +-1/sqrt(fan-in), as random_tensor draws dense ones (random_blocks: ~0.3).
      const float scale = 1.0f / (0.3f * std::sqrt(static_cast<float>(shape[1])));
      bytes = weights::random_blocks(random_type, shape[0], shape[1], seed_ ^ std::hash<std::string>{}(name), scale);
      rec.data = bytes.data();
    }
    return block_weight(rec, part, [&] {
      const ops::Weight whole = block_weight(rec, Part{}, {});
      Tensor t = ops::expand(ctx_, whole, dtype_);
      return projection(part.dim < 0 ? t : ops::contiguous(ctx_, t.slice(part.dim, part.start, part.end)));
    });
  }
  if (has_int4(name)) return int4_weight(name, shape, part);
  const weights::TensorRecord& rec = record(name);
  if (rec.shape == shape && (rec.dtype == weights::FileDType::f8_e4m3 || rec.dtype == weights::FileDType::i8)) {
    const weights::TensorRecord* scale = ckpt_->find(name + "_scale_inv");
    return scaled_weight(rec, scale ? scale : ckpt_->find(name + "_scale"),
                         {quantization_.block_rows, quantization_.block_cols}, part);
  }
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

ops::Weight WeightLoader::scaled_weight(const weights::TensorRecord& rec, const weights::TensorRecord* scale,
                                        ops::WeightBlock block, Part part) {
  const bool fp8 = rec.dtype == weights::FileDType::f8_e4m3;
  const int64_t n = rec.shape[0], k = rec.shape[1];
  const std::string where = "tensor '" + rec.name + "' in " + (ckpt_ ? ckpt_->description() : "the random weights");
  LW_CHECK(scale, where << " is " << rec.type_name << " but the checkpoint has no scale for it ('" << rec.name
                        << "_scale_inv' or '" << rec.name << "_scale')");
  // The layout, from the scale's shape: one value, one per row ([N] or [N, 1]), or one per block.
  const int64_t count = scale->numel();
  const bool per_row = count == n && (scale->shape.size() == 1 || (scale->shape.size() == 2 && scale->shape[1] == 1));
  ops::WeightFormat format = !fp8 ? ops::WeightFormat::int8_per_channel
                             : count == 1 ? ops::WeightFormat::fp8_e4m3_per_tensor
                             : per_row    ? ops::WeightFormat::fp8_e4m3_per_channel
                                          : ops::WeightFormat::fp8_e4m3_per_block;
  if (format == ops::WeightFormat::fp8_e4m3_per_block) {
    LW_CHECK(block.rows > 0, where << ": its scales '" << scale->name << "' " << shape_str(scale->shape)
                                   << " are neither one value nor one per row, and the config's quantization_config "
                                      "has no weight block size (weight_block_size or block_structure)");
    const std::vector<int64_t> want = {(n + block.rows - 1) / block.rows, (k + block.cols - 1) / block.cols};
    LW_CHECK(scale->shape == want, where << ": its scales '" << scale->name << "' " << shape_str(scale->shape)
                                         << " do not match blocks of " << block.rows << " x " << block.cols << " over "
                                         << shape_str(rec.shape) << " (" << shape_str(want) << ")");
  }
  LW_CHECK(fp8 || count == 1 || per_row, where << ": int8 weights take one scale or one per row; '" << scale->name
                                               << "' is " << shape_str(scale->shape));

  int64_t r0 = 0, r1 = n, c0 = 0, c1 = k;
  if (part.dim == 0) r0 = part.start, r1 = part.end;
  if (part.dim == 1) c0 = part.start, c1 = part.end;
  auto on_edge = [](int64_t at, int64_t side, int64_t size) { return at % side == 0 || at == size; };
  const bool whole_blocks = format != ops::WeightFormat::fp8_e4m3_per_block ||
                            (on_edge(r0, block.rows, n) && on_edge(r1, block.rows, n) && on_edge(c0, block.cols, k) &&
                             on_edge(c1, block.cols, k));
  // int8 with one scale runs as int8 with per-row scales (the linear's format).
  const int64_t scale_bytes = format == ops::WeightFormat::fp8_e4m3_per_tensor ? 4
                              : format == ops::WeightFormat::fp8_e4m3_per_block
                                  ? 4 * ((r1 - r0 + block.rows - 1) / block.rows) * ((c1 - c0 + block.cols - 1) / block.cols)
                                  : 4 * (r1 - r0);
  // Kept 8-bit where the storage keeps quantised weights and the part holds whole scale blocks;
  // else expanded to the model dtype at load.
  // Weight-only int8 (no int8 activations in the config) is expanded: linear over int8 weights
  // quantises the activations (W8A8).
  const bool w8a16 = !fp8 && !quantization_.int8_activations;
  const bool keep = whole_blocks && keep_quantized_ && !w8a16;
  if (w8a16 && !dry_ && !logged_w8a16_) {
    log().info("{}: int8 weights without int8 activations (weight-only): expanded to {} at load", where,
               dtype_name(dtype_));
    logged_w8a16_ = true;
  }
  if (!whole_blocks && keep_quantized_ && !dry_)
    log().info("{}: a shard's rows [{}, {}) and columns [{}, {}) cut its {} x {} scale blocks: expanded to {}", where, r0,
               r1, c0, c1, block.rows, block.cols, dtype_name(dtype_));
  if (keep) {
    bytes_ += static_cast<size_t>((r1 - r0) * (c1 - c0) + scale_bytes);
    kept_format_ = format;
  } else {
    bytes_ += static_cast<size_t>((r1 - r0) * (c1 - c0)) * dtype_size(dtype_);
  }
  if (dry_) return ops::Weight();

  // Values and scales that would turn into NaN or infinity are refused here, not found in the logits.
  if (fp8) {
    // A branch-free pass over every byte (tens of GB for a large model), then the first NaN's
    // place for the message.
    bool any_nan = false;
    for (size_t i = 0; i < rec.bytes; ++i) any_nan |= kernels::fp8_e4m3_is_nan(static_cast<uint8_t>(rec.data[i]));
    for (size_t i = 0; any_nan && i < rec.bytes; ++i)
      LW_CHECK(!kernels::fp8_e4m3_is_nan(static_cast<uint8_t>(rec.data[i])),
               where << ": element " << i << " (row " << static_cast<int64_t>(i) / k << ", column "
                     << static_cast<int64_t>(i) % k << ") is an FP8 NaN");
  }
  Tensor s = weights::load_tensor(ctx_, *scale, DType::f32);
  const Tensor host = ctx_.to_host(s);
  for (int64_t i = 0; i < count; ++i) {
    const float v = host.data<float>()[i];
    LW_CHECK(std::isfinite(v), where << ": scale " << i << " of '" << scale->name << "' is " << v);
  }
  s = s.view(format == ops::WeightFormat::fp8_e4m3_per_block ? scale->shape : std::vector<int64_t>{count == 1 ? 1 : n});
  if (format == ops::WeightFormat::int8_per_channel && count == 1) s = filled(ctx_, n, host.data<float>()[0]);
  auto make = [&](const Tensor& q, const Tensor& scales) {
    switch (format) {
      case ops::WeightFormat::fp8_e4m3_per_tensor: return ops::Weight::fp8_per_tensor(q, scales);
      case ops::WeightFormat::fp8_e4m3_per_channel: return ops::Weight::fp8_per_channel(q, scales);
      case ops::WeightFormat::fp8_e4m3_per_block: return ops::Weight::fp8_per_block(q, scales, block);
      default: return ops::Weight::int8_per_channel(q, scales);
    }
  };
  if (!keep) {  // the whole matrix expanded, then the part
    const ops::Weight whole = make(weights::load_raw(ctx_, rec, 0, n, 0, k), s);
    draw();
    return projection(ops::contiguous(ctx_, ops::expand(ctx_, whole, dtype_).slice(0, r0, r1).slice(1, c0, c1)));
  }
  // The part's scales: rows of per-row scales, rows and columns of block scales.
  if (format == ops::WeightFormat::fp8_e4m3_per_channel || format == ops::WeightFormat::int8_per_channel) {
    s = ops::contiguous(ctx_, s.slice(0, r0, r1));
  } else if (format == ops::WeightFormat::fp8_e4m3_per_block) {
    s = ops::contiguous(ctx_, s.slice(0, r0 / block.rows, (r1 + block.rows - 1) / block.rows)
                                  .slice(1, c0 / block.cols, (c1 + block.cols - 1) / block.cols));
  }
  const ops::Weight w = make(weights::load_raw(ctx_, rec, r0, r1, c0, c1), s);
  draw();
  return w;
}

ops::Weight WeightLoader::fuse_scaled(const std::vector<ops::Weight>& parts) {
  std::vector<std::pair<ops::WeightFormat, int64_t>> formats;
  for (const ops::Weight& p : parts) formats.emplace_back(p.format(), p.out_features());
  const int64_t block_rows = parts[0].block().rows;
  for (const ops::Weight& p : parts)
    if (p.block().rows != block_rows || p.block().cols != parts[0].block().cols) return ops::Weight();
  const ops::WeightFormat format = stacked_format(formats, block_rows);
  if (!ops::is_scaled_8bit_format(format)) return ops::Weight();
  std::vector<Tensor> data, scales;
  for (const ops::Weight& p : parts) {
    data.push_back(p.data());
    // Per-row FP8 from one scale: that scale on each of the part's rows.
    if (p.format() == ops::WeightFormat::fp8_e4m3_per_tensor)
      scales.push_back(filled(ctx_, p.out_features(), ctx_.to_host(p.scales()).data<float>()[0]));
    else
      scales.push_back(p.scales());
  }
  int64_t n = 0;
  for (const ops::Weight& p : parts) n += p.out_features();
  const Tensor q = stack_bytes(ctx_, data, n, parts[0].in_features()), s = ops::concat(ctx_, scales, 0);
  for (const ops::Weight& p : parts)
    if (p.format() == ops::WeightFormat::fp8_e4m3_per_tensor) bytes_ += 4 * static_cast<size_t>(p.out_features() - 1);
  switch (format) {
    case ops::WeightFormat::fp8_e4m3_per_channel: return ops::Weight::fp8_per_channel(q, s);
    case ops::WeightFormat::fp8_e4m3_per_block: return ops::Weight::fp8_per_block(q, s, parts[0].block());
    case ops::WeightFormat::int8_per_group: {
      // One column order for all (act-order projections of one input share it: their g_idx
      // comes from the same activations), and zero points 0 for parts without them.
      if (!ops::same_column_order(ctx_, parts)) return ops::Weight();
      bool any_zeros = false;
      for (const ops::Weight& p : parts) any_zeros = any_zeros || p.zeros().defined();
      Tensor zeros;
      if (any_zeros) {
        std::vector<Tensor> z;
        for (const ops::Weight& p : parts) {
          if (p.zeros().defined()) {
            z.push_back(p.zeros());
          } else {
            z.push_back(filled(ctx_, p.scales().numel(), 0.0f).view(p.scales().shape()));
            bytes_ += p.scales().nbytes();
          }
        }
        zeros = ops::concat(ctx_, z, 0);
      }
      // one permutation for all
      if (parts[0].perm().defined()) bytes_ -= (parts.size() - 1) * parts[0].perm().nbytes();
      return ops::Weight::int8_per_group(q, s, parts[0].group_size(), zeros, parts[0].perm());
    }
    default: return ops::Weight::int8_per_channel(q, s);
  }
}

ops::Weight WeightLoader::get_padded_weight(const std::string& name, const std::vector<int64_t>& shape, int64_t start,
                                            int64_t end, int64_t padded) {
  const size_t before = bytes_;
  ops::Weight part = get_weight(name, shape, {0, start, end});
  if (end - start == padded) return part;
  const ops::WeightFormat format = kept_format_;
  if ((ops::is_scaled_8bit_format(format) || format == ops::WeightFormat::int4) && !dry_) {
    // padded as the dense matrix it expands to
    log().info("tensor '{}': the padded share of an {} matrix is expanded to {}", name, ops::weight_format_name(format),
               dtype_name(dtype_));
    part = ops::Weight::dense(ops::expand(ctx_, part, dtype_));
  }
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
    DryWeight fused{first->format, 0, 0, 0};
    std::vector<std::pair<ops::WeightFormat, int64_t>> formats;
    for (auto it = first; it != dry_weights_.end(); ++it) {
      formats.emplace_back(it->format, it->rows);
      fused.elements += it->elements;
      fused.rows += it->rows;
      fused.bytes += it->bytes;
    }
    fused.format = stacked_format(formats, quantization_.block_rows);
    if (fused.format == ops::WeightFormat::int4 || fused.format == ops::WeightFormat::int8_per_group) {
      // Parts of different column orders expand (ops::same_column_order); parts of one keep it
      // once; 8-bit parts without zero points get zeros where others have them (fuse_scaled).
      bool same = true, zeros = false;
      for (auto it = first; it != dry_weights_.end(); ++it) {
        same = same && (it->order == first->order ||
                        (it->order && first->order && *it->order == *first->order));
        zeros = zeros || it->zeros;
      }
      if (!same) {
        fused.format = ops::WeightFormat::dense;
      } else {
        fused.order = first->order;
        if (first->order) {
          const size_t shared = (parts.size() - 1) * 4 * first->order->size();
          bytes_ -= shared;
          fused.bytes -= shared;
        }
        if (fused.format == ops::WeightFormat::int8_per_group && zeros) {
          for (auto it = first; it != dry_weights_.end(); ++it) {
            bytes_ += it->zero_bytes;
            fused.bytes += it->zero_bytes;
          }
          fused.zeros = true;
        }
      }
    }
    if (fused.format == ops::WeightFormat::fp8_e4m3_per_channel) {  // one byte per value and a scale per row
      const size_t bytes = static_cast<size_t>(fused.elements + 4 * fused.rows);
      bytes_ += bytes - fused.bytes;
      fused.bytes = bytes;
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
  if (ops::is_scaled_8bit_format(format)) {
    ops::Weight w = fuse_scaled(parts);
    if (w.defined()) return w;
  }
  if (same && format == ops::WeightFormat::int4) {
    ops::Weight w = ops::int4_stack_rows(ctx_, parts);
    if (w.defined()) {
      // one permutation for all
      if (parts[0].perm().defined()) bytes_ -= (parts.size() - 1) * parts[0].perm().nbytes();
      return w;
    }
  }
  if (same && ops::is_gguf_block_format(format))  // whole rows of blocks: the bytes one after another
    return ops::Weight::gguf(format, n, k, stack_bytes(ctx_, data, n, data[0].numel() / parts[0].out_features()));
  bool gguf = true;
  for (const ops::Weight& p : parts) gguf = gguf && ops::is_gguf_block_format(p.format());
  if (gguf) return ops::Weight::gguf_mixed(parts);  // each part in its own blocks
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
