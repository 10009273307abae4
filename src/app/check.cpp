// `lightwave check`: each op family once or a few times on small random inputs, against a
// float64 reference computed here on the host. The bounds are those of the op tests
// (tests/test_<family>.cpp): one rounding to the output type plus a few float ulps of
// arithmetic, or exact equality where the op is exact (ids, copies, the cache write).
#include "app/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "gpu/numeric.h"
#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/quant.h"
#include "ops/reduce.h"
#include "ops/rope.h"
#include "ops/sampling.h"
#include "ops/softmax.h"

namespace lw::app {
namespace {

using Values = std::vector<double>;

// Unit round-off of a float dtype: the relative error of one rounding to it.
double unit_roundoff(DType dt) {
  return dt == DType::f32 ? 0x1p-24 : dt == DType::f16 ? 0x1p-11 : 0x1p-8;
}

// The absolute error of one rounding to a float dtype below its normal range: half the step of
// its subnormals (f16: 2^-25; a value of [-4, 4] lands there about once in 10^5).
double subnormal_roundoff(DType dt) {
  return dt == DType::f32 ? 0x1p-150 : dt == DType::f16 ? 0x1p-25 : 0x1p-134;
}

double round_to(DType dt, double v) {
  const float f = static_cast<float>(v);
  switch (dt) {
    case DType::f16: return gpu::to_float(gpu::from_float<half>(f));
    case DType::bf16: return gpu::to_float(gpu::from_float<bfloat16>(f));
    default: return f;
  }
}

// Elements of a host tensor (float or integer dtype, contiguous) as doubles.
Values values(const Tensor& host) {
  Values out(static_cast<size_t>(host.numel()));
  for (int64_t i = 0; i < host.numel(); ++i) {
    switch (host.dtype()) {
      case DType::f32: out[i] = host.data<float>()[i]; break;
      case DType::f16: out[i] = gpu::to_float(host.data<half>()[i]); break;
      case DType::bf16: out[i] = gpu::to_float(host.data<bfloat16>()[i]); break;
      case DType::i8: out[i] = host.data<int8_t>()[i]; break;
      case DType::i32: out[i] = host.data<int32_t>()[i]; break;
      case DType::i64: out[i] = static_cast<double>(host.data<int64_t>()[i]); break;
      default: LW_FAIL("check: no values of a " << dtype_name(host.dtype()) << " tensor");
    }
  }
  return out;
}

Tensor host_i32(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty_host(std::move(shape), DType::i32);
  LW_CHECK(t.numel() == static_cast<int64_t>(v.size()), "check: " << v.size() << " ids for " << t.describe());
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

class Checker {
 public:
  Checker(Context& ctx, uint64_t seed) : ctx_(ctx), rng_(seed) {}

  int failures() const { return failures_; }

  // A host tensor of uniform values in [lo, hi), rounded to dt (the reference reads what the
  // kernel reads).
  Tensor random(std::vector<int64_t> shape, DType dt, double lo = -1, double hi = 1) {
    Tensor t = Tensor::empty_host(std::move(shape), dt);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float v = static_cast<float>(dist(rng_));
      switch (dt) {
        case DType::f32: t.data<float>()[i] = v; break;
        case DType::f16: t.data<half>()[i] = gpu::from_float<half>(v); break;
        case DType::bf16: t.data<bfloat16>()[i] = gpu::from_float<bfloat16>(v); break;
        case DType::i8: t.data<int8_t>()[i] = static_cast<int8_t>(std::lround(v)); break;
        default: LW_FAIL("check: no random " << dtype_name(dt) << " tensor");
      }
    }
    return t;
  }
  std::mt19937_64& rng() { return rng_; }
  Context& ctx() { return ctx_; }
  Tensor dev(const Tensor& host) { return ctx_.to_device(host); }
  Values got(const Tensor& device) { return values(ctx_.to_host(device)); }

  // One row of the table: the error and bound of the element whose error is the largest
  // fraction of its bound; a NaN or infinity where the reference is finite, or a size
  // mismatch, fails.
  void report(const std::string& family, const std::string& name, const Values& got, const Values& ref,
              const Values& bound) {
    double worst_err = 0, worst_bound = 0, worst_ratio = 0;
    bool ok = got.size() == ref.size() && bound.size() == ref.size();
    for (size_t i = 0; ok && i < ref.size(); ++i) {
      double err = got[i] == ref[i] ? 0.0  // equal infinities are no error
                   : std::isfinite(got[i]) || !std::isfinite(ref[i]) ? std::abs(got[i] - ref[i]) : INFINITY;
      if (std::isnan(err)) err = INFINITY;
      const double ratio = err == 0 ? 0 : bound[i] > 0 ? err / bound[i] : INFINITY;
      if (i == 0 || ratio > worst_ratio) {
        worst_ratio = ratio;
        worst_err = err;
        worst_bound = bound[i];
      }
    }
    ok = ok && worst_err <= worst_bound;
    failures_ += !ok;
    std::printf("%-12s %-50s %12.3e %12.3e  %s\n", family.c_str(), name.c_str(), worst_err, worst_bound,
                ok ? "PASS" : "FAIL");
  }
  // |got - ref| <= rel * |ref| + abs element by element.
  void report(const std::string& family, const std::string& name, const Values& got, const Values& ref, double rel,
              double abs) {
    Values bound(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) bound[i] = rel * std::abs(ref[i]) + abs;
    report(family, name, got, ref, bound);
  }

 private:
  Context& ctx_;
  std::mt19937_64 rng_;
  int failures_ = 0;
};

std::string with_dtype(const std::string& name, DType dt) { return name + " " + dtype_name(dt); }

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

double silu(double x) { return x / (1 + std::exp(-x)); }
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

void check_elementwise(Checker& c) {
  const int64_t n = 1031;
  for (DType dt : kFloatTypes) {
    // One rounding to the output type plus a few float ulps (tests/test_elementwise.cpp).
    const double rel = unit_roundoff(dt) + 8 * unit_roundoff(DType::f32);
    Tensor ah = c.random({n}, dt, -4, 4), bh = c.random({n}, dt, -4, 4);
    const Values a = values(ah), b = values(bh);
    Tensor x = c.dev(ah), y = c.dev(bh), out = c.ctx().empty({n}, dt);
    Values ref(n);
    ops::add(c.ctx(), x, y, out);
    for (int64_t i = 0; i < n; ++i) ref[i] = a[i] + b[i];
    c.report("elementwise", with_dtype("add [1031]", dt), c.got(out), ref, rel, 1e-7);
    ops::mul(c.ctx(), x, y, out);
    for (int64_t i = 0; i < n; ++i) ref[i] = a[i] * b[i];
    c.report("elementwise", with_dtype("mul [1031]", dt), c.got(out), ref, rel, 1e-7);
    ops::scale(c.ctx(), x, 0.375f, out);
    for (int64_t i = 0; i < n; ++i) ref[i] = a[i] * 0.375;
    c.report("elementwise", with_dtype("scale [1031]", dt), c.got(out), ref, rel, 1e-7);
    ops::activation(c.ctx(), ops::Activation::gelu_erf, x, out);
    for (int64_t i = 0; i < n; ++i) ref[i] = gelu_erf(a[i]);
    c.report("elementwise", with_dtype("gelu_erf [1031]", dt), c.got(out), ref, rel, 1e-6);

    const int64_t rows = 3, inter = 130;
    Tensor gh = c.random({rows, 2 * inter}, dt, -4, 4);
    const Values g = values(gh);
    Tensor gated = c.ctx().empty({rows, inter}, dt);
    ops::act_mul(c.ctx(), ops::Activation::silu, c.dev(gh), gated);
    Values gref(rows * inter);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < inter; ++i) gref[r * inter + i] = silu(g[r * 2 * inter + i]) * g[r * 2 * inter + inter + i];
    c.report("elementwise", with_dtype("act_mul silu [3, 260]", dt), c.got(gated), gref, rel, 4e-6);

    Tensor fh = c.random({n}, DType::f32, -4, 4);
    const Values f = values(fh);
    ops::cast(c.ctx(), c.dev(fh), out);
    c.report("elementwise", with_dtype("cast f32 ->", dt), c.got(out), f, unit_roundoff(dt), subnormal_roundoff(dt));
  }
}

void check_reduce(Checker& c) {
  const int64_t rows = 7, cols = 1029;
  for (DType dt : kFloatTypes) {
    Tensor xh = c.random({rows, cols}, dt, -5, 4);
    const Values x = values(xh);
    Tensor xd = c.dev(xh), out = c.ctx().empty({rows}, DType::f32), all = c.ctx().empty({1}, DType::f32);
    for (ops::Reduce op : {ops::Reduce::sum, ops::Reduce::max, ops::Reduce::absmax}) {
      auto fold = [&](int64_t begin, int64_t end) {
        double acc = op == ops::Reduce::max ? -INFINITY : 0;
        for (int64_t i = begin; i < end; ++i)
          acc = op == ops::Reduce::sum ? acc + x[i] : std::max(acc, op == ops::Reduce::absmax ? std::abs(x[i]) : x[i]);
        return acc;
      };
      const char* name = op == ops::Reduce::sum ? "sum" : op == ops::Reduce::max ? "max" : "absmax";
      // Sums accumulate float rounding over cols terms (tests/test_reduce.cpp); max is exact.
      const double abs = op == ops::Reduce::sum ? 1e-6 * static_cast<double>(cols) : 0;
      ops::row_reduce(c.ctx(), op, xd, out);
      Values ref;
      for (int64_t r = 0; r < rows; ++r) ref.push_back(fold(r * cols, (r + 1) * cols));
      c.report("reduce", with_dtype(std::string("row_reduce ") + name + " [7, 1029]", dt), c.got(out), ref, 0, abs);
      ops::tensor_reduce(c.ctx(), op, xd, all);
      c.report("reduce", with_dtype(std::string("tensor_reduce ") + name + " [7, 1029]", dt), c.got(all),
               {fold(0, rows * cols)}, 0, abs * static_cast<double>(rows));
    }
  }
}

void check_norm(Checker& c) {
  const int64_t rows = 5, hidden = 1000;
  const float eps = 1e-5f;
  for (DType dt : kFloatTypes) {
    Tensor xh = c.random({rows, hidden}, dt, -2, 3), rh = c.random({rows, hidden}, dt, -2, 2);
    Tensor wh = c.random({hidden}, dt, 0.5, 1.5), bh = c.random({hidden}, dt, -1, 1);
    const Values x = values(xh), res = values(rh), w = values(wh), b = values(bh);
    Tensor out = c.ctx().empty({rows, hidden}, dt);
    // RMSNorm rounds twice (before and after the weight), LayerNorm once (tests/test_norm.cpp).
    const double rel = 2 * unit_roundoff(dt) + 1e-5, abs = 1e-5;
    for (int kind = 0; kind < 3; ++kind) {  // rms_norm, add_rms_norm, layer_norm with a bias
      Tensor resd = c.dev(rh);
      if (kind == 0) ops::rms_norm(c.ctx(), c.dev(xh), c.dev(wh), eps, out);
      if (kind == 1) ops::add_rms_norm(c.ctx(), c.dev(xh), resd, c.dev(wh), eps, out);
      if (kind == 2) ops::layer_norm(c.ctx(), c.dev(xh), c.dev(wh), c.dev(bh), eps, out);
      Values ref(rows * hidden);
      for (int64_t r = 0; r < rows; ++r) {
        Values v(x.begin() + r * hidden, x.begin() + (r + 1) * hidden);
        if (kind == 1)
          for (int64_t i = 0; i < hidden; ++i) v[i] = round_to(dt, v[i] + res[r * hidden + i]);
        double mean = 0, var = 0, ms = 0;
        for (double e : v) mean += e / hidden;
        for (double e : v) {
          var += (e - mean) * (e - mean) / hidden;
          ms += e * e / hidden;
        }
        for (int64_t i = 0; i < hidden; ++i)
          ref[r * hidden + i] = kind == 2 ? (v[i] - mean) / std::sqrt(var + eps) * w[i] + b[i] : v[i] / std::sqrt(ms + eps) * w[i];
      }
      const char* name = kind == 0 ? "rms_norm [5, 1000]" : kind == 1 ? "add_rms_norm [5, 1000]" : "layer_norm [5, 1000]";
      c.report("norm", with_dtype(name, dt), c.got(out), ref, rel, abs);
    }
  }
}

void check_softmax(Checker& c) {
  const int64_t rows = 4, cols = 1000;
  const double temperature = 0.7;
  for (DType dt : kFloatTypes) {
    Tensor xh = c.random({rows, cols}, dt, -8, 8);
    const Values x = values(xh);
    Tensor out = c.ctx().empty({rows, cols}, dt);
    for (bool log : {false, true}) {
      if (log) ops::log_softmax(c.ctx(), c.dev(xh), out, static_cast<float>(temperature));
      else ops::softmax(c.ctx(), c.dev(xh), out, static_cast<float>(temperature));
      Values ref(rows * cols);
      for (int64_t r = 0; r < rows; ++r) {
        const double* row = x.data() + r * cols;
        const double mx = *std::max_element(row, row + cols) / temperature;
        double sum = 0;
        for (int64_t i = 0; i < cols; ++i) sum += std::exp(row[i] / temperature - mx);
        for (int64_t i = 0; i < cols; ++i)
          ref[r * cols + i] = log ? row[i] / temperature - mx - std::log(sum) : std::exp(row[i] / temperature - mx) / sum;
      }
      c.report("softmax", with_dtype(log ? "log_softmax [4, 1000] t=0.7" : "softmax [4, 1000] t=0.7", dt), c.got(out), ref,
               unit_roundoff(dt) + 1e-5, log ? 2e-5 : 1e-7);
    }
  }
}

void check_rope(Checker& c) {
  const int64_t tokens = 5, q_heads = 4, k_heads = 2, head_dim = 64;
  for (DType dt : {DType::f32, DType::bf16}) {
    for (bool neox : {true, false}) {
      ops::RopeConfig cfg;
      cfg.rotary_dim = 48;  // partial rotary
      cfg.neox = neox;
      ops::Rope rope(c.ctx(), cfg);
      Tensor qh = c.random({tokens, q_heads, head_dim}, dt, -2, 2), kh = c.random({tokens, k_heads, head_dim}, dt, -2, 2);
      std::vector<int32_t> pos(tokens);
      for (auto& p : pos) p = static_cast<int32_t>(c.rng()() % 40000);
      Tensor q = c.dev(qh), k = c.dev(kh);
      rope.apply(c.ctx(), q, k, c.dev(host_i32(pos, {tokens})));
      Values got = c.got(q), kgot = c.got(k);
      got.insert(got.end(), kgot.begin(), kgot.end());
      Values x = values(qh), kx = values(kh);
      x.insert(x.end(), kx.begin(), kx.end());
      Values ref = x;
      const int half = cfg.rotary_dim / 2;
      double max_angle = 0;
      for (int64_t row = 0; row < tokens * (q_heads + k_heads); ++row) {
        const int64_t t = row < tokens * q_heads ? row / q_heads : (row - tokens * q_heads) / k_heads;
        const int64_t base = row * head_dim;
        for (int i = 0; i < half; ++i) {
          const double angle = static_cast<float>(static_cast<float>(pos[t]) * rope.inv_freq()[i]);
          max_angle = std::max(max_angle, angle);
          const double cs = std::cos(angle) * rope.mscale(), sn = std::sin(angle) * rope.mscale();
          const int64_t i0 = base + (neox ? i : 2 * i), i1 = base + (neox ? i + half : 2 * i + 1);
          ref[i0] = x[i0] * cs - x[i1] * sn;
          ref[i1] = x[i1] * cs + x[i0] * sn;
        }
      }
      // One rounding plus float sincos of angles up to 4e4 (tests/test_rope.cpp).
      const double abs = 4 * std::ldexp(max_angle, -24) * 2 * rope.mscale() + 1e-6;
      c.report("rope", with_dtype(neox ? "neox rot 48/64, 5 tokens" : "gptj rot 48/64, 5 tokens", dt), got, ref,
               2 * unit_roundoff(dt), abs);
    }
  }
}

void check_embedding(Checker& c) {
  const int64_t vocab = 100, hidden = 64, tokens = 9;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor table = c.random({vocab, hidden}, dt);
    std::vector<int32_t> ids(tokens);
    for (auto& id : ids) id = static_cast<int32_t>(c.rng()() % vocab);
    Tensor out = c.ctx().empty({tokens, hidden}, dt);
    ops::embedding(c.ctx(), c.dev(table), c.dev(host_i32(ids, {tokens})), out);
    const Values t = values(table);
    Values ref;
    for (int32_t id : ids) ref.insert(ref.end(), t.begin() + id * hidden, t.begin() + (id + 1) * hidden);
    c.report("embedding", with_dtype("lookup [100, 64], 9 ids", dt), c.got(out), ref, 0, 0);
  }
}

