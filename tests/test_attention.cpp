// The paged KV cache write and decode attention (every implementation this device has) against a
// float64 reference: random caches, scattered block tables, odd block sizes, GQA groups 1..16,
// head dims 64..256, contexts of one token, block edges and several partitions (the split-K
// merge), and an empty context; caches in the model's dtype and in 8-bit codes (e4m3, int8)
// with their scales, and the 8-bit encodings' rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "kernels/attention_decode_matrix.h"
#include "kernels/quant/fp8.h"
#include "ops/attention.h"
#include "test_util.h"

namespace lw::test {
namespace {

struct Case {
  int q_heads, kv_heads, head_dim, block_size;
  std::vector<int> contexts;
  ops::AttentionOptions options = {};
};

// The score of a key as the options shape it (the float64 reference of both ops).
double shaped_score(double dot, double scale, const ops::AttentionOptions& o) {
  const double x = dot * scale;
  return o.softcap > 0 ? o.softcap * std::tanh(x / o.softcap) : x;
}
bool in_window(int query_pos, int key, const ops::AttentionOptions& o) {
  return key <= query_pos && (o.window <= 0 || query_pos - key < o.window);
}

// The value of an e4m3fn code, from its fields (OCP's definition; NaN codes excluded).
double e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (b & 0x80) ? -mag : mag;
}

Tensor host_of(const std::vector<double>& values, std::vector<int64_t> shape, DType dt) {
  Tensor t = Tensor::empty_host(std::move(shape), dt);
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = static_cast<float>(values[i]);
    if (dt == DType::f32) t.data<float>()[i] = f;
    else if (dt == DType::f16) t.data<half>()[i] = gpu::from_float<half>(f);
    else t.data<bfloat16>()[i] = gpu::from_float<bfloat16>(f);
  }
  return t;
}

// A layer's caches of `format` holding random keys and values, and those values (host, dt). The
// 8-bit caches are written through kv_write from values their encoding keeps exactly (so the
// float64 reference sees what the kernels read, as for the model's dtype): e4m3 codes of
// magnitude <= 2 times per-head scales of 1/4 to 2; int8 codes times a power of two per slot and
// head (its largest code +-127, which makes the written scale that power).
struct TestCache {
  Tensor k_host, v_host;
  ops::PagedKv cache;
};
// int8 rows' scales are 2^-e for e from k_exponent (K) or v_exponent (V) to 4 more; V's
// codes are all >= 0 when v_exponent > 5 (small values that add up rather than cancel).
TestCache make_cache(DType dt, ops::KvCacheFormat format, int64_t blocks, int64_t bs, int64_t kvh, int64_t hd,
                     int k_exponent = 5, int v_exponent = 5) {
  const std::vector<int64_t> shape{blocks, bs, kvh, hd};
  TestCache t;
  if (format == ops::KvCacheFormat::model) {
    t.k_host = random_host(shape, dt);
    t.v_host = random_host(shape, dt);
    t.cache = {ctx().to_device(t.k_host), ctx().to_device(t.v_host)};
    return t;
  }
  const int64_t rows = blocks * bs * kvh;
  std::vector<double> head_scale_k(kvh), head_scale_v(kvh);
  for (int64_t h = 0; h < kvh; ++h) {
    head_scale_k[h] = std::ldexp(1.0, static_cast<int>(rng()() % 4) - 2);
    head_scale_v[h] = std::ldexp(1.0, static_cast<int>(rng()() % 4) - 2);
  }
  auto values = [&](const std::vector<double>& head_scale, int int8_exponent, bool positive) {
    std::vector<double> x(static_cast<size_t>(rows * hd));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = r % kvh;
      const int e = static_cast<int>(rng()() % 5) + int8_exponent;  // int8: this row's scale 2^-e
      for (int64_t i = 0; i < hd; ++i) {
        double v;
        if (format == ops::KvCacheFormat::int8) {
          int code = i == static_cast<int64_t>(r % hd) ? (rng()() % 2 ? 127 : -127)
                                                       : static_cast<int>(rng()() % 255) - 127;
          if (positive) code = std::abs(code);
          v = std::ldexp(static_cast<double>(code), -e);
        } else {
          uint8_t code;
          do code = static_cast<uint8_t>(rng()()); while ((code & 0x7F) > 0x40);  // |value| <= 2
          v = e4m3_value(code) * head_scale[h];
        }
        x[static_cast<size_t>(r * hd + i)] = v;
      }
    }
    return x;
  };
  t.k_host = host_of(values(head_scale_k, k_exponent, false), shape, dt);
  t.v_host = host_of(values(head_scale_v, v_exponent, v_exponent > 5), shape, dt);
  const DType i8 = DType::i8;
  t.cache = {ctx().empty(shape, i8), ctx().empty(shape, i8), format, Tensor(), Tensor()};
  if (format == ops::KvCacheFormat::fp8_e4m3) {
    t.cache.k_scale = ctx().to_device(host_of(head_scale_k, {kvh}, DType::f32));
    t.cache.v_scale = ctx().to_device(host_of(head_scale_v, {kvh}, DType::f32));
  } else {
    t.cache.k_scale = ctx().empty({blocks, bs, kvh}, DType::f32);
    t.cache.v_scale = ctx().empty({blocks, bs, kvh}, DType::f32);
  }
  Tensor slots = Tensor::empty_host({blocks * bs}, DType::i64);
  std::iota(slots.data<int64_t>(), slots.data<int64_t>() + blocks * bs, int64_t{0});
  ops::kv_write(ctx(), ctx().to_device(t.k_host.view({blocks * bs, kvh, hd})),
                ctx().to_device(t.v_host.view({blocks * bs, kvh, hd})), ctx().to_device(slots), t.cache);
  return t;
}

