// Embedding lookup: exact rows, both id types, misaligned hidden sizes, out-of-vocabulary ids.
#include "ops/copy.h"
#include "ops/embedding.h"
#include "test_util.h"

namespace lw::test {
namespace {

TEST(Embedding, GathersExactRows) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (DType id_dt : {DType::i32, DType::i64}) {
      for (int64_t hidden : {1, 7, 64, 100, 4096}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", ids " << dtype_name(id_dt) << ", hidden " << hidden);
        const int64_t vocab = 97, tokens = 33;
        Tensor table_h = random_host({vocab, hidden}, dt);
        Tensor ids_h = Tensor::empty_host({tokens}, id_dt);
        std::vector<int64_t> ids(tokens);
        for (int64_t t = 0; t < tokens; ++t) {
          ids[t] = static_cast<int64_t>(rng()() % vocab);
          if (id_dt == DType::i32) ids_h.data<int32_t>()[t] = static_cast<int32_t>(ids[t]);
          else ids_h.data<int64_t>()[t] = ids[t];
        }
        Tensor out = ctx().empty({tokens, hidden}, dt);
        poison(out);
        ops::embedding(ctx(), ctx().to_device(table_h), ctx().to_device(ids_h), out);
        const std::vector<double> table = to_doubles(table_h);
        std::vector<double> want;
        for (int64_t t = 0; t < tokens; ++t)
          want.insert(want.end(), table.begin() + ids[t] * hidden, table.begin() + (ids[t] + 1) * hidden);
        EXPECT_TRUE(all_close(ctx().to_host(out), want, 0, 0));
      }
    }
  }
}

TEST(Embedding, ShardsSumToTheWholeLookup) {
  // Three shards of a vocabulary of 50 (17 + 17 + 16 rows): each id is found in exactly one.
  const int64_t vocab = 50, hidden = 24, tokens = 40;
  Tensor table_h = random_host({vocab, hidden}, DType::f32);
  Tensor ids_h = Tensor::empty_host({tokens}, DType::i32);
  for (int64_t t = 0; t < tokens; ++t) ids_h.data<int32_t>()[t] = static_cast<int32_t>(rng()() % vocab);
  const Tensor table = ctx().to_device(table_h), ids = ctx().to_device(ids_h);
  std::vector<double> sum(static_cast<size_t>(tokens * hidden), 0.0);
  for (int64_t first = 0; first < vocab; first += 17) {
    const int64_t rows = std::min<int64_t>(17, vocab - first);
    Tensor out = ctx().empty({tokens, hidden}, DType::f32);
    poison(out);
    ops::embedding_shard(ctx(), ops::contiguous(ctx(), table.slice(0, first, first + rows)), first, ids, out);
    const std::vector<double> part = to_doubles(ctx().to_host(out));
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  const std::vector<double> all = to_doubles(table_h);
  std::vector<double> want;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = ids_h.data<int32_t>()[t];
    want.insert(want.end(), all.begin() + id * hidden, all.begin() + (id + 1) * hidden);
  }
  Tensor sum_h = Tensor::empty_host({tokens, hidden}, DType::f32);
  for (size_t i = 0; i < sum.size(); ++i) sum_h.data<float>()[i] = static_cast<float>(sum[i]);
  EXPECT_TRUE(all_close(sum_h, want, 0, 0));
}

TEST(Embedding, OutOfVocabularyIdIsAnErrorNamingIt) {
  Tensor table = ctx().to_device(random_host({10, 8}, DType::bf16));
  for (int32_t bad : {10, -1, 1 << 30}) {
    Tensor ids_h = Tensor::empty_host({3}, DType::i32);
    ids_h.data<int32_t>()[0] = 1;
    ids_h.data<int32_t>()[1] = bad;
    ids_h.data<int32_t>()[2] = 2;
    Tensor out = ctx().empty({3, 8}, DType::bf16);
    try {
      ops::embedding(ctx(), table, ctx().to_device(ids_h), out);
      FAIL() << "id " << bad << " accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad) + " at position 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("vocabulary of 10"), std::string::npos) << msg;
    }
  }
}

TEST(Embedding, RejectsMisuse) {
  Tensor table = ctx().empty({10, 8}, DType::bf16), out = ctx().empty({3, 8}, DType::bf16);
  EXPECT_THROW(ops::embedding(ctx(), table, ctx().empty({3}, DType::f32), out), Error);
  EXPECT_THROW(ops::embedding(ctx(), table, ctx().empty({4}, DType::i32), out), Error);
  EXPECT_THROW(ops::embedding(ctx(), table, ctx().empty({3}, DType::i32), ctx().empty({3, 8}, DType::f16)), Error);
}

}  // namespace
}  // namespace lw::test