void check_copy(Checker& c) {
  const int64_t rows = 17, cols = 33;
  Tensor sh = c.random({rows, cols}, DType::f32);
  const Values s = values(sh);
  for (DType dt : kFloatTypes) {
    Tensor dst = c.ctx().empty({cols, rows}, dt);
    ops::copy(c.ctx(), c.dev(sh).transpose(0, 1), dst);
    Values ref(rows * cols);
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < rows; ++j) ref[i * rows + j] = round_to(dt, s[j * cols + i]);
    c.report("copy", with_dtype("transpose [17, 33] f32 ->", dt), c.got(dst), ref, 0, 0);
  }
  Tensor ah = c.random({3, 5}, DType::bf16), bh = c.random({3, 7}, DType::bf16);
  Tensor cat = ops::concat(c.ctx(), {c.dev(ah), c.dev(bh)}, 1);
  const Values a = values(ah), b = values(bh);
  Values ref;
  for (int64_t r = 0; r < 3; ++r) {
    ref.insert(ref.end(), a.begin() + r * 5, a.begin() + (r + 1) * 5);
    ref.insert(ref.end(), b.begin() + r * 7, b.begin() + (r + 1) * 7);
  }
  c.report("copy", "concat [3, 5] + [3, 7] bf16", c.got(cat), ref, 0, 0);
}