void run_case(DType dt, const Case& c, ops::KvCacheFormat format = ops::KvCacheFormat::model) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", heads " << c.q_heads << "/" << c.kv_heads << ", dim "
                                    << c.head_dim << ", block " << c.block_size << ", window " << c.options.window
                                    << ", softcap " << c.options.softcap << ", cache " << ops::kv_cache_format_name(format));
  const int seqs = static_cast<int>(c.contexts.size());
  const int max_ctx = *std::max_element(c.contexts.begin(), c.contexts.end());
  const int max_blocks = std::max(1, (max_ctx + c.block_size - 1) / c.block_size);
  const int num_blocks = seqs * max_blocks + 3;
  const int64_t hd = c.head_dim;
  const TestCache cache = make_cache(dt, format, num_blocks, c.block_size, c.kv_heads, hd);
  const Tensor& kh = cache.k_host;
  const Tensor& vh = cache.v_host;
  Tensor qh = random_host({seqs, c.q_heads, hd}, dt);
  // Each sequence gets distinct blocks in a shuffled order.
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  Tensor tables_h = Tensor::empty_host({seqs, max_blocks}, DType::i32), lens_h = Tensor::empty_host({seqs}, DType::i32);
  for (int s = 0; s < seqs; ++s) {
    lens_h.data<int32_t>()[s] = c.contexts[s];
    for (int b = 0; b < max_blocks; ++b) tables_h.data<int32_t>()[s * max_blocks + b] = perm[s * max_blocks + b];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  const std::vector<double> k = to_doubles(kh), v = to_doubles(vh), q = to_doubles(qh);
  const int group = c.q_heads / c.kv_heads;
  std::vector<double> want;
  for (int s = 0; s < seqs; ++s) {
    for (int h = 0; h < c.q_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> score(c.contexts[s], -INFINITY);
      for (int t = 0; t < c.contexts[s]; ++t) {
        if (!in_window(c.contexts[s] - 1, t, c.options)) continue;
        const int64_t slot = static_cast<int64_t>(perm[s * max_blocks + t / c.block_size]) * c.block_size + t % c.block_size;
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += q[(s * c.q_heads + h) * hd + i] * k[(slot * c.kv_heads + kvh) * hd + i];
        score[t] = shaped_score(d, scale, c.options);
      }
      const double m = score.empty() ? 0 : *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& e : score) sum += (e = std::exp(e - m));
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int t = 0; t < c.contexts[s]; ++t) {
          const int64_t slot = static_cast<int64_t>(perm[s * max_blocks + t / c.block_size]) * c.block_size + t % c.block_size;
          acc += score[t] * v[(slot * c.kv_heads + kvh) * hd + i];
        }
        want.push_back(sum > 0 ? acc / sum : 0.0);
      }
    }
  }
  // Every implementation this device has, against float64: one rounding to the dtype
  // (relative) plus float accumulation over |v| <= 1 (absolute).
  const Tensor q_d = ctx().to_device(qh);
  const Tensor tables = ctx().to_device(tables_h), lens = ctx().to_device(lens_h);
  for (ops::AttentionPath path : ops::available_paths<ops::AttentionPaths>(ctx().caps())) {
    SCOPED_TRACE(ops::path_name<ops::AttentionPaths>(path));
    Tensor out = ctx().empty({seqs, c.q_heads, hd}, dt);
    poison(out);
    if (path == ops::AttentionPath::matrix || path == ops::AttentionPath::hopper) {  // they need a plan: refused by name
      expect_error([&] { ops::decode_attention(ctx(), q_d, cache.cache, tables, lens, max_ctx, scale, out, c.options, path); },
                   "decode_attention takes no plan");
      continue;
    }
    ops::decode_attention(ctx(), q_d, cache.cache, tables, lens, max_ctx, scale, out, c.options, path);
    EXPECT_TRUE(all_close(ctx().to_host(out), want, epsilon(dt), 1e-5));
  }
}

TEST(DecodeAttention, HeadDimsAndGroups) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    run_case(dt, {8, 2, 64, 16, {1, 17, 40}});
    run_case(dt, {4, 4, 128, 16, {33, 5}});
  }
  run_case(DType::bf16, {7, 1, 80, 7, {20, 13}});
  run_case(DType::bf16, {6, 2, 96, 16, {31}});
  run_case(DType::f16, {2, 1, 256, 8, {24, 9}});
  run_case(DType::bf16, {16, 1, 64, 16, {50, 3}});
}

TEST(DecodeAttention, LongContextsSplitAndMerge) {
  run_case(DType::bf16, {8, 2, 128, 16, {1300, 700, 1}});   // partitions of 512
  run_case(DType::f32, {16, 1, 64, 32, {300, 129}});       // partitions of 128
}

// Deterministic mode: a sequence's output has the same bits alone and in any batch, whatever
// the launch's context bound (a decode graph's bucket), where the automatic choice would split
// its context differently; and it still matches float64 (the cases above, with fixed partitions).
TEST(DecodeAttention, DeterministicRowsDoNotDependOnTheBatch) {
  DeterministicScope deterministic(ctx());
  run_case(DType::bf16, {8, 2, 128, 16, {1300, 700, 1}});
  run_case(DType::f32, {16, 1, 64, 32, {300, 129}});
  // Eleven sequences of one query head per key/value head: the automatic choice splits a long
  // context into partitions of 512 tokens in this batch and of 64 when a sequence runs alone.
  const DType dt = DType::f32;  // a bf16 output would round most differences away
  const int q_heads = 8, kv_heads = 8, hd = 128, bs = 16;
  const std::vector<int32_t> lens = {700, 90, 1300, 5, 1300, 1000, 800, 1200, 1250, 600, 1290};
  const int seqs = static_cast<int>(lens.size()), max_blocks = 1300 / bs + 1, num_blocks = seqs * max_blocks;
  const Tensor k = ctx().to_device(random_host({num_blocks, bs, kv_heads, hd}, dt));
  const Tensor v = ctx().to_device(random_host({num_blocks, bs, kv_heads, hd}, dt));
  const Tensor qh = random_host({seqs, q_heads, hd}, dt);
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  // The rows `which` of the batch, with context bound `bound`.
  auto run = [&](const std::vector<int>& which, int bound) {
    const int n = static_cast<int>(which.size());
    Tensor q = Tensor::empty_host({n, q_heads, hd}, dt), tables = Tensor::empty_host({n, max_blocks}, DType::i32);
    Tensor ctx_lens = Tensor::empty_host({n}, DType::i32);
    const size_t row_bytes = static_cast<size_t>(q_heads * hd) * dtype_size(dt);
    for (int i = 0; i < n; ++i) {
      std::memcpy(static_cast<char*>(q.data_ptr()) + i * row_bytes, static_cast<const char*>(qh.data_ptr()) + which[i] * row_bytes,
                  row_bytes);
      std::copy_n(perm.begin() + which[i] * max_blocks, max_blocks, tables.data<int32_t>() + i * max_blocks);
      ctx_lens.data<int32_t>()[i] = lens[which[i]];
    }
    Tensor out = ctx().empty({n, q_heads, hd}, dt);
    poison(out);
    ops::decode_attention(ctx(), ctx().to_device(q), k, v, ctx().to_device(tables), ctx().to_device(ctx_lens), bound,
                          0.088f, out);
    return ctx().to_host(out);
  };
  std::vector<int> everyone(lens.size());
  std::iota(everyone.begin(), everyone.end(), 0);
  const Tensor all = run(everyone, 1300);
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE(::testing::Message() << "sequence " << s << " (" << lens[s] << " tokens)");
    EXPECT_TRUE(bitwise_equal(run({s}, lens[s]), all.slice(0, s, s + 1)));
    EXPECT_TRUE(bitwise_equal(run({s}, max_blocks * bs), all.slice(0, s, s + 1)));
  }
  EXPECT_TRUE(bitwise_equal(run({3, 0}, 1300).slice(0, 1, 2), all.slice(0, 0, 1)));
}

