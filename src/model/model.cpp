#include "model/model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <cstdio>
#include <string>

#include "core/stream.h"
#include "parallel/communicator.h"
#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "weights/load.h"

namespace lw::model {

namespace {

// Resolves and shape-checks checkpoint tensors; in the dry run (before any device work) it
// only adds up the bytes the weights will take.
class Loader {
 public:
  // total: the bytes the dry run counted; with it (and a terminal on stderr) the real run
  // draws a progress bar.
  // ckpt null: random weights from `seed` (benchmarks of named shapes).
  Loader(Context& ctx, const weights::Checkpoint* ckpt, DType dtype, bool dry, size_t total = 0, uint64_t seed = 0)
      : ctx_(ctx), ckpt_(ckpt), dtype_(dtype), dry_(dry), total_(total), bar_(total > 0 && isatty(STDERR_FILENO)),
        seed_(seed) {}
  ~Loader() {
    if (bar_ && drawn_) std::fprintf(stderr, "\n");
  }

  // Random weights take the transformers-5 names: mlp.*, experts stacked.
  bool has(const std::string& name) const {
    if (!ckpt_) return name.find("block_sparse_moe") == std::string::npos && name.find(".experts.0.") == std::string::npos;
    return ckpt_->find(name) != nullptr;
  }

  // The tensor `name` of the whole model's `shape`, or only rows/columns [start, end) of
  // dimension part.dim (a rank's shard: the whole tensor is read, sliced and freed).
  struct Part {
    int dim = -1;
    int64_t start = 0, end = 0;
  };
  Tensor get(const std::string& name, const std::vector<int64_t>& shape, Part part) {
    if (part.dim < 0) return get(name, shape);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const size_t before = bytes_;
    Tensor whole = get(name, shape);
    bytes_ = before + static_cast<size_t>(n / shape[static_cast<size_t>(part.dim)] * (part.end - part.start)) * dtype_size(dtype_);
    if (dry_) return Tensor();
    return ops::contiguous(ctx_, whole.slice(part.dim, part.start, part.end));
  }
  // Rows [start, end) of a [rows, cols] tensor, zero-padded to `padded` rows (a rank's share
  // of the vocabulary).
  Tensor get_padded(const std::string& name, const std::vector<int64_t>& shape, int64_t start, int64_t end, int64_t padded) {
    const size_t before = bytes_;
    Tensor part = get(name, shape, {0, start, end});
    bytes_ = before + static_cast<size_t>(padded * shape[1]) * dtype_size(dtype_);
    if (dry_ || end - start == padded) return part;
    Tensor t = ctx_.empty({padded, shape[1]}, dtype_);
    LW_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), ctx_.stream().get()));
    if (end > start) ops::copy(ctx_, part, t.slice(0, 0, end - start));
    return t;
  }

  Tensor get(const std::string& name, const std::vector<int64_t>& shape) {
    if (!ckpt_) return random(name, shape);
    const weights::TensorRecord& rec = ckpt_->get(name);
    LW_CHECK(rec.shape == shape, "tensor '" << name << "' in " << ckpt_->description() << " has shape " << shape_str(rec.shape)
                                            << "; the model config needs " << shape_str(shape));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool integer = rec.dtype == weights::FileDType::i8 || rec.dtype == weights::FileDType::i32 ||
                         rec.dtype == weights::FileDType::i64;
    LW_CHECK(!integer && rec.dtype != weights::FileDType::unsupported,
             "tensor '" << name << "' in " << ckpt_->description() << " has type " << rec.type_name
                        << "; weights must be F32, F16, BF16, Q8_0, Q4_0 or Q4_1");
    bytes_ += static_cast<size_t>(n) * dtype_size(dtype_);
    if (dry_) return Tensor();
    Tensor t = weights::load_tensor(ctx_, rec, dtype_);
    draw();
    return t;
  }
  Tensor get_optional(const std::string& name, const std::vector<int64_t>& shape) {
    return has(name) ? get(name, shape) : Tensor();
  }
  // Parts concatenated along dimension `dim`, viewed as `shape`.
  Tensor fuse(const std::vector<Tensor>& parts, const std::vector<int64_t>& shape, int dim = 0) {
    if (dry_) return Tensor();
    return ops::concat(ctx_, parts, dim).view(shape);
  }
  size_t bytes() const { return bytes_; }

 private:
  // Norm weights near 1, matrices within +-1/sqrt(fan-in): activations keep their scale
  // through the layers, as in a trained model.
  Tensor random(const std::string& name, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes_ += static_cast<size_t>(n) * dtype_size(dtype_);
    if (dry_) return Tensor();
    Tensor t = ctx_.empty(shape, dtype_);
    const bool norm = name.find("norm") != std::string::npos;
    const float bound = norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(shape.back()));
    ops::fill_uniform(ctx_, t, norm ? 1.0f - bound : -bound, norm ? 1.0f + bound : bound,
                      seed_ ^ std::hash<std::string>{}(name));
    draw();
    return t;
  }

  void draw() {
    if (!bar_) return;
    const int width = 40, filled = static_cast<int>(width * static_cast<double>(bytes_) / static_cast<double>(total_));
    std::fprintf(stderr, "\rloading weights [%s%s] %5.1f / %.1f GiB", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<double>(bytes_) / (1 << 30),
                 static_cast<double>(total_) / (1 << 30));
    drawn_ = true;
  }

  Context& ctx_;
  const weights::Checkpoint* ckpt_;
  DType dtype_;
  bool dry_;
  size_t total_;
  bool bar_;
  uint64_t seed_;
  bool drawn_ = false;
  size_t bytes_ = 0;
};

