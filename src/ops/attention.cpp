#include "ops/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention_decode.h"
#include "kernels/attention_decode_matrix.h"
#include "kernels/attention_prefill.h"
#include "kernels/attention_prefill_hopper.h"
#include "kernels/kv_cache.h"
#include "gpu/vector.h"
#include "ops/check.h"
#include "ops/launch_counters.h"

namespace lw::ops {

const char* kv_cache_format_name(KvCacheFormat format) {
  switch (format) {
    case KvCacheFormat::model: return "auto";
    case KvCacheFormat::fp8_e4m3: return "fp8_e4m3";
    case KvCacheFormat::int8: return "int8";
  }
  return "?";
}

KvCacheFormat kv_cache_format_from_code(int code) {
  LW_CHECK(code >= 0 && code <= static_cast<int>(KvCacheFormat::int8),
           "KV cache format code " << code << " is not one of 0 (auto), 1 (fp8_e4m3), 2 (int8)");
  return static_cast<KvCacheFormat>(code);
}

KvCacheFormat parse_kv_cache_format(const std::string& name) {
  if (name == "auto" || name == "model") return KvCacheFormat::model;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheFormat::fp8_e4m3;
  if (name == "int8") return KvCacheFormat::int8;
  LW_FAIL("KV cache dtype '" << name << "' is not one of auto, fp8 (fp8_e4m3), int8");
}

size_t kv_cache_element_bytes(KvCacheFormat format, DType model) {
  return format == KvCacheFormat::model ? dtype_size(model) : 1;
}

namespace {

// A layer's caches: same shape [num_blocks, block_size, kv_heads, head_dim], contiguous, on the
// device; in `model` dtype or i8 codes with their scales as the format says.
void check_cache(const char* op, const PagedKv& c, DType model) {
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"k_cache", &c.k}, {"v_cache", &c.v}}) {
    check_on_device(op, name, *t);
    LW_CHECK(t->dim() == 4 && t->is_contiguous(),
             op << ": " << name << " " << t->describe() << " must be a contiguous [num_blocks, block_size, kv_heads, head_dim]");
    const DType want = c.format == KvCacheFormat::model ? model : DType::i8;
    LW_CHECK(t->dtype() == want, op << ": " << name << " " << t->describe() << " must be " << dtype_name(want)
                                    << " for a KV cache of format " << kv_cache_format_name(c.format));
  }
  check_same_shape(op, "k_cache", c.k, "v_cache", c.v);
  if (c.format == KvCacheFormat::model) {
    LW_CHECK(!c.k_scale.defined() && !c.v_scale.defined(),
             op << ": a KV cache in the model's dtype has no scales");
    return;
  }
  const int64_t kv_heads = c.k.size(2);
  const std::vector<int64_t> want = c.format == KvCacheFormat::int8
                                        ? std::vector<int64_t>{c.k.size(0), c.k.size(1), kv_heads}
                                        : std::vector<int64_t>{kv_heads};
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"k_scale", &c.k_scale}, {"v_scale", &c.v_scale}}) {
    check_on_device(op, name, *t);
    LW_CHECK(t->dtype() == DType::f32 && t->shape() == want && t->is_contiguous(),
             op << ": " << name << " " << t->describe() << " must be a contiguous f32 " << shape_str(want)
                << " for a KV cache of format " << kv_cache_format_name(c.format));
  }
  // The kernels read 16-byte runs of codes.
  LW_CHECK(c.k.size(3) % 16 == 0 && gpu::aligned_to(16, c.k.data_ptr(), c.v.data_ptr()),
           op << ": an 8-bit KV cache needs head_dim " << c.k.size(3) << " a multiple of 16 and 16-byte aligned caches");
}