TEST(DecodeAttention, EmptyContextGivesZeros) { run_case(DType::bf16, {4, 2, 64, 16, {0, 9}}); }

// A sliding window (partitions wholly before it are skipped) and soft-capped scores.
TEST(DecodeAttention, WindowAndSoftCap) {
  run_case(DType::bf16, {4, 2, 64, 16, {1, 40, 1300}, {.window = 100}});
  run_case(DType::f32, {4, 1, 64, 8, {3, 70}, {.window = 1}});
  run_case(DType::f16, {8, 2, 128, 16, {1, 65, 600}, {.window = 0, .softcap = 2.0f}});
  run_case(DType::bf16, {2, 2, 64, 16, {700, 5}, {.window = 513, .softcap = 30.0f}});
}

TEST(DecodeAttention, RejectsMisuse) {
  Tensor q = ctx().empty({2, 6, 64}, DType::bf16), out = ctx().empty({2, 6, 64}, DType::bf16);
  Tensor kc = ctx().empty({4, 16, 4, 64}, DType::bf16);  // 6 query heads over 4 kv heads
  Tensor tables = ctx().empty({2, 2}, DType::i32), lens = ctx().empty({2}, DType::i32);
  EXPECT_THROW(ops::decode_attention(ctx(), q, kc, kc, tables, lens, 16, 0.1f, out), Error);
  Tensor kc2 = ctx().empty({4, 16, 2, 64}, DType::bf16);
  EXPECT_THROW(ops::decode_attention(ctx(), q, kc2, kc2, tables, lens, 33, 0.1f, out), Error);  // 33 > 2 * 16
  EXPECT_THROW(ops::decode_attention(ctx(), q, kc2, kc2, ctx().empty({2, 2}, DType::i64), lens, 16, 0.1f, out), Error);
  EXPECT_NO_THROW(ops::decode_attention(ctx(), q, kc2, kc2, tables.slice(0, 0, 2), ctx().to_device([] {
                    Tensor h = Tensor::empty_host({2}, DType::i32);
                    h.data<int32_t>()[0] = h.data<int32_t>()[1] = 0;
                    return h;
                  }()), 16, 0.1f, out));
}

// Prefill: sequences of new tokens after cached prefixes in a paged cache, each token attending
// causally (within the window), on every path that takes the case, against float64.
struct PrefillCase {
  int q_heads, kv_heads, head_dim, block_size;
  std::vector<int32_t> new_lens, prefix;
  ops::AttentionOptions options = {};
  float sharpness = 1.0f;  // the scale is sharpness / sqrt(head_dim)
};

// A prefill case's inputs on the device, and its float64 reference: each output element and
// the sum of |p v| / sum of p behind it (the weight of the rounding bound).
struct PrefillInputs {
  TestCache cache;
  Tensor q, tables;
  std::vector<int32_t> ctx_lens;
  int total = 0, max_ctx = 1;
  float scale = 0.0f;
  std::vector<double> want, weight;
};

PrefillInputs make_prefill_inputs(DType dt, const PrefillCase& c, ops::KvCacheFormat format, int k_exponent,
                                  int v_exponent) {
  PrefillInputs in;
  const int seqs = static_cast<int>(c.new_lens.size());
  for (int s = 0; s < seqs; ++s) {
    in.ctx_lens.push_back(c.prefix[s] + c.new_lens[s]);
    in.max_ctx = std::max(in.max_ctx, in.ctx_lens.back());
  }
  const int bs = c.block_size, max_blocks = (in.max_ctx + bs - 1) / bs, num_blocks = seqs * max_blocks + 1;
  const int64_t hd = c.head_dim;
  in.cache = make_cache(dt, format, num_blocks, bs, c.kv_heads, hd, k_exponent, v_exponent);
  const Tensor& kh = in.cache.k_host;
  const Tensor& vh = in.cache.v_host;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  if (format == ops::KvCacheFormat::model) {
    // Slots past each context (the rest of its last block, the blocks after it, the spare
    // block) hold NaN, as a cache's unwritten slots may: kernels that read whole blocks or
    // tiles must keep them out of the output.
    std::vector<bool> in_context(static_cast<size_t>(num_blocks) * bs, false);
    for (int s = 0; s < seqs; ++s) {
      for (int t = 0; t < in.ctx_lens[s]; ++t) in_context[static_cast<size_t>(perm[s * max_blocks + t / bs]) * bs + t % bs] = true;
    }
    const size_t slot_bytes = static_cast<size_t>(c.kv_heads) * hd * dtype_size(dt);
    for (size_t slot = 0; slot < in_context.size(); ++slot) {
      if (in_context[slot]) continue;
      std::memset(static_cast<unsigned char*>(kh.data_ptr()) + slot * slot_bytes, 0xff, slot_bytes);
      std::memset(static_cast<unsigned char*>(vh.data_ptr()) + slot * slot_bytes, 0xff, slot_bytes);
    }
    in.cache.cache = {ctx().to_device(kh), ctx().to_device(vh)};
  }
  Tensor tables_h = Tensor::empty_host({seqs, max_blocks}, DType::i32);
  std::copy_n(perm.begin(), seqs * max_blocks, tables_h.data<int32_t>());
  in.total = std::accumulate(c.new_lens.begin(), c.new_lens.end(), 0);
  Tensor qh = random_host({std::max(in.total, 1), c.q_heads, hd}, dt).slice(0, 0, in.total);
  in.scale = c.sharpness / std::sqrt(static_cast<float>(hd));
  const std::vector<double> k = to_doubles(kh), v = to_doubles(vh), q = to_doubles(qh);
  int row = 0;
  for (int s = 0; s < seqs; ++s) {
    auto slot = [&](int t) { return static_cast<int64_t>(perm[s * max_blocks + t / bs]) * bs + t % bs; };
    for (int j = 0; j < c.new_lens[s]; ++j, ++row) {
      const int pos = c.prefix[s] + j;
      for (int h = 0; h < c.q_heads; ++h) {
        const int kvh = h / (c.q_heads / c.kv_heads);
        std::vector<double> p(pos + 1, -INFINITY);
        for (int t = 0; t <= pos; ++t) {
          if (!in_window(pos, t, c.options)) continue;
          double d = 0;
          for (int i = 0; i < hd; ++i) d += q[(row * c.q_heads + h) * hd + i] * k[(slot(t) * c.kv_heads + kvh) * hd + i];
          p[t] = shaped_score(d, in.scale, c.options);
        }
        const double m = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& e : p) sum += (e = std::exp(e - m));
        for (int i = 0; i < hd; ++i) {
          double acc = 0, mag = 0;
          for (int t = 0; t <= pos; ++t) {
            acc += p[t] * v[(slot(t) * c.kv_heads + kvh) * hd + i];
            mag += p[t] * std::abs(v[(slot(t) * c.kv_heads + kvh) * hd + i]);
          }
          in.want.push_back(acc / sum);
          in.weight.push_back(mag / sum);
        }
      }
    }
  }
  in.q = ctx().to_device(qh);
  in.tables = ctx().to_device(tables_h);
  return in;
}