std::string hf_layer(int64_t l, const std::string& rest) { return "model.layers." + std::to_string(l) + "." + rest; }
std::string gguf_layer(int64_t l, const std::string& rest) { return "blk." + std::to_string(l) + "." + rest; }

// Every tensor of the model (or of one rank's shard: `local` has its shapes), in the order
// and layout the forward pass uses.
void load_all(Loader& ld, const ModelConfig& c, const ModelConfig& local, const Shard& shard, Tensor& embed,
              Tensor& final_norm, Tensor& lm_head, std::vector<LayerWeights>& layers) {
  using Part = Loader::Part;
  const bool g = c.gguf;
  const int r = shard.rank;
  const int64_t h = c.hidden, d = c.head_dim, qd = c.heads * d, kvd = c.kv_heads * d;
  // This rank's share of a dimension of `whole` elements split `shard.size` ways.
  auto share = [&](int dim, int64_t whole, int64_t offset = 0) {
    const int64_t n = whole / shard.size;
    return Part{dim, offset + n * r, offset + n * (r + 1)};
  };
  // Its KV heads: a share, or with fewer KV heads than ranks the one its query heads read.
  const int64_t kv_first = c.kv_heads % shard.size == 0 ? local.kv_heads * r : local.heads * r / (c.heads / c.kv_heads);
  const Part kv_rows = shard.size == 1 ? Part{} : Part{0, kv_first * d, (kv_first + local.kv_heads) * d};
  const Part q_rows = shard.size == 1 ? Part{} : share(0, qd);

  const int64_t vs = local.vocab, v0 = std::min(c.vocab, vs * r), v1 = std::min(c.vocab, vs * (r + 1));
  embed = ld.get_padded(g ? "token_embd.weight" : "model.embed_tokens.weight", {c.vocab, h}, v0, v1, vs);
  final_norm = ld.get(g ? "output_norm.weight" : "model.norm.weight", {h});
  if (c.tie_embeddings) lm_head = embed;
  else lm_head = ld.get_padded(g ? "output.weight" : "lm_head.weight", {c.vocab, h}, v0, v1, vs);

  layers.resize(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    LayerWeights& w = layers[static_cast<size_t>(l)];
    auto name = [&](const char* hf, const char* gg) { return g ? gguf_layer(l, gg) : hf_layer(l, hf); };
    w.attn_norm = ld.get(name("input_layernorm.weight", "attn_norm.weight"), {h});
    w.mlp_norm = ld.get(name("post_attention_layernorm.weight", "ffn_norm.weight"), {h});
    const Tensor q = ld.get(name("self_attn.q_proj.weight", "attn_q.weight"), {qd, h}, q_rows);
    const Tensor k = ld.get(name("self_attn.k_proj.weight", "attn_k.weight"), {kvd, h}, kv_rows);
    const Tensor v = ld.get(name("self_attn.v_proj.weight", "attn_v.weight"), {kvd, h}, kv_rows);
    const int64_t lqd = local.heads * d, lkvd = local.kv_heads * d;
    w.qkv = ld.fuse({q, k, v}, {lqd + 2 * lkvd, h});
    if (c.qkv_bias) {
      const Tensor qb = ld.get(name("self_attn.q_proj.bias", "attn_q.bias"), {qd}, q_rows);
      const Tensor kb = ld.get(name("self_attn.k_proj.bias", "attn_k.bias"), {kvd}, kv_rows);
      const Tensor vb = ld.get(name("self_attn.v_proj.bias", "attn_v.bias"), {kvd}, kv_rows);
      w.qkv_bias = ld.fuse({qb, kb, vb}, {lqd + 2 * lkvd});
    }
    if (c.qk_norm) {
      w.q_norm = ld.get(name("self_attn.q_norm.weight", "attn_q_norm.weight"), {d});
      w.k_norm = ld.get(name("self_attn.k_norm.weight", "attn_k_norm.weight"), {d});
    }
    w.o = ld.get(name("self_attn.o_proj.weight", "attn_output.weight"), {h, qd}, shard.size == 1 ? Part{} : share(1, qd));
    // The bias of a row-parallel projection is added once, by rank 0, before the sum.
    if (c.o_bias && r == 0) w.o_bias = ld.get(name("self_attn.o_proj.bias", "attn_output.bias"), {h});

    if (!c.moe_layer[static_cast<size_t>(l)]) {
      const int64_t i = c.intermediate, li = local.intermediate;
      const bool split = shard.size > 1;
      const Tensor gate = ld.get(name("mlp.gate_proj.weight", "ffn_gate.weight"), {i, h}, split ? share(0, i) : Part{});
      const Tensor up = ld.get(name("mlp.up_proj.weight", "ffn_up.weight"), {i, h}, split ? share(0, i) : Part{});
      w.gate_up = ld.fuse({gate, up}, {2 * li, h});
      w.down = ld.get(name("mlp.down_proj.weight", "ffn_down.weight"), {h, i}, split ? share(1, i) : Part{});
      continue;
    }
    // Mixture of experts: Mixtral's block_sparse_moe names or the mlp names of Qwen-MoE and
    // of transformers 5, per-expert matrices or the experts stacked in one tensor. Every rank
    // holds every expert's share of the expert width; the router is whole on each.
    const int64_t e = c.experts, i = c.moe_intermediate, li = local.moe_intermediate;
    const bool split = shard.size > 1;
    const std::string moe = ld.has(hf_layer(l, "block_sparse_moe.gate.weight")) ? "block_sparse_moe." : "mlp.";
    w.router = ld.get(hf_layer(l, moe + "gate.weight"), {e, h});
    if (ld.has(hf_layer(l, moe + "experts.gate_up_proj"))) {
      const std::string gu = hf_layer(l, moe + "experts.gate_up_proj");
      if (split) {
        const Tensor gate = ld.get(gu, {e, 2 * i, h}, share(1, i));
        const Tensor up = ld.get(gu, {e, 2 * i, h}, share(1, i, i));
        w.experts_gate_up = ld.fuse({gate, up}, {e, 2 * li, h}, 1);
      } else {
        w.experts_gate_up = ld.get(gu, {e, 2 * i, h});
      }
      w.experts_down = ld.get(hf_layer(l, moe + "experts.down_proj"), {e, h, i}, split ? share(2, i) : Part{});
    } else {
      const bool mixtral_names = ld.has(hf_layer(l, moe + "experts.0.w1.weight"));
      std::vector<Tensor> gate_up, down;
      for (int64_t x = 0; x < e; ++x) {
        const std::string p = moe + "experts." + std::to_string(x) + ".";
        const Part rows = split ? share(0, i) : Part{}, cols = split ? share(1, i) : Part{};
        gate_up.push_back(ld.get(hf_layer(l, p + (mixtral_names ? "w1.weight" : "gate_proj.weight")), {i, h}, rows));
        gate_up.push_back(ld.get(hf_layer(l, p + (mixtral_names ? "w3.weight" : "up_proj.weight")), {i, h}, rows));
        down.push_back(ld.get(hf_layer(l, p + (mixtral_names ? "w2.weight" : "down_proj.weight")), {h, i}, cols));
      }
      w.experts_gate_up = ld.fuse(gate_up, {e, 2 * li, h});
      w.experts_down = ld.fuse(down, {e, h, li}, 0);
    }
    if (c.shared_intermediate > 0) {
      const int64_t sw = c.shared_intermediate, ls = local.shared_intermediate;
      const Part rows = split ? share(0, sw) : Part{}, cols = split ? share(1, sw) : Part{};
      const Tensor gate = ld.get(hf_layer(l, "mlp.shared_expert.gate_proj.weight"), {sw, h}, rows);
      const Tensor up = ld.get(hf_layer(l, "mlp.shared_expert.up_proj.weight"), {sw, h}, rows);
      w.shared_gate_up = ld.fuse({gate, up}, {2 * ls, h});
      w.shared_down = ld.get(hf_layer(l, "mlp.shared_expert.down_proj.weight"), {h, sw}, cols);
      w.shared_gate = ld.get(hf_layer(l, "mlp.shared_expert_gate.weight"), {1, h});
    }
  }
}