// Paged caches with blocks scattered in a shuffled order, and the float64 attention of one
// query row over the first `len` tokens of a sequence.
struct PagedCache {
  int64_t blocks, block_size, kv_heads, head_dim, max_blocks;
  std::vector<int32_t> table;  // [seqs, max_blocks]
  Values k, v;
  int64_t slot(int64_t seq, int64_t t) const {
    return static_cast<int64_t>(table[seq * max_blocks + t / block_size]) * block_size + t % block_size;
  }
  void attend(const double* q, int64_t kvh, int64_t seq, int64_t len, double scale, double* out) const {
    Values score(len);
    for (int64_t t = 0; t < len; ++t) {
      double d = 0;
      for (int64_t i = 0; i < head_dim; ++i) d += q[i] * k[(slot(seq, t) * kv_heads + kvh) * head_dim + i];
      score[t] = d * scale;
    }
    const double m = len ? *std::max_element(score.begin(), score.end()) : 0;
    double sum = 0;
    for (double& s : score) sum += (s = std::exp(s - m));
    for (int64_t i = 0; i < head_dim; ++i) {
      double acc = 0;
      for (int64_t t = 0; t < len; ++t) acc += score[t] * v[(slot(seq, t) * kv_heads + kvh) * head_dim + i];
      out[i] = len ? acc / sum : 0;
    }
  }
};