// The cache's element type C (kernels/kv_cache.h) and its scales, for f.
template <class F>
void dispatch_cache(const PagedKv& c, F&& f) {
  const int64_t kv_heads = c.k.size(2);
  switch (c.format) {
    case KvCacheFormat::model: f.template operator()<void>(kernels::KvScales{}); break;
    case KvCacheFormat::fp8_e4m3:
      f.template operator()<uint8_t>(kernels::KvScales{c.k_scale.data<float>(), c.v_scale.data<float>(), 0});
      break;
    case KvCacheFormat::int8:
      f.template operator()<int8_t>(kernels::KvScales{c.k_scale.data<float>(), c.v_scale.data<float>(), kv_heads});
      break;
    default: LW_FAIL("KV cache format " << static_cast<int>(c.format) << " is not one of auto, fp8_e4m3, int8");
  }
}
// The cache's data as C (void: the model's dtype T).
template <class C, class T>
using CacheElem = std::conditional_t<std::is_void_v<C>, T, C>;
template <class C, class T>
const CacheElem<C, T>* cache_data(const Tensor& t) {
  return static_cast<const CacheElem<C, T>*>(t.data_ptr());
}

}  // namespace

void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache, bool check) {
  kv_write(ctx, k, v, slot_mapping, PagedKv{k_cache, v_cache}, check);
}

void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const PagedKv& cache,
              bool check) {
  check_float("kv_write", "k", k);
  check_cache("kv_write", cache, k.dtype());
  const int64_t kv_heads = cache.k.size(2), head_dim = cache.k.size(3);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}}) {
    check_on_device("kv_write", name, *t);
    check_same_dtype("kv_write", name, *t, "k", k);
    LW_CHECK(t->dim() == 3 && t->size(1) == kv_heads && t->size(2) == head_dim && t->stride(2) == 1 &&
                 t->stride(1) == head_dim,
             "kv_write: " << name << " " << t->describe() << " must be [tokens, " << kv_heads << ", " << head_dim
                          << "] with contiguous heads");
  }
  const int64_t tokens = k.size(0);
  LW_CHECK(v.size(0) == tokens, "kv_write: k and v have different token counts");
  check_slot_mapping("kv_write", slot_mapping, tokens);
  const kernels::KvWriteArgs a{tokens, static_cast<int>(kv_heads), static_cast<int>(head_dim), k.stride(0), v.stride(0),
                               cache.k.size(0) * cache.k.size(1)};
  // The flag only where it is read: without the check, no memset node per layer in a decode
  // graph (it would also end the overlap of this launch with the one before).
  Tensor flag = check ? ctx.empty({1}, DType::i64) : Tensor();
  if (check) LW_CUDA_CHECK(cudaMemsetAsync(flag.data_ptr(), 0, sizeof(int64_t), ctx.stream().get()));
  dispatch_float(k.dtype(), "kv_write", [&]<class T>() {
    dispatch_cache(cache, [&]<class C>(const kernels::KvScales& scales) {
      using E = CacheElem<C, T>;
      kernels::kv_write<T, E>(a, k.data<T>(), v.data<T>(), slot_mapping.data<int64_t>(),
                              const_cast<E*>(cache_data<C, T>(cache.k)), const_cast<E*>(cache_data<C, T>(cache.v)),
                              scales, check ? flag.data<int64_t>() : nullptr, ctx.warp_size(), ctx.stream().get());
    });
  });
  if (!check) return;
  const int64_t bad = ctx.to_host(flag).data<int64_t>()[0];
  if (bad != 0) {
    const int64_t slot = ctx.to_host(slot_mapping.slice(0, bad - 1, bad)).data<int64_t>()[0];
    LW_FAIL("kv_write: slot " << slot << " of token " << bad - 1 << " is outside the cache's " << a.num_slots
                              << " slots (token not written)");
  }
}