template <class T>
Tensor host_vector(const std::vector<T>& v) {
  Tensor t = Tensor::empty_host({static_cast<int64_t>(v.size())}, dtype_of<T>);
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}

}  // namespace

namespace {

// Where each token of a batch goes, on the host and checked: ids, positions and cache slots,
// the sequences' block tables and lengths, and the rows whose logits are wanted.
struct HostLayout {
  std::vector<int32_t> ids, rows, query_lens, context_lens, tables;  // tables: [sequences, max_blocks]
  std::vector<int64_t> positions, slots;
  size_t max_blocks = 1;
  int64_t tokens = 0;

  HostLayout(const KvCache& cache, const std::vector<SequenceChunk>& batch, int64_t vocab) {
    const int bs = cache.block_size();
    for (const SequenceChunk& c : batch) max_blocks = std::max(max_blocks, c.blocks.size());
    tables.assign(batch.size() * max_blocks, 0);
    for (size_t s = 0; s < batch.size(); ++s) {
      const SequenceChunk& c = batch[s];
      const int64_t n = static_cast<int64_t>(c.tokens.size()), end = c.start + n;
      LW_CHECK(n > 0 && c.start >= 0, "forward: sequence " << s << " of the batch has " << n << " tokens at " << c.start);
      LW_CHECK(KvCache::blocks_for(end, bs) <= static_cast<int64_t>(c.blocks.size()),
               "forward: sequence " << s << " reaches position " << end - 1 << " but its block table holds "
                                    << c.blocks.size() << " blocks of " << bs);
      for (size_t b = 0; b < c.blocks.size(); ++b) {
        LW_CHECK(c.blocks[b] >= 0 && c.blocks[b] < cache.num_blocks(),
                 "forward: sequence " << s << " names block " << c.blocks[b] << " of a cache of " << cache.num_blocks());
        tables[s * max_blocks + b] = c.blocks[b];
      }
      for (int64_t j = 0; j < n; ++j) {
        const int64_t p = c.start + j;
        const int32_t id = c.tokens[static_cast<size_t>(j)];
        LW_CHECK(id >= 0 && id < vocab, "forward: token " << id << " of sequence " << s << " is outside the vocabulary of " << vocab);
        ids.push_back(id);
        positions.push_back(p);
        slots.push_back(static_cast<int64_t>(c.blocks[static_cast<size_t>(p / bs)]) * bs + p % bs);
        if (c.logits == SequenceChunk::Logits::all || (c.logits == SequenceChunk::Logits::last && j == n - 1))
          rows.push_back(static_cast<int32_t>(tokens + j));
      }
      query_lens.push_back(static_cast<int32_t>(n));
      context_lens.push_back(static_cast<int32_t>(end));
      tokens += n;
    }
  }
};

}  // namespace