void check_attention(Checker& c) {
  const int64_t q_heads = 4, kv_heads = 2, head_dim = 64, block_size = 16, group = q_heads / kv_heads;
  const std::vector<int32_t> contexts = {1, 37, 100};
  const int64_t seqs = static_cast<int64_t>(contexts.size()), max_blocks = 7, blocks = seqs * max_blocks + 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor kh = c.random({blocks, block_size, kv_heads, head_dim}, dt), vh = c.random({blocks, block_size, kv_heads, head_dim}, dt);
    PagedCache cache{blocks, block_size, kv_heads, head_dim, max_blocks, std::vector<int32_t>(blocks), values(kh), values(vh)};
    std::iota(cache.table.begin(), cache.table.end(), 0);
    std::shuffle(cache.table.begin(), cache.table.end(), c.rng());
    cache.table.resize(seqs * max_blocks);
    Tensor k = c.dev(kh), v = c.dev(vh), tables = c.dev(host_i32(cache.table, {seqs, max_blocks}));
    // One rounding of the output plus float accumulation (tests/test_attention.cpp).
    const double rel = unit_roundoff(dt), abs = 1e-5;

    Tensor qh = c.random({seqs, q_heads, head_dim}, dt);
    const Values q = values(qh);
    Tensor out = c.ctx().empty({seqs, q_heads, head_dim}, dt);
    ops::decode_attention(c.ctx(), c.dev(qh), k, v, tables, c.dev(host_i32(contexts, {seqs})), 100, scale, out);
    Values ref(q.size());
    for (int64_t s = 0; s < seqs; ++s)
      for (int64_t h = 0; h < q_heads; ++h)
        cache.attend(&q[(s * q_heads + h) * head_dim], h / group, s, contexts[s], scale, &ref[(s * q_heads + h) * head_dim]);
    c.report("attention", with_dtype("decode GQA 4/2, dim 64, ctx 1/37/100", dt), c.got(out), ref, rel, abs);

    const std::vector<int32_t> query_lens = {1, 5, 12}, context_lens = {1, 37, 100};
    const int64_t tokens = 18;
    Tensor pqh = c.random({tokens, q_heads, head_dim}, dt);
    const Values pq = values(pqh);
    Tensor pout = c.ctx().empty({tokens, q_heads, head_dim}, dt);
    ops::prefill_attention(c.ctx(), c.dev(pqh), k, v, tables, query_lens, context_lens, scale, pout);
    Values pref(pq.size());
    for (int64_t s = 0, row = 0; s < seqs; ++s)
      for (int64_t j = 0; j < query_lens[s]; ++j, ++row)
        for (int64_t h = 0; h < q_heads; ++h)
          cache.attend(&pq[(row * q_heads + h) * head_dim], h / group, s, context_lens[s] - query_lens[s] + j + 1, scale,
                       &pref[(row * q_heads + h) * head_dim]);
    // The matrix path rounds the probabilities to the dtype before P.V: one more rounding of
    // terms whose weighted mean magnitude is at most max |v| <= 1.
    c.report("attention", with_dtype("prefill causal, 1/5/12 new of 1/37/100", dt), c.got(pout), pref, rel, abs + rel);
  }
}

