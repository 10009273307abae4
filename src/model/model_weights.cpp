#include "model/model_weights.h"

#include <algorithm>
#include <functional>
#include <string>

#include "base/error.h"

namespace lw::model {

namespace {

using Part = WeightLoader::Part;

// A projection matrix as the GEMM takes it; undefined in a dry run (the loader counts bytes only).
ops::Weight projection(const Tensor& t) { return t.defined() ? ops::Weight::dense(t) : ops::Weight(); }

// The slices of one rank of a tensor-parallel group: column-parallel q/k/v, gate/up and
// expert gate/up (rows), row-parallel o, down and expert down (columns).
class ShardParts {
 public:
  ShardParts(const ModelConfig& c, const ModelConfig& local, const Shard& shard)
      : rank_(shard.rank), size_(shard.size), d_(c.head_dim) {
    // Its KV heads: a share, or with fewer KV heads than ranks the one its query heads read.
    const int64_t kv_first = c.kv_heads % size_ == 0 ? local.kv_heads * rank_ : local.heads * rank_ / (c.heads / c.kv_heads);
    kv_rows_ = whole() ? Part{} : Part{0, kv_first * d_, (kv_first + local.kv_heads) * d_};
    q_rows_ = share(0, c.heads * d_);
  }
  bool whole() const { return size_ == 1; }
  // This rank's share of dimension `dim` of `n` elements (after `offset`); the whole tensor
  // without tensor parallelism.
  Part share(int dim, int64_t n, int64_t offset = 0) const {
    if (whole()) return Part{};
    const int64_t each = n / size_;
    return Part{dim, offset + each * rank_, offset + each * (rank_ + 1)};
  }
  Part q_rows() const { return q_rows_; }
  Part kv_rows() const { return kv_rows_; }

 private:
  int rank_, size_;
  int64_t d_;
  Part q_rows_, kv_rows_;
};

std::string layer_name(bool gguf, int64_t l, const std::string& rest) {
  return (gguf ? "blk." : "model.layers.") + std::to_string(l) + "." + rest;
}

class LayerReader {
 public:
  LayerReader(WeightLoader& ld, const TensorNames& names, const ModelConfig& c, const ModelConfig& local,
              const ShardParts& parts, int rank)
      : ld_(ld), n_(names), c_(c), local_(local), parts_(parts), rank_(rank) {}

  LayerWeights read(int64_t l) {
    l_ = l;
    LayerWeights w;
    const BlockVariant block = block_variant(c_, l);
    w.attn_norm = get(n_.attn_norm, {c_.hidden});
    w.mlp_norm = get(n_.mlp_norm, {c_.hidden});
    attention(block, w);
    if (block.mlp == MlpVariant::dense) dense_mlp(w);
    else moe_mlp(block, w);
    return w;
  }

 private:
  std::string name(const TensorName& t) const {
    LW_CHECK(!(c_.gguf ? t.gguf : t.hf).empty(), "model architecture '" << c_.architecture << "' has no "
                                                                          << (c_.gguf ? "GGUF" : "Hugging Face")
                                                                          << " name for tensor '" << t.hf << "'");
    return layer_name(c_.gguf, l_, c_.gguf ? t.gguf : t.hf);
  }
  std::string hf(const std::string& rest) const { return layer_name(false, l_, rest); }
  std::string gguf(const std::string& rest) const { return layer_name(true, l_, rest); }
  Tensor get(const TensorName& t, const std::vector<int64_t>& shape, Part part = {}) { return ld_.get(name(t), shape, part); }
  ops::Weight weight(const TensorName& t, const std::vector<int64_t>& shape, Part part = {}) {
    return ld_.get_weight(name(t), shape, part);
  }