namespace {

// The portable SIMT kernels (kernels/attention_decode.cu): one query row per block row.
void portable_attention(Context& ctx, const char* op, const Tensor& q, const PagedKv& cache,
                        const Tensor& block_tables, const Tensor& context_lens, const Tensor& table_rows,
                        int max_context, float scale, const AttentionOptions& options, const Tensor& out) {
  const int64_t rows = q.size(0), q_heads = q.size(1), head_dim = q.size(2);
  const int64_t block_size = cache.k.size(1), kv_heads = cache.k.size(2);
  kernels::DecodeAttentionArgs a{static_cast<int>(rows),       static_cast<int>(q_heads),
                                 static_cast<int>(kv_heads),   static_cast<int>(head_dim),
                                 static_cast<int>(block_size), static_cast<int>(block_tables.size(1)),
                                 max_context,                  scale,
                                 ctx.deterministic() ? kernels::batch_invariant_partition_size() : 0};
  a.window = options.window;
  a.softcap = options.softcap;
  const int64_t ws = kernels::decode_attention_workspace(a);
  Tensor workspace = ws > 0 ? ctx.empty({ws}, DType::f32) : Tensor();
  dispatch_float(q.dtype(), op, [&]<class T>() {
    dispatch_cache(cache, [&]<class C>(const kernels::KvScales& scales) {
      kernels::decode_attention<T, CacheElem<C, T>>(
          a, q.data<T>(), cache_data<C, T>(cache.k), cache_data<C, T>(cache.v), scales, block_tables.data<int32_t>(),
          context_lens.data<int32_t>(), table_rows.defined() ? table_rows.data<int32_t>() : nullptr,
          ws > 0 ? workspace.data<float>() : nullptr, out.data<T>(), ctx.warp_size(), ctx.stream().get());
    });
  });
}

// f16 or bf16, the matrix kernels' operand types (matrix_attention_supports refuses others).
template <class F>
void dispatch_half(DType dt, F&& f) {
  if (dt == DType::f16) f.template operator()<half>();
  else f.template operator()<bfloat16>();
}

// The matrix-core kernels: the decode kernel for the plan's decode list
// (kernels/attention_decode_matrix.cu), the prefill kernel for its query tiles
// (kernels/attention_prefill.cu, or kernels/attention_prefill_hopper.cu where `hopper`). They
// write disjoint rows of out.
void matrix_prefill(Context& ctx, const Tensor& q, const PagedKv& cache, const Tensor& block_tables, const PrefillPlan& plan, float scale, const AttentionOptions& options,
                    const Tensor& out, bool hopper) {
  LW_CHECK(plan.seq_info.defined() && (plan.tiles > 0 || plan.decode_count > 0),
           "prefill_attention: the plan has no tables for the matrix path (make it with plan_prefill)");
  const Tensor& k_cache = cache.k;
  LW_CHECK(plan.group == q.size(1) / k_cache.size(2),
           "prefill_attention: the plan's tiles are made for " << plan.group << " query heads per key/value head; q and "
                                                               "the cache have " << q.size(1) / k_cache.size(2));
  LW_CHECK(plan.decode_count == 0 || !ctx.deterministic(),
           "prefill_attention: the plan has a decode list, which deterministic mode does not run (make the plan in "
           "deterministic mode)");
  const int q_heads = static_cast<int>(q.size(1)), kv_heads = static_cast<int>(k_cache.size(2));
  const int head_dim = static_cast<int>(q.size(2)), block_size = static_cast<int>(k_cache.size(1));
  const int max_blocks = static_cast<int>(block_tables.size(1));
  if (plan.decode_count > 0) {
    kernels::MatrixDecodeArgs a{};
    a.seqs = plan.decode_count;
    a.q_heads = q_heads;
    a.kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.block_size = block_size;
    a.max_blocks_per_seq = max_blocks;
    a.scale = scale;
    a.window = options.window;
    a.softcap = options.softcap;
    a.kv_bytes = static_cast<int>(kv_cache_element_bytes(cache.format, q.dtype()));
    kernels::choose_matrix_decode_split(a, plan.decode_max_context, ctx.caps().multiprocessors,
                                         ctx.caps().shared_memory_per_block_optin);
    const int64_t ws = kernels::matrix_decode_workspace(a);
    Tensor workspace = ws > 0 ? ctx.empty({ws}, DType::f32) : Tensor();
    LaunchCounters& counters = ctx.resource<LaunchCounters>();
    int32_t* merge_counters = a.parts > 1 ? counters.get(kernels::matrix_decode_counters(a)) : nullptr;
    dispatch_half(q.dtype(), [&]<class T>() {
      dispatch_cache(cache, [&]<class C>(const kernels::KvScales& scales) {
        kernels::matrix_decode_attention<T, CacheElem<C, T>>(
            a, q.data<T>(), cache_data<C, T>(cache.k), cache_data<C, T>(cache.v), scales, block_tables.data<int32_t>(),
            plan.seq_info.data<int32_t>(), plan.decode_seqs.data<int32_t>(), ws > 0 ? workspace.data<float>() : nullptr,
            merge_counters, out.data<T>(), ctx.warp_size(), ctx.stream().get());
      });
    });
  }
  if (plan.tiles == 0) return;
  LW_CHECK(plan.tile_info.defined(), "prefill_attention: the plan has tiles but no tile table");
  kernels::PrefillAttentionArgs a{};
  a.seqs = static_cast<int>(plan.sequences);
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.block_size = block_size;
  a.max_blocks_per_seq = max_blocks;
  a.tiles = plan.tiles;
  a.tile_tokens = plan.tile_tokens;
  a.scale = scale;
  a.window = options.window;
  a.softcap = options.softcap;
  a.rows = static_cast<int>(plan.tokens);
  // Deterministic mode never splits: a row's keys then meet in one block, whatever the batch.
  if (!ctx.deterministic()) kernels::choose_prefill_split(a, plan.max_context, ctx.caps().multiprocessors);
  const int64_t ws = kernels::prefill_workspace(a);
  Tensor workspace = ws > 0 ? ctx.empty({ws}, DType::f32) : Tensor();
#if defined(LW_HOPPER_ATTENTION)
  if (hopper) {
    LW_CHECK(cache.format == KvCacheFormat::model, "prefill_attention: the hopper path takes no 8-bit cache");
    dispatch_half(q.dtype(), [&]<class T>() {
      kernels::hopper_prefill_attention<T>(a, q.data<T>(), cache.k.data<T>(), cache.v.data<T>(), block_tables.data<int32_t>(),
                                           plan.seq_info.data<int32_t>(), plan.tile_info.data<int32_t>(),
                                           ws > 0 ? workspace.data<float>() : nullptr, out.data<T>(), ctx.stream().get());
    });
    return;
  }
#else
  LW_CHECK(!hopper, "prefill_attention: this build has no hopper kernel");
#endif
  dispatch_half(q.dtype(), [&]<class T>() {
    dispatch_cache(cache, [&]<class C>(const kernels::KvScales& scales) {
      kernels::prefill_attention<T, CacheElem<C, T>>(
          a, q.data<T>(), cache_data<C, T>(cache.k), cache_data<C, T>(cache.v), scales, block_tables.data<int32_t>(),
          plan.seq_info.data<int32_t>(), plan.tile_info.data<int32_t>(), ws > 0 ? workspace.data<float>() : nullptr,
          out.data<T>(), ctx.warp_size(), ctx.stream().get());
    });
  });
}

// The checks shared by decode and prefill, then the selected implementation; table_rows maps
// query rows to block-table rows (undefined: one row each); plan: the prefill batch (null for
// decode).
void attention(Context& ctx, const char* op, const Tensor& q, const PagedKv& cache, const Tensor& block_tables, const Tensor& context_lens, const Tensor& table_rows, int max_context,
               float scale, const AttentionOptions& options, const Tensor& out, const PrefillPlan* plan,
               AttentionPath path) {
  check_float_input(op, "q", q);
  check_float_input(op, "out", out);
  check_cache(op, cache, q.dtype());
  const Tensor& k_cache = cache.k;
  check_same_shape(op, "q", q, "out", out);
  check_same_dtype(op, "q", q, "out", out);
  LW_CHECK(q.dim() == 3, op << ": q " << q.describe() << " must be [rows, q_heads, head_dim]");
  const int64_t rows = q.size(0), q_heads = q.size(1), head_dim = q.size(2);
  const int64_t block_size = k_cache.size(1), kv_heads = k_cache.size(2);
  LW_CHECK(k_cache.size(3) == head_dim, op << ": cache head_dim " << k_cache.size(3) << " differs from q's " << head_dim);
  LW_CHECK(kv_heads > 0 && q_heads % kv_heads == 0 && q_heads / kv_heads <= 16,
           op << ": " << q_heads << " query heads over " << kv_heads
              << " key/value heads: it must divide, with at most 16 query heads per key/value head");
  check_on_device(op, "block_tables", block_tables);
  check_on_device(op, "context_lens", context_lens);
  LW_CHECK(block_tables.dtype() == DType::i32 && block_tables.dim() == 2 && block_tables.is_contiguous() &&
               (table_rows.defined() || block_tables.size(0) == rows),
           op << ": block_tables " << block_tables.describe() << " must be a contiguous i32[" << rows << ", max_blocks]");
  LW_CHECK(context_lens.dtype() == DType::i32 && context_lens.dim() == 1 && context_lens.size(0) == rows &&
               context_lens.is_contiguous(),
           op << ": context_lens " << context_lens.describe() << " must be a contiguous i32[" << rows << "]");
  LW_CHECK(max_context >= 0 && max_context <= block_tables.size(1) * block_size,
           op << ": max_context " << max_context << " exceeds what " << block_tables.size(1) << " blocks of "
              << block_size << " tokens hold");
  LW_CHECK(std::isfinite(scale), op << ": scale " << scale << " is not finite");
  LW_CHECK(options.window >= 0, op << ": window " << options.window << " must be >= 0 (0: no window)");
  LW_CHECK(std::isfinite(options.softcap) && options.softcap >= 0.0f,
           op << ": softcap " << options.softcap << " must be finite and >= 0 (0: none)");
  const AttentionShape shape{rows,     plan ? plan->sequences : rows, q_heads, kv_heads, head_dim, max_context, q.dtype(),
                             plan != nullptr, ctx.deterministic(), cache.format != KvCacheFormat::model};
  const auto chosen = select<AttentionPaths>(ctx.caps(), shape, path);
  switch (chosen.path) {
    case AttentionPath::matrix: {
      const Availability fits = matrix_attention_supports(shape);
      LW_CHECK(fits.ok, op << ": the matrix attention path" << origin_note<AttentionPaths>(chosen) << " cannot take "
                           << dtype_name(q.dtype()) << " q of head_dim " << head_dim << ": " << fits.reason);
      matrix_prefill(ctx, q, cache, block_tables, *plan, scale, options, out, false);
      break;
    }
    case AttentionPath::hopper: {
      const Availability fits = hopper_attention_supports(shape);
      LW_CHECK(fits.ok, op << ": the hopper attention path" << origin_note<AttentionPaths>(chosen) << " cannot take "
                           << dtype_name(q.dtype()) << " q of head_dim " << head_dim << ": " << fits.reason);
      matrix_prefill(ctx, q, cache, block_tables, *plan, scale, options, out, true);
      break;
    }
    case AttentionPath::portable:
    case AttentionPath::automatic:  // select never returns it
      portable_attention(ctx, op, q, cache, block_tables, context_lens, table_rows, max_context, scale, options, out);
      break;
  }
}

}  // namespace

