// Sampling: exact agreement with a host mirror of the algorithm (the same float operations in
// the same order: what makes a seed give the same token on every target), the empirical
// distribution against the filtered probabilities, greedy ties, penalties, and misuse.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gpu/portable_math.h"
#include "kernels/sampling.h"
#include "ops/sampling.h"
#include "test_util.h"

namespace lw::test {
namespace {

constexpr int kThreads = kernels::kSamplingThreads;

// The kernel's algorithm on the host, float for float.
int32_t mirror(std::vector<float> w, const ops::SamplingOptions& o, const std::vector<int32_t>& hist) {
  const int64_t vocab = static_cast<int64_t>(w.size());
  for (size_t h = 0; h < hist.size(); ++h) {
    const int32_t id = hist[h];
    if (id < 0 || id >= vocab || std::find(hist.begin(), hist.begin() + h, id) != hist.begin() + h) continue;
    const int count = static_cast<int>(std::count(hist.begin(), hist.end(), id));
    float v = w[id];
    if (o.repetition_penalty != 1.0f) v = v > 0.0f ? v / o.repetition_penalty : v * o.repetition_penalty;
    v = std::fma(-o.frequency_penalty, static_cast<float>(count), v) - o.presence_penalty;
    w[id] = v;
  }
  for (const auto& [id, bias] : o.logit_bias) w[id] += bias;
  if (o.temperature == 0.0f) return static_cast<int32_t>(std::max_element(w.begin(), w.end()) - w.begin());
  for (float& v : w) v = v / o.temperature;
  const float mx = *std::max_element(w.begin(), w.end());
  for (float& v : w) v = gpu::exp_portable(v - mx);
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  auto mass = [&](float t) {
    std::vector<float> part(kThreads, 0.0f);
    for (int j = 0; j < kThreads; ++j)
      for (int64_t i = j * chunk; i < std::min((j + 1) * chunk, vocab); ++i) part[j] += w[i] >= t ? w[i] : 0.0f;
    for (int stride = kThreads / 2; stride > 0; stride /= 2)
      for (int j = 0; j < stride; ++j) part[j] = part[j] + part[j + stride];
    return part[0];
  };
  auto count = [&](float t) { return std::count_if(w.begin(), w.end(), [t](float v) { return v >= t; }); };
  auto as_float = [](unsigned u) { return std::bit_cast<float>(u); };
  unsigned cut = 0;
  if (o.top_k > 0 && o.top_k < vocab) {
    unsigned a = 0, b = 0x3f800000u;
    while (a < b) {
      const unsigned mid = a + (b - a) / 2 + 1;
      if (count(as_float(mid)) >= o.top_k) a = mid;
      else b = mid - 1;
    }
    cut = a;
  }
  if (o.top_p < 1.0f) {
    const float target = o.top_p * mass(as_float(cut));
    unsigned a = cut, b = 0x3f800000u;
    while (a < b) {
      const unsigned mid = a + (b - a) / 2 + 1;
      if (mass(as_float(mid)) >= target) a = mid;
      else b = mid - 1;
    }
    cut = a;
  }
  const float threshold = std::max(as_float(cut), o.min_p);
  const float total = mass(threshold);
  const float goal = gpu::uniform_portable(o.seed, o.step) * total;
  float cum = 0.0f;
  for (int j = 0; j < kThreads; ++j) {
    float c = 0.0f;
    for (int64_t i = j * chunk; i < std::min((j + 1) * chunk, vocab); ++i) c += w[i] >= threshold ? w[i] : 0.0f;
    if (c > 0.0f && cum + c > goal) {
      for (int64_t i = j * chunk; i < std::min((j + 1) * chunk, vocab); ++i) {
        if (w[i] >= threshold) {
          cum += w[i];
          if (cum > goal) return static_cast<int32_t>(i);
        }
      }
    } else {
      cum += c;
    }
  }
  for (int64_t i = vocab - 1; i >= 0; --i)
    if (w[i] >= threshold) return static_cast<int32_t>(i);
  return -1;
}

TEST(Sampling, MatchesTheHostMirrorExactly) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t vocab : {37, 1000, 5003}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", vocab " << vocab);
      std::vector<ops::SamplingOptions> opts(8);
      opts[0].temperature = 0;
      opts[1].temperature = 1.0f;
      opts[2].temperature = 0.7f, opts[2].top_k = 20;
      opts[3].temperature = 1.3f, opts[3].top_p = 0.9f;
      opts[4].temperature = 0.9f, opts[4].min_p = 0.05f;
      opts[5].temperature = 1.0f, opts[5].top_k = 50, opts[5].top_p = 0.8f, opts[5].min_p = 0.01f;
      opts[6].temperature = 0.8f, opts[6].repetition_penalty = 1.3f, opts[6].presence_penalty = 0.5f,
      opts[6].frequency_penalty = 0.25f;
      opts[7].temperature = 0, opts[7].repetition_penalty = 2.0f, opts[7].frequency_penalty = 1.0f;
      opts[1].logit_bias = {{static_cast<int32_t>(vocab - 1), 3.5f}, {2, -1.25f}};
      opts[7].logit_bias = {{5, 0.75f}};
      std::vector<std::vector<int32_t>> hist(8);
      for (int s = 0; s < 8; ++s) {
        opts[s].seed = rng()();
        opts[s].step = rng()() % 1000;
        for (int h = 0; h < 40; ++h) hist[s].push_back(static_cast<int32_t>(rng()() % (vocab + 3)) - 1);  // some -1 / out of range
      }
      Tensor lh = random_host({8, vocab}, dt, -6, 6);
      const ops::SampleResult r = ops::sample(ctx(), ctx().to_device(lh), opts, hist);
      const std::vector<double> all = to_doubles(lh);
      for (int s = 0; s < 8; ++s) {
        std::vector<float> w(all.begin() + s * vocab, all.begin() + (s + 1) * vocab);
        EXPECT_EQ(r.tokens[s], mirror(w, opts[s], hist[s])) << "sequence " << s;
        const double mx = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (float v : w) sum += std::exp(v - mx);
        EXPECT_NEAR(r.logprobs[s], w[r.tokens[s]] - mx - std::log(sum), 2e-4) << "sequence " << s;
      }
    }
  }
}