void check_kv_write(Checker& c) {
  const int64_t blocks = 4, block_size = 8, kv_heads = 2, head_dim = 32, tokens = 6;
  const int64_t row = kv_heads * head_dim;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor kc_h = c.random({blocks, block_size, kv_heads, head_dim}, dt), vc_h = c.random({blocks, block_size, kv_heads, head_dim}, dt);
    Tensor kh = c.random({tokens, kv_heads, head_dim}, dt), vh = c.random({tokens, kv_heads, head_dim}, dt);
    std::vector<int64_t> all_slots(blocks * block_size);
    std::iota(all_slots.begin(), all_slots.end(), 0);
    std::shuffle(all_slots.begin(), all_slots.end(), c.rng());
    Tensor slots = Tensor::empty_host({tokens}, DType::i64);
    for (int64_t t = 0; t < tokens; ++t) slots.data<int64_t>()[t] = t == 2 ? -1 : all_slots[t];  // -1 skips
    Tensor kc = c.dev(kc_h), vc = c.dev(vc_h);
    ops::kv_write(c.ctx(), c.dev(kh), c.dev(vh), c.dev(slots), kc, vc);
    Values kref = values(kc_h), vref = values(vc_h);
    const Values k = values(kh), v = values(vh);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t s = slots.data<int64_t>()[t];
      if (s < 0) continue;
      std::copy(k.begin() + t * row, k.begin() + (t + 1) * row, kref.begin() + s * row);
      std::copy(v.begin() + t * row, v.begin() + (t + 1) * row, vref.begin() + s * row);
    }
    Values got = c.got(kc), vgot = c.got(vc);
    got.insert(got.end(), vgot.begin(), vgot.end());
    kref.insert(kref.end(), vref.begin(), vref.end());
    c.report("kv_write", with_dtype("6 tokens into [4, 8, 2, 32], one skipped", dt), got, kref, 0, 0);
  }
}