Availability AttentionPaths::available(const gpu::DeviceCaps& caps, AttentionPath path) {
  if (path == AttentionPath::hopper) {
#if defined(LW_HOPPER_ATTENTION)
    if (caps.matrix.wgmma) return Availability::yes();
    return Availability::no("it is no Hopper GPU (the kernel is sm_90a code: wgmma)");
#else
    return Availability::no("this build has no Hopper kernel (a CUDA build whose architectures include 90 has it)");
#endif
  }
  if (path != AttentionPath::matrix || caps.emulator() || caps.matrix.mma_sync || caps.matrix.mfma ||
      caps.matrix.wmma) {
    return Availability::yes();
  }
  return Availability::no("it has no matrix cores the kernel is built for (NVIDIA mma.sync, sm_80 and later; AMD "
                          "MFMA on gfx90a/gfx942; AMD WMMA on gfx11)");
}

Availability matrix_attention_supports(const AttentionShape& shape) {
  if (!shape.prefill) {
    return Availability::no("decode_attention takes no plan (the model's decode steps reach the matrix decode kernel "
                            "through prefill_attention's plan)");
  }
  if (shape.dtype != DType::f16 && shape.dtype != DType::bf16) {
    return Availability::no("matrix cores take f16 or bf16 operands");
  }
  if (!kernels::prefill_head_dim_supported(static_cast<int>(shape.head_dim))) {
    return Availability::no("head dims 64, 80, 96, 128 and 256 are built");
  }
  return Availability::yes();
}