TEST(Sampling, FrequenciesFollowTheFilteredDistribution) {
  const int64_t vocab = 12;
  const int n = 800;  // each sequence is a 1024-thread block: kept small for the emulator
  Tensor one = random_host({1, vocab}, DType::f32, -2, 2);
  std::vector<float> base(one.data<float>(), one.data<float>() + vocab);
  Tensor lh = Tensor::empty_host({n, vocab}, DType::f32);
  for (int s = 0; s < n; ++s) std::copy(base.begin(), base.end(), lh.data<float>() + s * vocab);
  std::vector<ops::SamplingOptions> opts(n);
  for (int s = 0; s < n; ++s) {
    opts[s].temperature = 0.8f;
    opts[s].top_k = 6;
    opts[s].top_p = 0.85f;
    opts[s].seed = 1234;
    opts[s].step = static_cast<uint64_t>(s);
  }
  const ops::SampleResult r = ops::sample(ctx(), ctx().to_device(lh), opts);
  // Expected: softmax(l / T), keep the top 6, then the smallest top set reaching 85% of their mass.
  std::vector<std::pair<double, int>> p;
  const double mx = *std::max_element(base.begin(), base.end());
  for (int i = 0; i < vocab; ++i) p.push_back({std::exp((base[i] - mx) / 0.8), i});
  std::sort(p.rbegin(), p.rend());
  p.resize(6);
  double mass = 0;
  for (auto& e : p) mass += e.first;
  double cum = 0;
  size_t keep = 0;
  while (keep < p.size() && cum < 0.85 * mass) cum += p[keep++].first;
  std::vector<double> expect(vocab, 0.0);
  for (size_t i = 0; i < keep; ++i) expect[p[i].second] = p[i].first / cum;
  std::vector<int> hits(vocab, 0);
  for (int32_t t : r.tokens) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, vocab);
    ++hits[t];
  }
  for (int i = 0; i < vocab; ++i) {
    const double e = expect[i] * n, sigma = std::sqrt(std::max(e * (1 - expect[i]), 1.0));
    EXPECT_NEAR(hits[i], e, 5 * sigma) << "token " << i << " (p " << expect[i] << ")";
  }
}