// |got - ref| <= eps(dt) * |ref| + 4e-6 * sum |a||b| (tests/test_gemm.cpp); where the vendor
// library of a GPU adds the bias in its epilogue it rounds the product first, which allows
// eps(dt) * |product| more.
struct GemmRef {
  Values value, bound;
};
GemmRef gemm_ref(const Values& a, const Values& b, const Values* bias, int64_t z, int64_t m, int64_t n, int64_t k,
                 double alpha, DType dt, bool bias_rounding) {
  GemmRef r;
  for (int64_t q = 0; q < z; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = a[(q * m + i) * k + p], w = b[(q * n + j) * k + p];
          acc += x * w;
          mag += std::abs(x * w);
        }
        acc *= alpha;
        mag *= std::abs(alpha);
        const double value = acc + (bias ? (*bias)[j] : 0.0);
        r.value.push_back(value);
        r.bound.push_back(unit_roundoff(dt) * (std::abs(value) + (bias_rounding && bias ? std::abs(acc) : 0.0)) +
                          4e-6 * (mag + (bias ? std::abs((*bias)[j]) : 0.0)));
      }
  return r;
}

void check_gemm(Checker& c) {
  const int64_t m = 5, n = 48, k = 64;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor xh = c.random({m, k}, dt), wh = c.random({n, k}, dt), bh = c.random({n}, dt);
    const Values x = values(xh), w = values(wh), b = values(bh);
    Tensor out = c.ctx().empty({m, n}, dt);
    for (ops::GemmPath path : {ops::GemmPath::automatic, ops::GemmPath::vendor, ops::GemmPath::gemv, ops::GemmPath::tiled}) {
      ops::linear(c.ctx(), c.dev(xh), c.dev(wh), c.dev(bh), out, path);
      const bool vendor_epilogue = !gpu::kEmulator && (path == ops::GemmPath::vendor || path == ops::GemmPath::automatic);
      const GemmRef ref = gemm_ref(x, w, &b, 1, m, n, k, 1.0, dt, vendor_epilogue);
      c.report("gemm", with_dtype(std::string("linear ") + ops::gemm_path_name(path) + " 5x48x64 +bias", dt), c.got(out),
               ref.value, ref.bound);
    }
    const int64_t z = 2, bm = 6, bn = 24, bk = 32;
    Tensor ah = c.random({z, bm, bk}, dt), b2h = c.random({z, bn, bk}, dt);
    Tensor bout = c.ctx().empty({z, bm, bn}, dt);
    for (ops::GemmPath path : {ops::GemmPath::vendor, ops::GemmPath::tiled}) {
      ops::batched_matmul(c.ctx(), c.dev(ah), c.dev(b2h), true, 0.5f, bout, path);
      const GemmRef ref = gemm_ref(values(ah), values(b2h), nullptr, z, bm, bn, bk, 0.5, dt, false);
      c.report("gemm", with_dtype(std::string("batched_matmul ") + ops::gemm_path_name(path) + " 2x6x24x32", dt),
               c.got(bout), ref.value, ref.bound);
    }

    // Grouped (MoE) GEMM: experts of 4, 0 and 6 rows.
    const int64_t experts = 3, rows = 10, gn = 16, gk = 32;
    Tensor gx = c.random({rows, gk}, dt), gw = c.random({experts, gn, gk}, dt);
    const std::vector<int32_t> offsets = {0, 4, 4, 10};
    const Values gxv = values(gx), gwv = values(gw);
    Tensor gout = c.ctx().empty({rows, gn}, dt);
    for (ops::GemmPath path : {ops::GemmPath::vendor, ops::GemmPath::gemv, ops::GemmPath::tiled}) {
      ops::grouped_linear(c.ctx(), c.dev(gx), c.dev(gw), c.dev(host_i32(offsets, {experts + 1})), gout, path);
      Values ref, bound;
      for (int64_t e = 0; e < experts; ++e) {
        const int64_t er = offsets[e + 1] - offsets[e];
        const Values xe(gxv.begin() + offsets[e] * gk, gxv.begin() + offsets[e + 1] * gk);
        const Values we(gwv.begin() + e * gn * gk, gwv.begin() + (e + 1) * gn * gk);
        const GemmRef r = gemm_ref(xe, we, nullptr, 1, er, gn, gk, 1.0, dt, false);
        ref.insert(ref.end(), r.value.begin(), r.value.end());
        bound.insert(bound.end(), r.bound.begin(), r.bound.end());
      }
      c.report("grouped_gemm", with_dtype(std::string("grouped_linear ") + ops::gemm_path_name(path) + " 4/0/6 rows", dt),
               c.got(gout), ref, bound);
    }
  }

  // W8A8: exact int32 products, then the scales and the bias in float (tests/test_gemm.cpp).
  const int64_t qm = 4, qn = 24, qk = 64;
  Tensor xq = c.random({qm, qk}, DType::i8, -127, 127), wq = c.random({qn, qk}, DType::i8, -127, 127);
  Tensor xs = c.random({qm}, DType::f32, 0.001, 0.01), ws = c.random({qn}, DType::f32, 0.001, 0.01);
  Tensor bias = c.random({qn}, DType::f32);
  const Values xv = values(xq), wv = values(wq), xsv = values(xs), wsv = values(ws), bv = values(bias);
  Values ref;
  for (int64_t i = 0; i < qm; ++i)
    for (int64_t j = 0; j < qn; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < qk; ++p) acc += xv[i * qk + p] * wv[j * qk + p];
      ref.push_back(acc * xsv[i] * wsv[j] + bv[j]);
    }
  Tensor qout = c.ctx().empty({qm, qn}, DType::f32);
  std::vector<ops::GemmPath> paths = {ops::GemmPath::tiled};
  if (!gpu::kEmulator) paths.push_back(ops::GemmPath::vendor);  // the host target has no vendor int8 GEMM
  for (ops::GemmPath path : paths) {
    ops::linear_int8(c.ctx(), c.dev(xq), c.dev(xs), c.dev(wq), c.dev(ws), c.dev(bias), qout, path);
    c.report("gemm", std::string("linear_int8 ") + ops::gemm_path_name(path) + " 4x24x64 +bias f32", c.got(qout), ref,
             5 * unit_roundoff(DType::f32), 1e-6);
  }
}