  void attention(const BlockVariant& block, LayerWeights& w) {
    const int64_t h = c_.hidden, d = c_.head_dim, qd = c_.heads * d, kvd = c_.kv_heads * d;
    const int64_t lqd = local_.heads * d, lkvd = local_.kv_heads * d;
    w.qkv = ld_.fuse_weights({weight(n_.q, {qd, h}, parts_.q_rows()), weight(n_.k, {kvd, h}, parts_.kv_rows()),
                              weight(n_.v, {kvd, h}, parts_.kv_rows())});
    if (block.qkv_bias) {
      const Tensor qb = get(n_.q_bias, {qd}, parts_.q_rows());
      const Tensor kb = get(n_.k_bias, {kvd}, parts_.kv_rows());
      const Tensor vb = get(n_.v_bias, {kvd}, parts_.kv_rows());
      w.qkv_bias = ld_.fuse({qb, kb, vb}, {lqd + 2 * lkvd});
    }
    if (block.qk_norm) {
      w.q_norm = get(n_.q_norm, {d});
      w.k_norm = get(n_.k_norm, {d});
    }
    if (!c_.gguf) {
      const Part kv = parts_.kv_rows();
      const int64_t first = kv.dim < 0 ? 0 : kv.start / d, count = local_.kv_heads;
      auto scale = [&](const char* name, const char* old_name) {
        Tensor t = ld_.head_scales(hf(name), c_.kv_heads, first, count);
        return t.defined() ? t : ld_.head_scales(hf(old_name), c_.kv_heads, first, count);
      };
      w.k_cache_scale = scale("self_attn.k_scale", "self_attn.k_proj.output_scale");
      w.v_cache_scale = scale("self_attn.v_scale", "self_attn.v_proj.output_scale");
    }
    w.o = weight(n_.o, {h, qd}, parts_.share(1, qd));
    // The bias of a row-parallel projection is added once, by rank 0, before the sum.
    if (block.o_bias && rank_ == 0) w.o_bias = get(n_.o_bias, {h});
  }

  void dense_mlp(LayerWeights& w) {
    const int64_t h = c_.hidden, i = c_.intermediate, li = local_.intermediate;
    w.gate_up = ld_.fuse_weights({weight(n_.gate, {i, h}, parts_.share(0, i)), weight(n_.up, {i, h}, parts_.share(0, i))});
    w.down = weight(n_.down, {h, i}, parts_.share(1, i));
  }

  // The first naming whose router the checkpoint holds, else the last (random weights).
  const MoeNaming& moe_naming() const {
    LW_CHECK(!n_.moe.empty(), "model architecture '" << c_.architecture << "' has no names for mixture-of-experts layers");
    if (!ld_.random())
      for (const MoeNaming& m : n_.moe)
        if (ld_.has(hf(m.prefix + "gate.weight"))) return m;
    return n_.moe.back();
  }

  // Every rank holds every expert's share of the expert width; the router is whole on each.
  void moe_mlp(const BlockVariant& block, LayerWeights& w) {
    const int64_t h = c_.hidden, e = c_.experts, i = c_.moe_intermediate, li = local_.moe_intermediate;
    if (c_.gguf) {
      // GGUF stacks each matrix of every expert; each expert is read as a matrix of its own.
      w.router = projection(ld_.get(gguf(n_.gguf_router), {e, h}));
      const std::string stacked[3] = {gguf(n_.gguf_experts_gate), gguf(n_.gguf_experts_up), gguf(n_.gguf_experts_down)};
      experts([&](int matrix, int64_t x) { return WeightLoader::expert_name(stacked[matrix], x); }, w);
      if (block.mlp == MlpVariant::moe_shared_expert) shared_expert(w);
      return;
    }
    const MoeNaming& m = moe_naming();
    w.router = projection(ld_.get(hf(m.prefix + "gate.weight"), {e, h}));
    const std::string stacked_gate_up = hf(m.prefix + m.stacked_gate_up);
    // Random quantised weights are drawn per expert, as a checkpoint of one matrix per expert
    // stores them, so that they stay quantised.
    if (ld_.has(stacked_gate_up) && !ld_.random_quantized()) {
      if (!parts_.whole()) {
        const Tensor gate = ld_.get(stacked_gate_up, {e, 2 * i, h}, parts_.share(1, i, 0));
        const Tensor up = ld_.get(stacked_gate_up, {e, 2 * i, h}, parts_.share(1, i, i));
        w.experts_gate_up.stacked = ld_.fuse({gate, up}, {e, 2 * li, h}, 1);
      } else {
        w.experts_gate_up.stacked = ld_.get(stacked_gate_up, {e, 2 * i, h});
      }
      w.experts_down.stacked = ld_.get(hf(m.prefix + m.stacked_down), {e, h, i}, parts_.share(2, i));
    } else {
      experts(
          [&](int matrix, int64_t x) {
            const std::string& which = matrix == 0 ? m.expert_gate : matrix == 1 ? m.expert_up : m.expert_down;
            return hf(m.prefix + "experts." + std::to_string(x) + "." + which);
          },
          w);
    }
    if (block.mlp == MlpVariant::moe_shared_expert) shared_expert(w);
  }