TEST(Sampling, GreedyTiesGoToTheLowestIdAndRunsRepeat) {
  Tensor lh = Tensor::empty_host({2, 3000}, DType::f32);
  for (int i = 0; i < 6000; ++i) lh.data<float>()[i] = -1.0f;
  // Row 0: a tie between 1234, 2258 (one thread's elements: ids 1024 apart) and 2999.
  lh.data<float>()[2258] = lh.data<float>()[1234] = lh.data<float>()[2999] = 5.0f;
  lh.data<float>()[3000 + 7] = 2.0f;
  std::vector<ops::SamplingOptions> opts(2);
  opts[0].temperature = opts[1].temperature = 0;
  const ops::SampleResult r = ops::sample(ctx(), ctx().to_device(lh), opts);
  EXPECT_EQ(r.tokens[0], 1234);
  EXPECT_EQ(r.tokens[1], 7);
  std::vector<ops::SamplingOptions> seeded(2);
  seeded[0].seed = seeded[1].seed = 99;
  const Tensor l = ctx().to_device(random_host({2, 3000}, DType::bf16));
  EXPECT_EQ(ops::sample(ctx(), l, seeded).tokens, ops::sample(ctx(), l, seeded).tokens);
}

// Greedy rows with no penalty and no bias in the batch take the kernel's first pass alone; a
// bias anywhere in the batch sends every row through the workspace. Both give the same tokens
// and log-probabilities, bit for bit: ties within a thread's elements and across threads, NaN,
// infinities, signed zeros, and rows shorter than the block.
TEST(Sampling, PlainGreedyMatchesTheWorkspacePath) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t vocab : {5, 1000, 5003}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", vocab " << vocab);
      const int rows = 6;
      Tensor lh = random_host({rows, vocab}, DType::f32, -6, 6);
      float* x = lh.data<float>();
      auto at = [&](int r, int64_t i) -> float& { return x[r * vocab + i % vocab]; };
      at(1, 3) = at(1, 3 + kThreads) = at(1, vocab - 1) = 9.0f;     // a tie within a thread, and across
      at(2, 0) = std::nanf("");                                      // NaN never wins
      at(2, 4) = 8.0f;
      for (int64_t i = 0; i < vocab; ++i) at(3, i) = -INFINITY;  // nothing finite: the lowest id
      for (int64_t i = 0; i < vocab; ++i) at(4, i) = (i % 2) ? 0.0f : -0.0f;
      at(5, vocab / 2) = INFINITY;
      Tensor lt = Tensor::empty_host({rows, vocab}, dt);
      for (int64_t i = 0; i < rows * vocab; ++i) {
        if (dt == DType::f32) lt.data<float>()[i] = x[i];
        else lt.data<bfloat16>()[i] = gpu::from_float<bfloat16>(x[i]);
      }
      const Tensor l = ctx().to_device(lt);
      std::vector<ops::SamplingOptions> plain(rows);
      for (auto& o : plain) o.temperature = 0;
      std::vector<ops::SamplingOptions> biased = plain;
      biased.push_back(plain[0]);
      biased.back().logit_bias = {{1, 0.5f}};
      Tensor lb = ctx().empty({rows + 1, vocab}, dt);
      lb.slice(0, 0, rows).copy_from(l, ctx().stream().get());
      lb.slice(0, rows, rows + 1).copy_from(l.slice(0, 0, 1), ctx().stream().get());
      const ops::SampleResult a = ops::sample(ctx(), l, plain), b = ops::sample(ctx(), lb, biased);
      for (int r = 0; r < rows; ++r) {
        EXPECT_EQ(a.tokens[r], b.tokens[r]) << "row " << r;
        EXPECT_EQ(std::bit_cast<uint32_t>(a.logprobs[r]), std::bit_cast<uint32_t>(b.logprobs[r])) << "row " << r;
      }
      EXPECT_EQ(a.tokens[1], std::min({int64_t{3}, (3 + kThreads) % vocab, vocab - 1}));
      EXPECT_EQ(a.tokens[2], 4);
      EXPECT_EQ(a.tokens[3], 0);
      EXPECT_EQ(a.tokens[4], 0);
      EXPECT_EQ(a.tokens[5], vocab / 2);
    }
  }
}