// The device side of a batch, as the layers read it.
struct Model::BatchLayout {
  Tensor ids, positions, slots, block_tables, logit_rows;
  ops::PrefillPlan attention;
  int64_t tokens = 0, logits = 0;

  BatchLayout() = default;
  BatchLayout(Context& ctx, const HostLayout& h, size_t sequences) {
    ids = ctx.to_device(host_vector(h.ids));
    positions = ctx.to_device(host_vector(h.positions));
    slots = ctx.to_device(host_vector(h.slots));
    block_tables = ctx.to_device(host_vector(h.tables)).view({static_cast<int64_t>(sequences), static_cast<int64_t>(h.max_blocks)});
    tokens = h.tokens;
    logits = static_cast<int64_t>(h.rows.size());
    if (logits > 0) logit_rows = ctx.to_device(host_vector(h.rows));
    attention = ops::plan_prefill(ctx, h.query_lens, h.context_lens);
  }
};

// Decode steps replayed from graphs (CUDA or HIP), one per batch size (padded up to a power
// of two) and context bucket (the longest context padded up to a power of two, at least 256;
// attention's launch is sized by it). The step that first meets a bucket runs eagerly (the
// GEMM path choice and the allocator's first uses happen there) and is then captured; later
// steps of the bucket copy their inputs into the graph's buffers and replay it. Padding rows
// write no K/V (slot -1) and their logits are dropped. MoE models decode eagerly: the grouped
// expert GEMM reads the expert offsets on the host.
class Model::DecodeGraphs {
 public:
  static constexpr int64_t kMaxBatch = 256;