// The matrix path rounds the probabilities to the dtype before P.V (as FlashAttention does):
// each term p|v| may be off by one rounding, on top of the output's own rounding.
void expect_reference(const PrefillInputs& in, DType dt, const Tensor& out) {
  const std::vector<double> got = to_doubles(ctx().to_host(out));
  ASSERT_EQ(got.size(), in.want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = epsilon(dt) * (std::abs(in.want[i]) + in.weight[i]) + 1e-5;
    ASSERT_LE(std::abs(got[i] - in.want[i]), bound) << "element " << i << ": " << got[i] << " vs " << in.want[i];
  }
}

void run_prefill_case(DType dt, const PrefillCase& c, ops::KvCacheFormat format = ops::KvCacheFormat::model,
                      int k_exponent = 5, int v_exponent = 5) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", heads " << c.q_heads << "/" << c.kv_heads << ", dim "
                                    << c.head_dim << ", block " << c.block_size << ", window " << c.options.window
                                    << ", softcap " << c.options.softcap << ", cache " << ops::kv_cache_format_name(format));
  const PrefillInputs in = make_prefill_inputs(dt, c, format, k_exponent, v_exponent);
  const int seqs = static_cast<int>(c.new_lens.size());
  const ops::AttentionShape shape{in.total, seqs,  c.q_heads, c.kv_heads, c.head_dim, in.max_ctx,
                                  dt,       true, false,     format != ops::KvCacheFormat::model};
  for (ops::AttentionPath path : ops::available_paths<ops::AttentionPaths>(ctx().caps())) {
    SCOPED_TRACE(ops::path_name<ops::AttentionPaths>(path));
    Tensor out = ctx().empty({in.total, c.q_heads, c.head_dim}, dt);
    poison(out);
    auto run = [&] {
      ops::prefill_attention(ctx(), in.q, in.cache.cache, in.tables, c.new_lens, in.ctx_lens, in.scale, out, c.options,
                             path);
    };
    if (path == ops::AttentionPath::matrix && !ops::matrix_attention_supports(shape).ok) {
      if (in.total > 0) expect_error(run, "matrix attention path (path argument) cannot take");
      continue;
    }
    if (path == ops::AttentionPath::hopper && !ops::hopper_attention_supports(shape).ok) {
      if (in.total > 0) expect_error(run, "hopper attention path (path argument) cannot take");
      continue;
    }
    run();
    expect_reference(in, dt, out);
  }
}

TEST(PrefillAttention, CausalOverCachedPrefixAndNewTokens) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) run_prefill_case(dt, {4, 2, 64, 8, {5, 3, 1, 1}, {0, 7, 30, 0}});
  Tensor q = ctx().empty({3, 4, 64}, DType::bf16), kc = ctx().empty({4, 8, 2, 64}, DType::bf16);
  Tensor tables = ctx().empty({2, 2}, DType::i32);
  EXPECT_THROW(ops::prefill_attention(ctx(), q, kc, kc, tables, {2, 2}, {2, 2}, 0.1f, q), Error);  // 4 rows, q has 3
  EXPECT_THROW(ops::prefill_attention(ctx(), q, kc, kc, tables, {2, 1}, {1, 1}, 0.1f, q), Error);  // context < new
}

// Lengths that are no multiple of any tile (the 64-row query tiles, the 64- and 32-key tiles),
// an empty sequence among others, every head dim, grouped and multi-query heads.
TEST(PrefillAttention, TileEdgesHeadDimsAndGroups) {
  run_prefill_case(DType::bf16, {4, 1, 64, 16, {63, 0, 65, 1}, {0, 5, 64, 129}});
  run_prefill_case(DType::f16, {2, 2, 80, 7, {7, 20}, {0, 33}});
  run_prefill_case(DType::bf16, {3, 1, 96, 16, {33}, {31}});
  run_prefill_case(DType::bf16, {4, 2, 128, 16, {130, 2}, {0, 60}});
  run_prefill_case(DType::f16, {2, 1, 256, 16, {40, 3}, {30, 0}});
  run_prefill_case(DType::bf16, {9, 3, 64, 16, {37, 1}, {0, 37}});  // SmolLM2's heads: 21-token tiles
  // Cache blocks that do not divide a 64-key tile (a tile's keys lie in two or three blocks),
  // and blocks of half a tile and of two tiles.
  run_prefill_case(DType::bf16, {4, 2, 128, 24, {100, 3}, {20, 70}});
  run_prefill_case(DType::f16, {4, 1, 64, 12, {70, 1}, {30, 5}});
  run_prefill_case(DType::bf16, {4, 2, 128, 32, {100, 5}, {30, 70}});
  run_prefill_case(DType::f16, {4, 1, 64, 128, {90, 2}, {100, 0}});
}

TEST(PrefillAttention, WindowAndSoftCap) {
  run_prefill_case(DType::bf16, {4, 2, 64, 16, {100, 1, 70}, {0, 90, 40}, {.window = 37}});
  run_prefill_case(DType::f16, {2, 1, 128, 8, {65, 9}, {3, 0}, {.window = 1}});
  run_prefill_case(DType::bf16, {2, 2, 64, 16, {70, 4}, {10, 100}, {.window = 0, .softcap = 5.0f}});
  run_prefill_case(DType::f32, {2, 1, 64, 16, {20}, {50}, {.window = 30, .softcap = 20.0f}});
}

