#include "model/model.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "core/logging.h"
#include "gpu/runtime.h"
#include "model/arch/registry.h"
#include "model/decode_graphs.h"
#include "model/layers.h"
#include "model/weight_loader.h"
#include "ops/copy.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/weight.h"
#include "ops/norm.h"
#include "parallel/communicator.h"

namespace lw::model {

namespace {

// Calls f on every projection matrix of the model that is there.
template <class F>
void for_each_projection(const ModelWeights& w, F&& f) {
  if (w.lm_head.defined()) f(w.lm_head);
  for (const LayerWeights& l : w.layers) {
    for (const ops::Weight* p : {&l.qkv, &l.o, &l.gate_up, &l.down, &l.router, &l.shared_gate_up, &l.shared_down, &l.shared_gate})
      if (p->defined()) f(*p);
    for (const ExpertMatrices* e : {&l.experts_gate_up, &l.experts_down})
      for (const ops::Weight& p : e->each.weights()) f(p);
  }
}

// "210 gguf_q4_1, 1 dense": the formats of the projection matrices.
std::string projection_formats(const ModelWeights& w) {
  std::map<std::string, int> count;
  for_each_projection(w, [&](const ops::Weight& p) { ++count[p.name()]; });
  std::string s;
  for (const auto& [name, n] : count) s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  return s;
}

}  // namespace

Model::Model(Context& ctx, const ModelConfig& config, DType dtype, const Shard& shard)
    : config_(config), local_(model::shard_config(config, shard.size)), shard_(shard), dtype_(dtype) {
  rope_.emplace(ctx, config.rope);
  for (int64_t l = 0; l < config.layers; ++l) blocks_.push_back(block_variant(config, l));
  const char* graphs = std::getenv("LW_CUDA_GRAPHS");
  decode_graphs_ = !(graphs && std::string(graphs) == "0");
}

size_t Model::captured_decode_graphs() const { return graphs_ ? graphs_->captured() : 0; }

size_t Model::graph_bytes() const {
  return decode_graphs() && config_.experts == 0 ? DecodeGraphs::reserve_bytes(local_, config_.vocab, shard_.size, dtype_)
                                                 : 0;
}

void Model::set_decode_graphs(bool on) {
  decode_graphs_ = on;
  if (!on) graphs_.reset();
}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(Context& ctx, const weights::Checkpoint& ckpt, const ModelConfig& config, DType dtype,
                                   const Shard& shard) {
  return build(ctx, &ckpt, config, dtype, 0, shard, weights::FileDType::f32);
}

std::unique_ptr<Model> Model::random(Context& ctx, const ModelConfig& config, DType dtype, uint64_t seed,
                                     const Shard& shard, RandomProjections projections) {
  return build(ctx, nullptr, config, dtype, seed, shard, projections);
}

std::unique_ptr<Model> Model::build(Context& ctx, const weights::Checkpoint* ckpt, const ModelConfig& config,
                                    DType dtype, uint64_t seed, const Shard& shard, RandomProjections projections) {
  LW_CHECK(is_float(dtype), "model dtype " << dtype_name(dtype) << " must be f32, f16 or bf16");
  LW_CHECK(shard.size >= 1 && shard.rank >= 0 && shard.rank < shard.size && (shard.size == 1 || shard.comm),
           "model shard: rank " << shard.rank << " of " << shard.size << (shard.comm ? "" : " without a communicator"));
  const Architecture& arch = architecture(config.architecture);
  const ModelConfig local = model::shard_config(config, shard.size);
  WeightLoader dry(ctx, ckpt, dtype, true, 0, seed, projections);
  dry.set_quantization(config.quantization);
  load_weights(dry, arch, config, local, shard);
  size_t free_bytes = 0, total_bytes = 0;
  LW_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::string what = ckpt ? ckpt->description() : "the random " + config.summary() + " model";
  if (shard.size > 1) what = "rank " + std::to_string(shard.rank) + "'s shard of " + what;
  LW_CHECK(dry.bytes() < free_bytes, "the weights of " << what << " take " << dry.bytes() / (1 << 20) << " MiB in "
                                                       << dtype_name(dtype) << " but device " << ctx.device() << " has "
                                                       << free_bytes / (1 << 20) << " MiB free");

  std::unique_ptr<Model> m(new Model(ctx, config, dtype, shard));
  WeightLoader ld(ctx, ckpt, dtype, false, shard.rank == 0 ? dry.bytes() : 0, seed, projections);
  ld.set_quantization(config.quantization);
  m->weights_ = load_weights(ld, arch, config, local, shard);
  m->weight_bytes_ = ld.bytes();
  for (const LayerWeights& l : m->weights_.layers)
    for (const ExpertMatrices* e : {&l.experts_gate_up, &l.experts_down}) {
      if (e->stacked.defined()) m->routed_expert_bytes_ += e->stacked.nbytes();
      for (const ops::Weight& p : e->each.weights()) m->routed_expert_bytes_ += p.device_bytes();
    }
  for_each_projection(m->weights_, [&](const ops::Weight& p) {
    const ops::WeightFormat f = p.format();
    if (f == ops::WeightFormat::dense || f == ops::WeightFormat::int8_per_channel) return;  // no expansion
    m->expansion_bytes_ = std::max(m->expansion_bytes_,
                                   static_cast<size_t>(p.out_features() * p.in_features()) * dtype_size(dtype));
  });
  ctx.synchronize();
  log().info("{}: {:.1f} MiB of weights on device {} ({}; projections: {})", what,
             static_cast<double>(m->weight_bytes_) / (1 << 20), ctx.device(), dtype_name(dtype),
             projection_formats(m->weights_));
  return m;
}

std::vector<KvHeadScales> Model::kv_head_scales() const {
  std::vector<KvHeadScales> s;
  for (const LayerWeights& w : weights_.layers) s.push_back({w.k_cache_scale, w.v_cache_scale});
  return s;
}

Tensor Model::forward(Context& ctx, KvCache& cache, const std::vector<SequenceChunk>& batch) {
  LW_CHECK(!batch.empty(), "forward: an empty batch");
  const HostLayout host(cache, batch, config_.vocab);
  if (decode_graphs_ && DecodeGraphs::applies(batch)) {
    if (!graphs_) graphs_ = std::make_unique<DecodeGraphs>(static_cast<int>(config_.heads / config_.kv_heads), graph_bytes());
    Tensor logits =
        graphs_->run(ctx, cache, host, config_.max_position, [&](const BatchLayout& b) { return compute(ctx, cache, b); });
    if (logits.defined()) return logits;
  }
  return compute(ctx, cache, BatchLayout(ctx, host, batch.size(), static_cast<int>(config_.heads / config_.kv_heads)));
}

Tensor Model::compute(Context& ctx, KvCache& cache, const BatchLayout& b) {
  const int64_t t = b.tokens, h = config_.hidden;
  const LayerContext lc{config_, local_, dtype_, shard_, *rope_};
  ResidualStream s{ctx.empty({t, h}, dtype_), ctx.empty({t, h}, dtype_), ctx.empty({t, h}, dtype_)};
  if (shard_.size == 1) {
    ops::embedding(ctx, weights_.embed, b.ids, s.sum, false);  // ids checked in HostLayout
  } else {
    ops::embedding_shard(ctx, weights_.embed, local_.vocab * shard_.rank, b.ids, s.sum);
    reduce(ctx, lc, s.sum);
  }
  for (int64_t l = 0; l < config_.layers; ++l) {
    const auto i = static_cast<size_t>(l);
    transformer_block(ctx, lc, weights_.layers[i], blocks_[i], cache, l, b, s);
  }
  if (b.logits == 0) return Tensor();
  pre_norm(ctx, lc, s, weights_.final_norm);
  return logits(ctx, s.normed, b);
}

Tensor Model::logits(Context& ctx, const Tensor& normed, const BatchLayout& b) {
  const int64_t h = config_.hidden;
  // The wanted rows, gathered (an embedding lookup into the normalised hidden states).
  Tensor rows = normed;
  if (b.logits != b.tokens) {
    rows = ctx.empty({b.logits, h}, dtype_);
    ops::embedding(ctx, normed, b.logit_rows, rows, false);
  }
  const int64_t vocab = config_.vocab;
  if (b.logits_out.defined())
    LW_CHECK(b.logits_out.dim() == 2 && b.logits_out.size(0) == b.logits && b.logits_out.size(1) == vocab &&
                 b.logits_out.dtype() == dtype_ && b.logits_out.is_contiguous(),
             "model: the logits go to " << b.logits_out.describe() << ", not a contiguous " << dtype_name(dtype_) << "["
                                        << b.logits << ", " << vocab << "]");
  const auto output = [&] { return b.logits_out.defined() ? b.logits_out : ctx.empty({b.logits, vocab}, dtype_); };
  if (shard_.size == 1) {
    Tensor logits = output();
    ops::linear(ctx, rows, weights_.lm_head, Tensor(), logits);
    return logits;
  }
  // Each rank's columns of the logits, gathered [ranks, rows, shard] and laid out as
  // [rows, vocab] (the padding of the last shard dropped).
  const int64_t n = shard_.size, vs = local_.vocab;
  Tensor part = ctx.empty({b.logits, vs}, dtype_), all = ctx.empty({n, b.logits, vs}, dtype_);
  ops::linear(ctx, rows, weights_.lm_head, Tensor(), part);
  shard_.comm->all_gather(ctx, part, all);
  Tensor gathered = ctx.empty({b.logits, n, vs}, dtype_);
  ops::copy(ctx, all.transpose(0, 1), gathered);
  if (n * vs == vocab && !b.logits_out.defined()) return gathered.view({b.logits, vocab});
  Tensor logits = output();
  ops::copy(ctx, gathered.view({b.logits, n * vs}).slice(1, 0, vocab), logits);
  return logits;
}

}  // namespace lw::model