Availability hopper_attention_supports(const AttentionShape& shape) {
  if (!kernels::hopper_prefill_head_dim_supported(static_cast<int>(shape.head_dim)) && shape.prefill) {
    return Availability::no("head dims 64 and 128 are built");
  }
  if (const Availability matrix = matrix_attention_supports(shape); !matrix.ok) return matrix;
  if (shape.quantized_kv) return Availability::no("it reads keys and values in the model's dtype, not 8-bit codes");
  return Availability::yes();
}

AttentionPath AttentionPaths::choose(const gpu::DeviceCaps& caps, const AttentionShape& shape) {
  if (available(caps, AttentionPath::hopper).ok && hopper_attention_supports(shape).ok) return AttentionPath::hopper;
  return available(caps, AttentionPath::matrix).ok && matrix_attention_supports(shape).ok ? AttentionPath::matrix
                                                                                          : AttentionPath::portable;
}

void decode_attention(Context& ctx, const Tensor& q, const PagedKv& cache, const Tensor& block_tables,
                      const Tensor& context_lens, int max_context, float scale, const Tensor& out,
                      const AttentionOptions& options, AttentionPath path) {
  attention(ctx, "decode_attention", q, cache, block_tables, context_lens, Tensor(), max_context, scale, options, out,
            nullptr, path);
}