// Sharp rows (scores of tens of units): a row's maximum keeps growing by more than the matrix
// kernels let their reference maxima lag (2^8) on later key tiles of long rows, not only on the
// first, in the prefill kernel, the decode kernel and a split's partitions.
TEST(PrefillAttention, SharpScoresMoveTheReferenceMaxima) {
  run_prefill_case(DType::bf16, {4, 2, 128, 16, {150, 1}, {0, 900}, {}, 64.0f});
  run_prefill_case(DType::f16, {2, 1, 64, 16, {70, 2}, {300, 0}, {}, 48.0f});
  // A negative scale (the maximum does not commute with it: the matrix kernels scale the scores
  // in place before the maximum instead of in the exponential).
  run_prefill_case(DType::bf16, {4, 2, 64, 16, {90, 1}, {0, 300}, {}, -4.0f});
}

// Decode as the model runs it: one new token per sequence after long contexts, few sequences
// (the matrix path splits the contexts over several blocks and merges them), groups of 1 to 8
// query heads per key/value head packed into the rows.
TEST(PrefillAttention, SingleTokensAfterLongContexts) {
  run_prefill_case(DType::bf16, {8, 2, 128, 16, {1, 1, 1}, {1299, 700, 0}});
  run_prefill_case(DType::f16, {8, 1, 64, 16, {1}, {2000}});
  run_prefill_case(DType::bf16, {3, 3, 64, 8, {1, 1}, {600, 257}, {.window = 300}});
  run_prefill_case(DType::bf16, {6, 2, 96, 16, {1, 2}, {1100, 520}, {.window = 0, .softcap = 10.0f}});
  DeterministicScope deterministic(ctx());  // no split: a row's keys in one block
  run_prefill_case(DType::bf16, {8, 2, 128, 16, {1, 1}, {1299, 5}});
}

// Sequences whose new tokens x group fit one 16-row fragment: the matrix decode kernel takes
// them (several tokens: the causal edge inside the fragment), deterministic mode's plans put
// them in query tiles of the prefill kernel; both against float64.
TEST(PrefillAttention, FewNewTokensOnTheDecodeKernelAndInQueryTiles) {
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic: query tiles" : "decode kernel");
    std::optional<DeterministicScope> scope;
    if (deterministic) scope.emplace(ctx());
    run_prefill_case(DType::bf16, {8, 2, 64, 16, {4, 1, 2, 0}, {37, 200, 0, 5}});  // group 4: up to 4 tokens
    run_prefill_case(DType::f16, {16, 1, 80, 8, {1, 1}, {300, 17}});               // group 16: one token
    run_prefill_case(DType::bf16, {2, 2, 256, 16, {3, 8}, {40, 33}, {.window = 20}});
    run_prefill_case(DType::f16, {4, 4, 96, 16, {16, 1}, {1, 150}, {.window = 0, .softcap = 8.0f}});
    // Cache blocks smaller than a key tile, of sizes that straddle its edges: a tile's slots
    // come from several table entries, and the decode kernel's table window moves every few
    // tiles.
    run_prefill_case(DType::bf16, {8, 2, 64, 3, {1, 2}, {200, 75}});
    run_prefill_case(DType::f16, {4, 1, 128, 1, {1}, {90}});
    run_prefill_case(DType::bf16, {8, 2, 64, 3, {1, 1}, {400, 130}, {.window = 100, .softcap = 20.0f}});
  }
}

// A long prompt in one chunk and as a cached prefix plus a chunk (chunked prefill, prefix hits).
TEST(PrefillAttention, LongPromptWholeAndChunked) {
  const int n = ctx().caps().emulator() ? 300 : 1000;
  run_prefill_case(DType::bf16, {8, 2, 128, 16, {n}, {0}});
  run_prefill_case(DType::bf16, {8, 2, 128, 16, {n / 3, 1}, {n - n / 3, n}});
  // One past a power of two: every tile size leaves a remainder (on the GPU only: the float64
  // reference and the emulated kernel take minutes at this length).
  if (!ctx().caps().emulator()) run_prefill_case(DType::bf16, {2, 1, 128, 16, {4097}, {0}});
}