  static bool applies(const ModelConfig& c, const std::vector<SequenceChunk>& batch) {
    if (!Graph::graphs_supported() || c.experts > 0 || static_cast<int64_t>(batch.size()) > kMaxBatch) return false;
    for (const SequenceChunk& s : batch)
      if (s.tokens.size() != 1 || s.logits != SequenceChunk::Logits::last) return false;
    return true;
  }

  template <class Compute>
  Tensor run(Context& ctx, const KvCache& cache, const HostLayout& h, int64_t max_position, Compute&& compute) {
    const void* cache_id = cache.k(0).data_ptr();
    if (cache_id != cache_ || cache.num_blocks() != cache_blocks_) {
      entries_.clear();  // the graphs hold the old cache's addresses
      cache_ = cache_id;
      cache_blocks_ = cache.num_blocks();
    }
    const int64_t n = h.tokens, rows = pow2_at_least(n, 1);
    int64_t longest = 0;
    for (int32_t c : h.context_lens) longest = std::max<int64_t>(longest, c);
    const int64_t bucket = std::min(pow2_at_least(longest, 256), std::max(longest, max_position));
    const int bs = cache.block_size();
    const int64_t width = KvCache::blocks_for(bucket, bs);
    std::unique_ptr<Entry>& e = entries_[{rows, bucket}];
    const bool fresh = !e;
    if (fresh) e = make_entry(ctx, rows, bucket, width);

    // This step's inputs, padded, into the graph's buffers.
    std::vector<int32_t> ids(static_cast<size_t>(rows), 0), lens(static_cast<size_t>(rows), 1), tables(static_cast<size_t>(rows * width), 0);
    std::vector<int64_t> positions(static_cast<size_t>(rows), 0), slots(static_cast<size_t>(rows), -1);
    for (int64_t i = 0; i < n; ++i) {
      const auto r = static_cast<size_t>(i);
      ids[r] = h.ids[r];
      positions[r] = h.positions[r];
      slots[r] = h.slots[r];
      lens[r] = h.context_lens[r];
      const size_t used = std::min(h.max_blocks, static_cast<size_t>(width));
      std::copy_n(h.tables.begin() + static_cast<int64_t>(r * h.max_blocks), used, tables.begin() + static_cast<int64_t>(r) * width);
    }
    upload(ctx, ids, e->layout.ids);
    upload(ctx, positions, e->layout.positions);
    upload(ctx, slots, e->layout.slots);
    upload(ctx, tables, e->layout.block_tables);
    upload(ctx, lens, e->layout.attention.token_lens);

    if (fresh) {
      Tensor eager = compute(e->layout);
      e->graph.capture(ctx.stream(), [&] { e->logits = compute(e->layout); });
      return eager.slice(0, 0, n);
    }
    e->graph.launch(ctx.stream());
    return e->logits.slice(0, 0, n);
  }

 private:
  struct Entry {
    BatchLayout layout;
    Graph graph;
    Tensor logits;
  };

  static int64_t pow2_at_least(int64_t v, int64_t floor) {
    int64_t p = floor;
    while (p < v) p *= 2;
    return p;
  }

  template <class T>
  static void upload(Context& ctx, const std::vector<T>& v, const Tensor& dst) {
    LW_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, ctx.stream().get()));
  }

  static std::unique_ptr<Entry> make_entry(Context& ctx, int64_t rows, int64_t bucket, int64_t width) {
    auto e = std::make_unique<Entry>();
    BatchLayout& b = e->layout;
    b.ids = ctx.empty({rows}, DType::i32);
    b.positions = ctx.empty({rows}, DType::i64);
    b.slots = ctx.empty({rows}, DType::i64);
    b.block_tables = ctx.empty({rows, width}, DType::i32);
    b.tokens = b.logits = rows;
    b.attention.sequences = b.attention.tokens = rows;
    b.attention.max_context = static_cast<int>(bucket);
    b.attention.token_lens = ctx.empty({rows}, DType::i32);
    std::vector<int32_t> identity(static_cast<size_t>(rows));
    std::iota(identity.begin(), identity.end(), 0);
    b.attention.token_rows = ctx.to_device(host_vector(identity));
    return e;
  }

  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Entry>> entries_;
  const void* cache_ = nullptr;
  int64_t cache_blocks_ = 0;
};