TEST(Sampling, LogitBiasForcesAndBansTokens) {
  Tensor lh = random_host({3, 1000}, DType::f32, -4, 4);
  std::vector<ops::SamplingOptions> opts(3);
  opts[0].temperature = 0, opts[0].logit_bias = {{777, 100.0f}};                     // greedy: forced
  opts[1].temperature = 1.0f, opts[1].seed = 5, opts[1].logit_bias = {{3, 100.0f}};  // sampled: forced
  opts[2].temperature = 0;
  const Tensor l = ctx().to_device(lh);
  const int32_t plain = ops::sample(ctx(), l, opts).tokens[2];
  opts[2].logit_bias = {{plain, -100.0f}};  // the greedy token banned: another one wins
  const ops::SampleResult r = ops::sample(ctx(), l, opts);
  EXPECT_EQ(r.tokens[0], 777);
  EXPECT_EQ(r.tokens[1], 3);
  EXPECT_NE(r.tokens[2], plain);
  // The log-probability stays that of the raw logits: the bias steers, it does not rewrite.
  std::vector<float> row(lh.data<float>(), lh.data<float>() + 1000);
  const double mx = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float v : row) sum += std::exp(v - mx);
  EXPECT_NEAR(r.logprobs[0], row[777] - mx - std::log(sum), 2e-4);
}

TEST(Sampling, TopLogprobsOfTheRawLogits) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t vocab : {5, 300, 4099}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", vocab " << vocab);
      const int n = 7;
      Tensor lh = random_host({3, vocab}, dt, -5, 5);
      if (vocab >= 300) {  // ties: equal logits must come out lower id first
        Tensor tie = random_host({1, 1}, dt, 9, 9);
        std::memcpy(static_cast<char*>(lh.data_ptr()) + 17 * dtype_size(dt), tie.data_ptr(), dtype_size(dt));
        std::memcpy(static_cast<char*>(lh.data_ptr()) + 250 * dtype_size(dt), tie.data_ptr(), dtype_size(dt));
      }
      std::vector<ops::SamplingOptions> opts(3);
      const ops::SampleResult r = ops::sample(ctx(), ctx().to_device(lh), opts, {}, n);
      const std::vector<double> all = to_doubles(lh);
      for (int s = 0; s < 3; ++s) {
        std::vector<int> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        const double* x = all.data() + s * vocab;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
        const double mx = x[order[0]];
        double sum = 0;
        for (int64_t i = 0; i < vocab; ++i) sum += std::exp(x[i] - mx);
        ASSERT_EQ(r.top_ids[s].size(), static_cast<size_t>(n));
        for (int j = 0; j < n; ++j) {
          if (j >= vocab) {
            EXPECT_EQ(r.top_ids[s][j], -1);
            continue;
          }
          EXPECT_EQ(r.top_ids[s][j], order[j]) << "sequence " << s << ", rank " << j;
          EXPECT_NEAR(r.top_logprobs[s][j], x[order[j]] - mx - std::log(sum), 2e-4);
        }
      }
    }
  }
}

TEST(Sampling, RejectsMisuse) {
  const Tensor l = ctx().empty({2, 10}, DType::f32);
  std::vector<ops::SamplingOptions> two(2);
  EXPECT_THROW(ops::sample(ctx(), l, std::vector<ops::SamplingOptions>(3)), Error);
  auto bad = two;
  bad[1].temperature = -1;
  EXPECT_THROW(ops::sample(ctx(), l, bad), Error);
  bad = two;
  bad[0].top_p = 0;
  EXPECT_THROW(ops::sample(ctx(), l, bad), Error);
  bad = two;
  bad[0].min_p = 1.5f;
  EXPECT_THROW(ops::sample(ctx(), l, bad), Error);
  bad = two;
  bad[0].repetition_penalty = 0;
  EXPECT_THROW(ops::sample(ctx(), l, bad), Error);
  bad = two;
  bad[1].frequency_penalty = 0.5f;  // valid, but nothing to count without the histories
  EXPECT_CONTAINS(error_of([&] { ops::sample(ctx(), l, bad); }), "no token histories");
  bad = two;
  bad[1].logit_bias = {{10, 1.0f}};  // outside the vocabulary of 10
  EXPECT_CONTAINS(error_of([&] { ops::sample(ctx(), l, bad); }), "logit_bias token 10");
  bad[1].logit_bias = {{3, 1.0f}, {3, 2.0f}};
  EXPECT_CONTAINS(error_of([&] { ops::sample(ctx(), l, bad); }), "twice");
  bad[1].logit_bias = {{3, NAN}};
  EXPECT_THROW(ops::sample(ctx(), l, bad), Error);
  EXPECT_THROW(ops::sample(ctx(), l, two, {{1, 2}}), Error);  // one history for two sequences
  EXPECT_THROW(ops::sample(ctx(), l, two, {}, 21), Error);
}

}  // namespace
}  // namespace lw::test