// The matrix decode kernel under plans forced past what the automatic choice gives this device:
// blocks of 1 to 5 and 8 warps (their rows merged in shared memory in rounds; 5 and 8 where
// the device's shared memory takes them), with and without partitions
// (merged by a second launch or by the last block of each split), runs that leave some warps
// of a block no keys, and sequences of several new tokens (the causal edge inside the
// fragment); each against float64.
TEST(MatrixDecodeAttention, WarpsOfABlockAndPartitionsMerge) {
  // Only a GPU without matrix cores lacks the kernel (the emulator always runs it).
  const auto paths = ops::available_paths<ops::AttentionPaths>(ctx().caps());
  if (std::find(paths.begin(), paths.end(), ops::AttentionPath::matrix) == paths.end()) {
    ASSERT_FALSE(ctx().caps().emulator()) << "the emulator lost the matrix attention path";
    GTEST_SKIP() << "no matrix cores on this device: " << ops::AttentionPaths::available(ctx().caps(), ops::AttentionPath::matrix).reason;
  }
  // Cache blocks of 16 tokens, and of 3 (a key tile's slots from several table entries, the
  // table window moving every few tiles of each partition).
  for (int block_size : {16, 3}) {
    SCOPED_TRACE(::testing::Message() << "cache blocks of " << block_size);
    const PrefillCase c{8, 2, 64, block_size, {1, 1, 3, 1}, {1299, 700, 40, 0}, {}, 4.0f};
    const PrefillInputs in = make_prefill_inputs(DType::bf16, c, ops::KvCacheFormat::model, 5, 5);
    const int seqs = static_cast<int>(c.new_lens.size());
    Tensor seq_info_h = Tensor::empty_host({3 * seqs}, DType::i32), decode_seqs_h = Tensor::empty_host({seqs}, DType::i32);
    for (int s = 0, row = 0; s < seqs; row += c.new_lens[s], ++s) {
      seq_info_h.data<int32_t>()[3 * s] = row;
      seq_info_h.data<int32_t>()[3 * s + 1] = c.new_lens[s];
      seq_info_h.data<int32_t>()[3 * s + 2] = in.ctx_lens[s];
      decode_seqs_h.data<int32_t>()[s] = s;
    }
    const Tensor seq_info = ctx().to_device(seq_info_h), decode_seqs = ctx().to_device(decode_seqs_h);
    const size_t warp_bytes = kernels::matrix_decode_warp_bytes(c.head_dim, 2);
    struct Plan {
      int warps, partition;  // partition 0: none
    };
    for (const Plan p : {Plan{1, 0}, Plan{2, 0}, Plan{4, 0}, Plan{3, 0}, Plan{5, 0}, Plan{8, 0}, Plan{1, 256}, Plan{2, 512},
                         Plan{4, 128}, Plan{3, 96}, Plan{8, 256}}) {
      SCOPED_TRACE(::testing::Message() << p.warps << " warps, partitions of " << p.partition);
      if (p.warps * warp_bytes > ctx().caps().shared_memory_per_block_optin) continue;
      kernels::MatrixDecodeArgs a{};
      a.seqs = seqs;
      a.q_heads = c.q_heads;
      a.kv_heads = c.kv_heads;
      a.head_dim = c.head_dim;
      a.block_size = c.block_size;
      a.max_blocks_per_seq = static_cast<int>(in.tables.size(1));
      a.scale = in.scale;
      a.window = 0;
      a.softcap = 0.0f;
      a.warps = p.warps;
      a.partition = p.partition;
      a.parts = p.partition > 0 ? (in.max_ctx + p.partition - 1) / p.partition : 1;
      const int64_t ws = kernels::matrix_decode_workspace(a);
      Tensor workspace = ws > 0 ? ctx().empty({ws}, DType::f32) : Tensor();
      // A split merges in a second launch (no counters) or by its last blocks (counters, twice:
      // the first launch must leave them zero for the second).
      Tensor zeros = Tensor::empty_host({kernels::matrix_decode_counters(a)}, DType::i32);
      std::fill_n(zeros.data<int32_t>(), zeros.numel(), 0);
      const Tensor counters = ctx().to_device(zeros);
      for (int merge = 0; merge < (a.parts > 1 ? 3 : 1); ++merge) {
        SCOPED_TRACE(merge == 0 ? "second launch" : "last blocks");
        Tensor out = ctx().empty({in.total, c.q_heads, c.head_dim}, DType::bf16);
        poison(out);
        kernels::matrix_decode_attention<bfloat16, bfloat16>(
            a, in.q.data<bfloat16>(), in.cache.cache.k.data<bfloat16>(), in.cache.cache.v.data<bfloat16>(), {},
            in.tables.data<int32_t>(), seq_info.data<int32_t>(), decode_seqs.data<int32_t>(),
            ws > 0 ? workspace.data<float>() : nullptr, merge == 0 ? nullptr : counters.data<int32_t>(),
            out.data<bfloat16>(), ctx().warp_size(), ctx().stream().get());
        expect_reference(in, DType::bf16, out);
        const Tensor left = ctx().to_host(counters);
        for (int64_t i = 0; i < left.numel(); ++i) ASSERT_EQ(left.data<int32_t>()[i], 0) << "counter " << i;
      }
    }
  }
}

// The automatic plan on an H200-sized device (132 multiprocessors, 227 KiB of shared memory a
// block may take) and an AMD-sized one (64 KiB): blocks within the shared memory, one wave of
// resident warps at most, partitions of whole tiles covering the context.
TEST(MatrixDecodeAttention, PlanFillsOneWaveWithinTheSharedMemory) {
  struct Shape {
    int seqs, max_context, head_dim, kv_bytes;
  };
  for (const size_t shared : {size_t{227} * 1024, size_t{64} * 1024}) {
    for (const Shape sh : {Shape{16, 4096, 128, 2}, Shape{1, 4096, 128, 2}, Shape{64, 640, 128, 2},
                           Shape{128, 2048, 128, 2}, Shape{1, 8192, 256, 2}, Shape{3, 100, 64, 1}, Shape{1, 1, 80, 2},
                           Shape{4, 70000, 96, 1}}) {
      SCOPED_TRACE(::testing::Message() << sh.seqs << " x " << sh.max_context << ", head dim " << sh.head_dim
                                        << ", shared " << shared);
      kernels::MatrixDecodeArgs a{};
      a.seqs = sh.seqs;
      a.q_heads = 32;
      a.kv_heads = 8;
      a.head_dim = sh.head_dim;
      a.kv_bytes = sh.kv_bytes;
      kernels::choose_matrix_decode_split(a, sh.max_context, 132, shared);
      EXPECT_GE(a.warps, 1);
      EXPECT_LE(a.warps, kernels::kMatrixDecodeMaxWarps);
      EXPECT_LE(a.warps * kernels::matrix_decode_warp_bytes(sh.head_dim, sh.kv_bytes), shared);
      EXPECT_LE(int64_t{a.warps} * a.parts * a.seqs * a.kv_heads, std::max<int64_t>(8 * 132, a.seqs * a.kv_heads));
      if (a.parts > 1) {
        EXPECT_EQ(a.partition % 16, 0);
        EXPECT_GE(int64_t{a.partition} * a.parts, sh.max_context);
        EXPECT_LT(int64_t{a.partition} * (a.parts - 1), sh.max_context);
        EXPECT_GE(a.partition, 32 * a.warps);  // each warp at least 32 keys
      } else {
        EXPECT_EQ(a.partition, 0);
      }
    }
  }
  // 16 sequences of 4096 keys on the H200: 128 (sequence, head) pairs of 8 warps, no partitions
  // (no second launch).
  kernels::MatrixDecodeArgs a{};
  a.seqs = 16;
  a.q_heads = 32;
  a.kv_heads = 8;
  a.head_dim = 128;
  kernels::choose_matrix_decode_split(a, 4096, 132, 227 * 1024);
  EXPECT_EQ(a.warps, 8);
  EXPECT_EQ(a.parts, 1);
}