void decode_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& block_tables, const Tensor& context_lens, int max_context, float scale,
                      const Tensor& out, const AttentionOptions& options, AttentionPath path) {
  decode_attention(ctx, q, PagedKv{k_cache, v_cache}, block_tables, context_lens, max_context, scale, out, options,
                   path);
}

int matrix_tile_tokens(int group) { return kernels::prefill_tile_tokens(group); }

int matrix_decode_max_tokens(const Context& ctx, int group) {
  return ctx.deterministic() ? 0 : kernels::matrix_decode_max_tokens(group);
}

PrefillPlan plan_prefill(Context& ctx, const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens,
                         int group) {
  LW_CHECK(query_lens.size() == context_lens.size(),
           "prefill_attention: " << query_lens.size() << " query lengths for " << context_lens.size() << " sequences");
  // One decode row per new token: its sequence's table row and its causal context length.
  std::vector<int32_t> rows_h, lens_h;
  int max_context = 0;
  for (size_t i = 0; i < query_lens.size(); ++i) {
    LW_CHECK(query_lens[i] >= 0 && context_lens[i] >= query_lens[i],
             "prefill_attention: sequence " << i << " has " << query_lens[i] << " new tokens but a context of "
                                            << context_lens[i]);
    for (int32_t j = 0; j < query_lens[i]; ++j) {
      rows_h.push_back(static_cast<int32_t>(i));
      lens_h.push_back(context_lens[i] - query_lens[i] + j + 1);
    }
    max_context = std::max(max_context, context_lens[i]);
  }
  PrefillPlan plan;
  plan.sequences = static_cast<int64_t>(query_lens.size());
  plan.tokens = static_cast<int64_t>(rows_h.size());
  plan.max_context = max_context;
  if (rows_h.empty()) return plan;
  auto upload = [&](const std::vector<int32_t>& v) {
    Tensor h = Tensor::empty_host({static_cast<int64_t>(v.size())}, DType::i32);
    std::copy(v.begin(), v.end(), h.data<int32_t>());
    return ctx.to_device(h);
  };
  plan.token_lens = upload(lens_h);
  plan.token_rows = upload(rows_h);
  const kernels::PrefillTables tables =
      kernels::prefill_tables(query_lens, context_lens, group, matrix_decode_max_tokens(ctx, group));
  plan.seq_info = upload(tables.seq_info);
  if (tables.tiles > 0) plan.tile_info = upload(tables.tile_info);
  plan.tiles = tables.tiles;
  if (!tables.decode_seqs.empty()) plan.decode_seqs = upload(tables.decode_seqs);
  plan.decode_count = static_cast<int>(tables.decode_seqs.size());
  for (int32_t s : tables.decode_seqs) plan.decode_max_context = std::max(plan.decode_max_context, context_lens[s]);
  plan.group = group;
  plan.tile_tokens = tables.tile_tokens;
  return plan;
}