ModelConfig shard_config(const ModelConfig& c, int size) {
  LW_CHECK(size >= 1, "tensor parallelism over " << size << " ranks");
  ModelConfig s = c;
  if (size == 1) return s;
  auto divide = [&](int64_t v, const char* what) {
    LW_CHECK(v % size == 0, "tensor parallelism over " << size << " ranks: the model's " << what << " (" << v
                                                       << ") does not divide among them");
    return v / size;
  };
  s.heads = divide(c.heads, "attention heads");
  if (c.kv_heads % size == 0) {
    s.kv_heads = c.kv_heads / size;
  } else {
    LW_CHECK(size % c.kv_heads == 0, "tensor parallelism over " << size << " ranks: the model's " << c.kv_heads
                                                                << " KV heads neither divide among the ranks nor divide them");
    s.kv_heads = 1;  // each rank keeps the KV head its query heads read
  }
  const bool dense = std::find(c.moe_layer.begin(), c.moe_layer.end(), false) != c.moe_layer.end();
  if (dense) s.intermediate = divide(c.intermediate, "MLP width (intermediate_size)");
  if (c.experts > 0) s.moe_intermediate = divide(c.moe_intermediate, "expert width (moe_intermediate_size)");
  if (c.shared_intermediate > 0) s.shared_intermediate = divide(c.shared_intermediate, "shared expert width");
  s.vocab = (c.vocab + size - 1) / size;
  return s;
}

Model::Model(Context& ctx, const ModelConfig& config, DType dtype, const Shard& shard)
    : config_(config), local_(model::shard_config(config, shard.size)), shard_(shard), dtype_(dtype) {
  rope_.emplace(ctx, config.rope);
  // Opt-in until a captured graph's temporaries live in a pool of their own: today they
  // return to the caching allocator, and a buffer allocated later (another graph's inputs)
  // may share an address with one a replay writes.
  const char* graphs = std::getenv("LW_CUDA_GRAPHS");
  decode_graphs_ = graphs && std::string(graphs) == "1";
}

void Model::set_decode_graphs(bool on) {
  decode_graphs_ = on;
  if (!on) graphs_.reset();
}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(Context& ctx, const weights::Checkpoint& ckpt, const ModelConfig& config, DType dtype,
                                   const Shard& shard) {
  return build(ctx, &ckpt, config, dtype, 0, shard);
}

std::unique_ptr<Model> Model::random(Context& ctx, const ModelConfig& config, DType dtype, uint64_t seed, const Shard& shard) {
  return build(ctx, nullptr, config, dtype, seed, shard);
}

std::unique_ptr<Model> Model::build(Context& ctx, const weights::Checkpoint* ckpt, const ModelConfig& config, DType dtype,
                                    uint64_t seed, const Shard& shard) {
  LW_CHECK(is_float(dtype), "model dtype " << dtype_name(dtype) << " must be f32, f16 or bf16");
  LW_CHECK(shard.size >= 1 && shard.rank >= 0 && shard.rank < shard.size && (shard.size == 1 || shard.comm),
           "model shard: rank " << shard.rank << " of " << shard.size << (shard.comm ? "" : " without a communicator"));
  const ModelConfig local = model::shard_config(config, shard.size);
  std::vector<LayerWeights> layers;
  Tensor embed, final_norm, lm_head;
  Loader dry(ctx, ckpt, dtype, true);
  load_all(dry, config, local, shard, embed, final_norm, lm_head, layers);
  size_t free_bytes = 0, total_bytes = 0;
  LW_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::string what = ckpt ? ckpt->description() : "the random " + config.summary() + " model";
  if (shard.size > 1) what = "rank " + std::to_string(shard.rank) + "'s shard of " + what;
  LW_CHECK(dry.bytes() < free_bytes, "the weights of " << what << " take " << dry.bytes() / (1 << 20) << " MiB in "
                                                       << dtype_name(dtype) << " but device " << ctx.device() << " has "
                                                       << free_bytes / (1 << 20) << " MiB free");

  std::unique_ptr<Model> m(new Model(ctx, config, dtype, shard));
  Loader ld(ctx, ckpt, dtype, false, shard.rank == 0 ? dry.bytes() : 0, seed);
  load_all(ld, config, local, shard, m->embed_, m->final_norm_, m->lm_head_, m->layers_);
  m->weight_bytes_ = ld.bytes();
  ctx.synchronize();
  return m;
}