void check_moe(Checker& c) {
  const int64_t tokens = 6, experts = 8, hidden = 32;
  ops::MoeRouting routing;
  routing.k = 2;
  Tensor lh = c.random({tokens, experts}, DType::f32, -4, 4);
  const Values l = values(lh);
  Tensor weights = c.ctx().empty({tokens, routing.k}, DType::f32), ids = c.ctx().empty({tokens, routing.k}, DType::i32);
  ops::moe_route(c.ctx(), c.dev(lh), routing, weights, ids);
  Values ref_w, ref_ids;
  for (int64_t t = 0; t < tokens; ++t) {
    const double* x = l.data() + t * experts;
    const double mx = *std::max_element(x, x + experts);
    Values s(experts);
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += (s[e] = std::exp(x[e] - mx));
    std::vector<int> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b]; });
    const double kept = s[order[0]] + s[order[1]];  // renormalised over the chosen
    for (int j = 0; j < routing.k; ++j) {
      ref_ids.push_back(order[j]);
      ref_w.push_back(s[order[j]] / kept);
    }
  }
  c.report("moe", "moe_route softmax, 6 tokens, 8 experts, top-2 ids", c.got(ids), ref_ids, 0, 0);
  c.report("moe", "moe_route softmax, 6 tokens, 8 experts, top-2 weights", c.got(weights), ref_w, 1e-5, 1e-7);

  // Permutation, gather and combine around identity experts: out[t] = sum_j w[t, j] * x[t].
  Tensor xh = c.random({tokens, hidden}, DType::f32);
  const Values x = values(xh);
  const ops::MoePermutation perm = ops::moe_permutation(c.ctx(), ids, static_cast<int>(experts));
  Tensor gathered = c.ctx().empty({tokens * routing.k, hidden}, DType::f32), out = c.ctx().empty({tokens, hidden}, DType::f32);
  ops::moe_gather(c.ctx(), c.dev(xh), perm, gathered);
  ops::moe_combine(c.ctx(), gathered, weights, perm, out);
  const Values w = c.got(weights);
  Values ref(tokens * hidden);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < hidden; ++i) ref[t * hidden + i] = (w[t * 2] + w[t * 2 + 1]) * x[t * hidden + i];
  c.report("moe", "permutation, gather, combine [6, 32] f32", c.got(out), ref, 1e-6, 1e-6);
}