  // Qwen2-MoE's shared expert and its gate ([1, hidden]; a vector [hidden] in GGUF).
  void shared_expert(LayerWeights& w) {
    const int64_t h = c_.hidden, sw = c_.shared_intermediate, ls = local_.shared_intermediate;
    auto name = [&](const std::string& hf_name, const std::string& gguf_name) { return c_.gguf ? gguf(gguf_name) : hf(hf_name); };
    const Tensor gate = ld_.get(name(n_.shared_gate, n_.gguf_shared_gate), {sw, h}, parts_.share(0, sw));
    const Tensor up = ld_.get(name(n_.shared_up, n_.gguf_shared_up), {sw, h}, parts_.share(0, sw));
    w.shared_gate_up = projection(ld_.fuse({gate, up}, {2 * ls, h}));
    w.shared_down = projection(ld_.get(name(n_.shared_down, n_.gguf_shared_down), {h, sw}, parts_.share(1, sw)));
    const Tensor expert_gate = c_.gguf ? ld_.get(gguf(n_.gguf_shared_expert_gate), {h}) : ld_.get(hf(n_.shared_expert_gate), {1, h});
    w.shared_gate = projection(expert_gate.defined() ? expert_gate.view({1, h}) : expert_gate);
  }

  // Experts as one matrix per expert (`name_of(matrix, expert)`: matrix 0 gate, 1 up, 2 down):
  // kept as each expert's Weight where any is quantised (the loader keeps them so), else
  // stacked into the model dtype for the grouped GEMM.
  void experts(const std::function<std::string(int, int64_t)>& name_of, LayerWeights& w) {
    const int64_t h = c_.hidden, e = c_.experts, i = c_.moe_intermediate, li = local_.moe_intermediate;
    std::vector<ops::Weight> gate, up, down;
    bool dense = true;
    for (int64_t x = 0; x < e; ++x) {
      gate.push_back(ld_.get_weight(name_of(0, x), {i, h}, parts_.share(0, i)));
      up.push_back(ld_.get_weight(name_of(1, x), {i, h}, parts_.share(0, i)));
      // The dry run counts what stacking each expert's gate and up keeps (or expands): the
      // last two weights read.
      if (ld_.dry()) ld_.fuse_weights({gate.back(), up.back()});
      down.push_back(ld_.get_weight(name_of(2, x), {h, i}, parts_.share(1, i)));
      if (!ld_.dry())
        for (const ops::Weight* p : {&gate.back(), &up.back(), &down.back()})
          dense = dense && p->format() == ops::WeightFormat::dense;
    }
    if (ld_.dry()) return;
    if (dense) {
      std::vector<Tensor> gate_up, downs;
      for (int64_t x = 0; x < e; ++x) {
        gate_up.push_back(gate[static_cast<size_t>(x)].data());
        gate_up.push_back(up[static_cast<size_t>(x)].data());
        downs.push_back(down[static_cast<size_t>(x)].data());
      }
      w.experts_gate_up.stacked = ld_.fuse(gate_up, {e, 2 * li, h});
      w.experts_down.stacked = ld_.fuse(downs, {e, h, li}, 0);
      return;
    }
    std::vector<ops::Weight> gate_up;
    for (int64_t x = 0; x < e; ++x)
      gate_up.push_back(ld_.fuse_weights({gate[static_cast<size_t>(x)], up[static_cast<size_t>(x)]}));
    w.experts_gate_up.each = ops::ExpertWeights(ld_.context(), std::move(gate_up));
    w.experts_down.each = ops::ExpertWeights(ld_.context(), std::move(down));
  }

  WeightLoader& ld_;
  const TensorNames& n_;
  const ModelConfig &c_, &local_;
  const ShardParts& parts_;
  int rank_;
  int64_t l_ = 0;
};

}  // namespace

ModelWeights load_weights(WeightLoader& ld, const Architecture& arch, const ModelConfig& c, const ModelConfig& local,
                          const Shard& shard) {
  const TensorNames& n = arch.names;
  const bool g = c.gguf;
  const int r = shard.rank;
  const int64_t h = c.hidden;
  ModelWeights w;
  const int64_t vs = local.vocab, v0 = std::min(c.vocab, vs * r), v1 = std::min(c.vocab, vs * (r + 1));
  w.embed = ld.get_padded(g ? n.embed.gguf : n.embed.hf, {c.vocab, h}, v0, v1, vs);
  w.final_norm = ld.get(g ? n.final_norm.gguf : n.final_norm.hf, {h});
  if (c.tie_embeddings) w.lm_head = projection(w.embed);
  else w.lm_head = ld.get_padded_weight(g ? n.lm_head.gguf : n.lm_head.hf, {c.vocab, h}, v0, v1, vs);

  const ShardParts parts(c, local, shard);
  LayerReader reader(ld, n, c, local, parts, r);
  w.layers.reserve(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) w.layers.push_back(reader.read(l));
  return w;
}

}  // namespace lw::model