void Model::reduce(Context& ctx, const Tensor& x) {
  if (shard_.size > 1) shard_.comm->all_reduce_sum(ctx, x);
}

void Model::attention(Context& ctx, KvCache& cache, int64_t layer, const Tensor& x, const BatchLayout& b,
                      const Tensor& out) {
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const int64_t t = x.size(0), d = config_.head_dim, nq = local_.heads, nkv = local_.kv_heads;
  Tensor qkv = ctx.empty({t, (nq + 2 * nkv) * d}, dtype_);
  ops::linear(ctx, x, w.qkv, w.qkv_bias, qkv);
  Tensor q = qkv.slice(1, 0, nq * d).unflatten(1, {nq, d});
  Tensor k = qkv.slice(1, nq * d, (nq + nkv) * d).unflatten(1, {nkv, d});
  const Tensor v = qkv.slice(1, (nq + nkv) * d, (nq + 2 * nkv) * d).unflatten(1, {nkv, d});
  q = ops::contiguous(ctx, q);
  if (config_.qk_norm) {
    const float eps = static_cast<float>(config_.rms_eps);
    Tensor qn = ctx.empty(q.shape(), dtype_), kn = ctx.empty({t, nkv, d}, dtype_);
    ops::rms_norm(ctx, q, w.q_norm, eps, qn);
    ops::rms_norm(ctx, ops::contiguous(ctx, k), w.k_norm, eps, kn);
    q = qn;
    k = kn;
  }
  rope_->apply(ctx, q, k, b.positions);
  ops::kv_write(ctx, k, v, b.slots, cache.k(layer), cache.v(layer), false);  // slots checked in BatchLayout
  Tensor attn = ctx.empty({t, nq, d}, dtype_);
  ops::prefill_attention(ctx, q, cache.k(layer), cache.v(layer), b.block_tables, b.attention,
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), attn);
  ops::linear(ctx, attn.view({t, nq * d}), w.o, w.o_bias, out);
}

void Model::dense_mlp(Context& ctx, const Tensor& gate_up, const Tensor& down, const Tensor& x, const Tensor& out) {
  const int64_t t = x.size(0), i = down.size(1);
  Tensor gu = ctx.empty({t, 2 * i}, dtype_), act = ctx.empty({t, i}, dtype_);
  ops::linear(ctx, x, gate_up, Tensor(), gu);
  ops::act_mul(ctx, ops::Activation::silu, gu, act);
  ops::linear(ctx, act, down, Tensor(), out);
}

void Model::moe_mlp(Context& ctx, const LayerWeights& w, const Tensor& x, const Tensor& out) {
  const int64_t t = x.size(0), h = config_.hidden, i = local_.moe_intermediate, e = config_.experts;
  const int k = config_.experts_per_token;
  Tensor logits = ctx.empty({t, e}, dtype_);
  // Every rank routes the same tokens: one fixed GEMM kernel (not a per-rank timed choice), so
  // their roundings, and so their expert choices, agree.
  ops::linear(ctx, x, w.router, Tensor(), logits, shard_.size > 1 ? ops::GemmPath::tiled : ops::GemmPath::automatic);
  ops::MoeRouting routing;
  routing.k = k;
  routing.renormalize = config_.norm_topk_prob;
  Tensor weights = ctx.empty({t, k}, DType::f32), ids = ctx.empty({t, k}, DType::i32);
  ops::moe_route(ctx, logits, routing, weights, ids);
  const ops::MoePermutation perm = ops::moe_permutation(ctx, ids, static_cast<int>(e));
  Tensor xs = ctx.empty({t * k, h}, dtype_), gu = ctx.empty({t * k, 2 * i}, dtype_);
  Tensor act = ctx.empty({t * k, i}, dtype_), eo = ctx.empty({t * k, h}, dtype_);
  ops::moe_gather(ctx, x, perm, xs);
  ops::grouped_linear(ctx, xs, w.experts_gate_up, perm.offsets, gu);
  ops::act_mul(ctx, ops::Activation::silu, gu, act);
  ops::grouped_linear(ctx, act, w.experts_down, perm.offsets, eo);
  ops::moe_combine(ctx, eo, weights, perm, out);
  if (w.shared_gate_up.defined()) {
    Tensor shared = ctx.empty({t, h}, dtype_), gate = ctx.empty({t, 1}, dtype_);
    dense_mlp(ctx, w.shared_gate_up, w.shared_down, x, shared);
    ops::linear(ctx, x, w.shared_gate, Tensor(), gate, shard_.size > 1 ? ops::GemmPath::tiled : ops::GemmPath::automatic);
    ops::sigmoid_gated_add(ctx, out, gate, shared);
  }
}