TEST(KvCache, WritesRowsThroughSlotsAndSkipsPadding) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t blocks = 5, bs = 4, kvh = 2, hd = 24, tokens = 7;
    Tensor cache_k = ctx().empty({blocks, bs, kvh, hd}, dt), cache_v = ctx().empty({blocks, bs, kvh, hd}, dt);
    Tensor init_k = random_host({blocks, bs, kvh, hd}, dt), init_v = random_host({blocks, bs, kvh, hd}, dt);
    cache_k.copy_from(init_k, ctx().stream().get());
    cache_v.copy_from(init_v, ctx().stream().get());
    // k and v as views into one fused [tokens, (q + k + v) heads * hd] buffer.
    Tensor fused_h = random_host({tokens, 6 * hd}, dt);
    Tensor fused = ctx().to_device(fused_h);
    Tensor k = fused.slice(1, 2 * hd, 4 * hd).unflatten(1, {kvh, hd});
    Tensor v = fused.slice(1, 4 * hd, 6 * hd).unflatten(1, {kvh, hd});
    const int64_t slots[tokens] = {3, 0, -1, 19, 8, 9, -1};
    Tensor slots_h = Tensor::empty_host({tokens}, DType::i64);
    std::copy(slots, slots + tokens, slots_h.data<int64_t>());
    ops::kv_write(ctx(), k, v, ctx().to_device(slots_h), cache_k, cache_v);
    std::vector<double> want_k = to_doubles(init_k), want_v = to_doubles(init_v);
    const std::vector<double> f = to_doubles(fused_h);
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      for (int64_t i = 0; i < kvh * hd; ++i) {
        want_k[slots[t] * kvh * hd + i] = f[t * 6 * hd + 2 * hd + i];
        want_v[slots[t] * kvh * hd + i] = f[t * 6 * hd + 4 * hd + i];
      }
    }
    EXPECT_TRUE(all_close(ctx().to_host(cache_k), want_k, 0, 0));
    EXPECT_TRUE(all_close(ctx().to_host(cache_v), want_v, 0, 0));

    slots_h.data<int64_t>()[4] = blocks * bs;  // one past the end
    try {
      ops::kv_write(ctx(), k, v, ctx().to_device(slots_h), cache_k, cache_v);
      FAIL() << "slot past the cache accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("slot 20 of token 4"), std::string::npos) << e.what();
    }

    // Unchecked (the engine's layers, slots validated on the host): new rows of the other tokens
    // are written, the bad slot's token is not, and nothing throws.
    const Tensor fresh_h = random_host({tokens, 6 * hd}, dt);
    fused.copy_from(fresh_h, ctx().stream().get());
    ops::kv_write(ctx(), k, v, ctx().to_device(slots_h), cache_k, cache_v, false);
    const std::vector<double> g = to_doubles(fresh_h);
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0 || t == 4) continue;
      for (int64_t i = 0; i < kvh * hd; ++i) {
        want_k[slots[t] * kvh * hd + i] = g[t * 6 * hd + 2 * hd + i];
        want_v[slots[t] * kvh * hd + i] = g[t * 6 * hd + 4 * hd + i];
      }
    }
    EXPECT_TRUE(all_close(ctx().to_host(cache_k), want_k, 0, 0));
    EXPECT_TRUE(all_close(ctx().to_host(cache_v), want_v, 0, 0));
  }
}

// 8-bit caches on every path: the portable kernels (decode, and prefill through them) and the
// matrix kernels (prefill tiles, the decode kernel's ring), split and unsplit, windows and soft-cap.
TEST(KvCache8Bit, AttentionReadsTheCodesTimesTheirScales) {
  for (ops::KvCacheFormat format : {ops::KvCacheFormat::fp8_e4m3, ops::KvCacheFormat::int8}) {
    run_case(DType::bf16, {8, 2, 64, 16, {1, 17, 40}}, format);
    run_case(DType::f32, {4, 4, 128, 16, {700, 5}}, format);
    run_case(DType::f16, {6, 2, 96, 7, {31}, {.window = 10, .softcap = 0.0f}}, format);
    run_prefill_case(DType::bf16, {4, 1, 64, 16, {63, 0, 65, 1}, {0, 5, 64, 129}}, format);
    run_prefill_case(DType::f16, {2, 2, 80, 7, {7, 20}, {0, 33}}, format);
    run_prefill_case(DType::bf16, {8, 2, 128, 16, {1, 1, 4}, {1299, 0, 37}}, format);  // split, decode kernel
    run_prefill_case(DType::bf16, {8, 2, 64, 3, {1, 2}, {500, 90}}, format);  // blocks smaller than a key tile
    run_prefill_case(DType::bf16, {2, 2, 256, 16, {3, 40}, {40, 33}, {.window = 20}}, format);
    run_prefill_case(DType::bf16, {2, 2, 64, 16, {70, 4}, {10, 100}, {.window = 0, .softcap = 5.0f}}, format);
    DeterministicScope deterministic(ctx());
    run_prefill_case(DType::bf16, {8, 2, 128, 16, {1, 2}, {300, 5}}, format);
  }
}

// Small int8 V scales (values below 0.008, scales down to 2^-18) under keys large enough to
// spread the scores over several units, over a long context: most keys' probabilities (relative
// to the maximum, about 2^-7) times such scales fall below f16's range, so the decode kernel
// must not fold the V scales into the probabilities it rounds to f16 (they hold most of the
// weight together).
TEST(KvCache8Bit, SmallInt8ScalesOverALongContext) {
  const int n = ctx().caps().emulator() ? 600 : 2000;
  run_prefill_case(DType::bf16, {4, 1, 64, 16, {1, 1}, {n, n / 2}}, ops::KvCacheFormat::int8, 4, 14);
}