void prefill_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const PrefillPlan& plan, float scale, const Tensor& out,
                       const AttentionOptions& options, AttentionPath path) {
  prefill_attention(ctx, q, PagedKv{k_cache, v_cache}, block_tables, plan, scale, out, options, path);
}

void prefill_attention(Context& ctx, const Tensor& q, const PagedKv& cache, const Tensor& block_tables,
                       const PrefillPlan& plan, float scale, const Tensor& out, const AttentionOptions& options,
                       AttentionPath path) {
  LW_CHECK(block_tables.defined() && block_tables.dim() == 2 && block_tables.size(0) == plan.sequences,
           "prefill_attention: block_tables " << block_tables.describe() << " needs one row per sequence ("
                                              << plan.sequences << ")");
  LW_CHECK(q.defined() && q.dim() == 3 && q.size(0) == plan.tokens,
           "prefill_attention: q " << q.describe() << " must have " << plan.tokens << " rows (the new tokens)");
  if (plan.tokens == 0) return;
  attention(ctx, "prefill_attention", q, cache, block_tables, plan.token_lens, plan.token_rows, plan.max_context, scale,
            options, out, &plan, path);
}

void prefill_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const std::vector<int32_t>& query_lens,
                       const std::vector<int32_t>& context_lens, float scale, const Tensor& out,
                       const AttentionOptions& options, AttentionPath path) {
  prefill_attention(ctx, q, PagedKv{k_cache, v_cache}, block_tables, query_lens, context_lens, scale, out, options,
                    path);
}

void prefill_attention(Context& ctx, const Tensor& q, const PagedKv& cache, const Tensor& block_tables,
                       const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens, float scale,
                       const Tensor& out, const AttentionOptions& options, AttentionPath path) {
  const Tensor& k_cache = cache.k;
  const int group = q.defined() && q.dim() == 3 && k_cache.defined() && k_cache.dim() == 4 && k_cache.size(2) > 0 &&
                            q.size(1) % k_cache.size(2) == 0
                        ? static_cast<int>(q.size(1) / k_cache.size(2))
                        : 1;  // attention() refuses such shapes with their own message
  prefill_attention(ctx, q, cache, block_tables, plan_prefill(ctx, query_lens, context_lens, group), scale, out,
                    options, path);
}

}  // namespace lw::ops