Tensor Model::forward(Context& ctx, KvCache& cache, const std::vector<SequenceChunk>& batch) {
  LW_CHECK(!batch.empty(), "forward: an empty batch");
  const HostLayout host(cache, batch, config_.vocab);
  if (decode_graphs_ && DecodeGraphs::applies(config_, batch)) {
    if (!graphs_) graphs_ = std::make_unique<DecodeGraphs>();
    return graphs_->run(ctx, cache, host, config_.max_position,
                        [&](const BatchLayout& b) { return compute(ctx, cache, b); });
  }
  return compute(ctx, cache, BatchLayout(ctx, host, batch.size()));
}

Tensor Model::compute(Context& ctx, KvCache& cache, const BatchLayout& b) {
  const int64_t t = b.tokens, h = config_.hidden;
  Tensor residual = ctx.empty({t, h}, dtype_), normed = ctx.empty({t, h}, dtype_), delta = ctx.empty({t, h}, dtype_);
  const float eps = static_cast<float>(config_.rms_eps);
  if (shard_.size == 1) {
    ops::embedding(ctx, embed_, b.ids, residual, false);  // ids checked in BatchLayout
  } else {
    ops::embedding_shard(ctx, embed_, local_.vocab * shard_.rank, b.ids, residual);
    reduce(ctx, residual);
  }
  for (int64_t l = 0; l < config_.layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    if (l == 0) ops::rms_norm(ctx, residual, w.attn_norm, eps, normed);
    else ops::add_rms_norm(ctx, delta, residual, w.attn_norm, eps, normed);
    attention(ctx, cache, l, normed, b, delta);
    reduce(ctx, delta);
    ops::add_rms_norm(ctx, delta, residual, w.mlp_norm, eps, normed);
    if (w.router.defined()) moe_mlp(ctx, w, normed, delta);
    else dense_mlp(ctx, w.gate_up, w.down, normed, delta);
    reduce(ctx, delta);
  }
  if (b.logits == 0) return Tensor();
  ops::add_rms_norm(ctx, delta, residual, final_norm_, eps, normed);
  // The wanted rows, gathered (an embedding lookup into the normalised hidden states).
  Tensor rows = normed;
  if (b.logits != t) {
    rows = ctx.empty({b.logits, h}, dtype_);
    ops::embedding(ctx, normed, b.logit_rows, rows, false);
  }
  if (shard_.size == 1) {
    Tensor logits = ctx.empty({b.logits, config_.vocab}, dtype_);
    ops::linear(ctx, rows, lm_head_, Tensor(), logits);
    return logits;
  }
  // Each rank's columns of the logits, gathered [ranks, rows, shard] and laid out as
  // [rows, vocab] (the padding of the last shard dropped).
  const int64_t n = shard_.size, vs = local_.vocab;
  Tensor part = ctx.empty({b.logits, vs}, dtype_), all = ctx.empty({n, b.logits, vs}, dtype_);
  ops::linear(ctx, rows, lm_head_, Tensor(), part);
  shard_.comm->all_gather(ctx, part, all);
  Tensor gathered = ctx.empty({b.logits, n, vs}, dtype_);
  ops::copy(ctx, all.transpose(0, 1), gathered);
  if (n * vs == config_.vocab) return gathered.view({b.logits, config_.vocab});
  Tensor logits = ctx.empty({b.logits, config_.vocab}, dtype_);
  ops::copy(ctx, gathered.view({b.logits, n * vs}).slice(1, 0, config_.vocab), logits);
  return logits;
}

}  // namespace lw::model