// kv_write's encodings on values of every magnitude: e4m3 gives the nearest code to value /
// head scale (ties either way), int8 the row's scale = largest magnitude / 127 and codes within
// half a step of value / scale; rows the slots skip keep their bytes.
TEST(KvCache8Bit, WritesTheNearestCodesAndTheScales) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (ops::KvCacheFormat format : {ops::KvCacheFormat::fp8_e4m3, ops::KvCacheFormat::int8}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", " << ops::kv_cache_format_name(format));
      const int64_t blocks = 3, bs = 4, kvh = 3, hd = 48, tokens = 9;
      std::vector<double> x(static_cast<size_t>(2 * tokens * kvh * hd));
      for (size_t i = 0; i < x.size(); ++i) {  // magnitudes from 2^-12 to 2^6, some rows all zero
        const bool zero_row = (i / hd) % 7 == 3;
        const double u = std::uniform_real_distribution<double>(-1.0, 1.0)(rng());
        x[i] = zero_row ? 0.0 : u * std::ldexp(1.0, static_cast<int>((i / hd) % 19) - 12);
      }
      const Tensor xh = host_of(x, {2, tokens, kvh, hd}, dt);
      const std::vector<double> xr = to_doubles(xh);  // as rounded to dt
      const std::vector<double> head_scale = {0.37, 1.0, 0.011};
      ops::PagedKv cache{ctx().empty({blocks, bs, kvh, hd}, DType::i8), ctx().empty({blocks, bs, kvh, hd}, DType::i8),
                         format, Tensor(), Tensor()};
      if (format == ops::KvCacheFormat::fp8_e4m3) {
        cache.k_scale = ctx().to_device(host_of(head_scale, {kvh}, DType::f32));
        cache.v_scale = ctx().to_device(host_of({2.0, 0.5, 3.0}, {kvh}, DType::f32));
      } else {
        cache.k_scale = ctx().empty({blocks, bs, kvh}, DType::f32);
        cache.v_scale = ctx().empty({blocks, bs, kvh}, DType::f32);
        LW_CUDA_CHECK(cudaMemsetAsync(cache.k_scale.data_ptr(), 0, cache.k_scale.nbytes(), ctx().stream().get()));
        LW_CUDA_CHECK(cudaMemsetAsync(cache.v_scale.data_ptr(), 0, cache.v_scale.nbytes(), ctx().stream().get()));
      }
      LW_CUDA_CHECK(cudaMemsetAsync(cache.k.data_ptr(), 0x5a, cache.k.nbytes(), ctx().stream().get()));
      LW_CUDA_CHECK(cudaMemsetAsync(cache.v.data_ptr(), 0x5a, cache.v.nbytes(), ctx().stream().get()));
      const int64_t slots[tokens] = {3, 0, -1, 11, 8, 9, -1, 1, 2};
      Tensor slots_h = Tensor::empty_host({tokens}, DType::i64);
      std::copy(slots, slots + tokens, slots_h.data<int64_t>());
      const Tensor xd = ctx().to_device(xh);
      ops::kv_write(ctx(), xd.slice(0, 0, 1).view({tokens, kvh, hd}), xd.slice(0, 1, 2).view({tokens, kvh, hd}),
                    ctx().to_device(slots_h), cache);
      ctx().synchronize();
      for (int which = 0; which < 2; ++which) {
        const Tensor codes = ctx().to_host(which == 0 ? cache.k : cache.v);
        const Tensor scales = ctx().to_host(which == 0 ? cache.k_scale : cache.v_scale);
        const int8_t* c = codes.data<int8_t>();
        std::vector<bool> written(static_cast<size_t>(blocks * bs), false);
        for (int64_t t = 0; t < tokens; ++t) {
          if (slots[t] < 0) continue;
          written[static_cast<size_t>(slots[t])] = true;
          for (int64_t h = 0; h < kvh; ++h) {
            const double* row = &xr[static_cast<size_t>(((which * tokens + t) * kvh + h) * hd)];
            const int8_t* crow = c + (slots[t] * kvh + h) * hd;
            if (format == ops::KvCacheFormat::int8) {
              double amax = 0;
              for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::abs(row[i]));
              const double s = scales.data<float>()[slots[t] * kvh + h];
              ASSERT_NEAR(s, amax / 127, 1e-6 * amax) << "token " << t << " head " << h;
              for (int64_t i = 0; i < hd; ++i) {
                ASSERT_LE(std::abs(crow[i] - (s > 0 ? row[i] / s : 0.0)), 0.5 + 1e-3) << "token " << t << " element " << i;
              }
            } else {
              const double s = scales.data<float>()[h];
              for (int64_t i = 0; i < hd; ++i) {
                const uint8_t got = static_cast<uint8_t>(crow[i]);
                ASSERT_FALSE((got & 0x7F) == 0x7F) << "NaN code for token " << t << " element " << i;
                const double err = std::abs(e4m3_value(got) * s - row[i]);
                for (int b = 0; b < 256; ++b) {
                  if ((b & 0x7F) == 0x7F) continue;
                  ASSERT_LE(err, std::abs(e4m3_value(static_cast<uint8_t>(b)) * s - row[i]) * (1 + 1e-9) + 1e-30)
                      << "token " << t << " element " << i << ": code " << int(got) << " where " << b << " is nearer";
                }
              }
            }
          }
        }
        for (int64_t slot = 0; slot < blocks * bs; ++slot) {
          if (written[static_cast<size_t>(slot)]) continue;
          for (int64_t i = 0; i < kvh * hd; ++i) ASSERT_EQ(c[slot * kvh * hd + i], 0x5a) << "slot " << slot << " written";
        }
      }
    }
  }
}

TEST(KvCache8Bit, RefusesMismatchedCachesAndNames) {
  const int64_t blocks = 2, bs = 4, kvh = 2, hd = 32;
  Tensor k = ctx().to_device(random_host({3, kvh, hd}, DType::bf16));
  Tensor slots = ctx().to_device([] {
    Tensor t = Tensor::empty_host({3}, DType::i64);
    for (int i = 0; i < 3; ++i) t.data<int64_t>()[i] = i;
    return t;
  }());
  Tensor codes = ctx().empty({blocks, bs, kvh, hd}, DType::i8);
  // An i8 cache without the format, bf16 caches given as 8-bit, scales of the wrong shape.
  expect_error([&] { ops::kv_write(ctx(), k, k, slots, codes, codes); }, "must be bf16 for a KV cache of format auto");
  Tensor wide = ctx().empty({blocks, bs, kvh, hd}, DType::bf16);
  Tensor per_head = ctx().empty({kvh}, DType::f32), per_slot = ctx().empty({blocks, bs, kvh}, DType::f32);
  expect_error([&] { ops::kv_write(ctx(), k, k, slots, {wide, wide, ops::KvCacheFormat::int8, per_slot, per_slot}); },
               "must be i8 for a KV cache of format int8");
  expect_error([&] { ops::kv_write(ctx(), k, k, slots, {codes, codes, ops::KvCacheFormat::int8, per_head, per_head}); },
               "k_scale");
  expect_error([&] { ops::kv_write(ctx(), k, k, slots, {codes, codes, ops::KvCacheFormat::fp8_e4m3, per_slot, per_slot}); },
               "must be a contiguous f32 [2]");
  expect_error([&] { ops::kv_write(ctx(), k, k, slots, {codes, codes, ops::KvCacheFormat::fp8_e4m3}); }, "k_scale");
  expect_error([&] { ops::parse_kv_cache_format("fp16"); }, "is not one of auto, fp8 (fp8_e4m3), int8");
  EXPECT_EQ(ops::parse_kv_cache_format("fp8"), ops::KvCacheFormat::fp8_e4m3);
  EXPECT_EQ(ops::parse_kv_cache_format("auto"), ops::KvCacheFormat::model);
}

}  // namespace
}  // namespace lw::test