void check_quant(Checker& c) {
  const int64_t rows = 4, cols = 128;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor xh = c.random({rows, cols}, dt, -3, 3);
    const Values x = values(xh);
    for (int group : {0, 32}) {  // 0: per token
      const int64_t per_row = group ? cols / group : 1;
      Tensor q = c.ctx().empty({rows, cols}, DType::i8), scales = c.ctx().empty({rows, per_row}, DType::f32);
      Tensor back = c.ctx().empty({rows, cols}, DType::f32);
      if (group) {
        ops::quantize_per_group(c.ctx(), c.dev(xh), group, q, scales);
        ops::dequantize_per_group(c.ctx(), q, scales, group, back);
      } else {
        Tensor flat = scales.view({rows});
        ops::quantize_per_token(c.ctx(), c.dev(xh), q, flat);
        ops::dequantize_per_token(c.ctx(), q, flat, back);
      }
      // Each element is within half a step (its group's scale) of x (tests/test_quant.cpp); the
      // scales themselves against absmax / 127 in float64.
      const Values s = c.got(scales);
      Values bound(x.size()), ref_scale(s.size());
      const int64_t width = group ? group : cols;
      for (size_t g = 0; g < s.size(); ++g) {
        double absmax = 0;
        for (int64_t i = 0; i < width; ++i) absmax = std::max(absmax, std::abs(x[g * width + i]));
        ref_scale[g] = absmax / 127;
        for (int64_t i = 0; i < width; ++i) bound[g * width + i] = s[g] * (0.5 + 127.0 * 0x1p-23);
      }
      const std::string name = group ? "per group of 32 [4, 128]" : "per token [4, 128]";
      c.report("quant", with_dtype("scales " + name, dt), s, ref_scale, 4 * unit_roundoff(DType::f32), 0);
      c.report("quant", with_dtype("round trip " + name, dt), c.got(back), x, bound);
    }
  }
}

void check_sampling(Checker& c) {
  const int64_t seqs = 3, vocab = 1000;
  const int top = 5;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor lh = c.random({seqs, vocab}, dt, -5, 5);
    const Values l = values(lh);
    const ops::SampleResult r = ops::sample(c.ctx(), c.dev(lh), std::vector<ops::SamplingOptions>(seqs, ops::SamplingOptions{0.0f}), {}, top);
    Values tokens, want_tokens, lp, want_lp;
    for (int64_t s = 0; s < seqs; ++s) {
      const double* x = l.data() + s * vocab;
      std::vector<int> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });  // ties: lower id
      double sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(x[i] - x[order[0]]);
      tokens.push_back(r.tokens[s]);
      want_tokens.push_back(order[0]);
      lp.push_back(r.logprobs[s]);
      want_lp.push_back(-std::log(sum));
      for (int j = 0; j < top; ++j) {
        tokens.push_back(r.top_ids[s][j]);
        want_tokens.push_back(order[j]);
        lp.push_back(r.top_logprobs[s][j]);
        want_lp.push_back(x[order[j]] - x[order[0]] - std::log(sum));
      }
    }
    c.report("sampling", with_dtype("greedy and top-5 ids, [3, 1000]", dt), tokens, want_tokens, 0, 0);
    c.report("sampling", with_dtype("log-probabilities, [3, 1000]", dt), lp, want_lp, 0, 2e-4);
  }
}

}  // namespace

int run_check(int device, uint64_t seed) {
  Context ctx(device);
  std::printf("checking every op family on %s (%s target, warp %d), seed %llu\n", ctx.device_name().c_str(),
              gpu::target_name(), ctx.warp_size(), static_cast<unsigned long long>(seed));
  std::printf("%-12s %-50s %12s %12s  %s\n", "family", "case", "max error", "bound", "result");
  std::printf("(max error: of the element whose error is the largest share of its own bound)\n");
  Checker checker(ctx, seed);
  const std::vector<std::pair<const char*, std::function<void(Checker&)>>> families = {
      {"elementwise", check_elementwise}, {"reduce", check_reduce}, {"norm", check_norm},
      {"softmax", check_softmax},         {"rope", check_rope},     {"embedding", check_embedding},
      {"copy", check_copy},               {"attention", check_attention}, {"kv_write", check_kv_write},
      {"gemm", check_gemm},               {"moe", check_moe},       {"quant", check_quant},
      {"sampling", check_sampling}};
  int errors = 0;
  for (const auto& [name, run] : families) {
    try {
      run(checker);
    } catch (const std::exception& e) {  // an op that throws fails its family; the others still run
      std::printf("%-12s %-50s %12s %12s  FAIL: %s\n", name, "(threw)", "-", "-", e.what());
      ++errors;
    }
  }
  const int failures = checker.failures() + errors;
  std::printf("%s\n", failures ? "some checks FAILED" : "all checks passed");
  return failures ? 1 : 0;
}

}  // namespace lw::app
