// Strided copies: transposes, slices of fused tensors, type conversion, concat.
#include "ops/copy.h"
#include "test_util.h"

namespace lw::test {
namespace {

TEST(Copy, TransposesSlicesAndConverts) {
  for (DType from : {DType::f32, DType::f16, DType::bf16}) {
    for (DType to : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to));
      Tensor h = random_host({3, 5, 7}, from);
      Tensor d = ctx().to_device(h);
      Tensor t = d.transpose(0, 2).slice(1, 1, 4);  // [7, 3, 3], strided
      Tensor out = ctx().empty({7, 3, 3}, to);
      poison(out);
      ops::copy(ctx(), t, out);
      const std::vector<double> x = to_doubles(h);
      std::vector<double> want;
      for (int i = 0; i < 7; ++i)
        for (int j = 1; j < 4; ++j)
          for (int k = 0; k < 3; ++k) want.push_back(x[(k * 5 + j) * 7 + i]);
      EXPECT_TRUE(all_close(ctx().to_host(out), want, epsilon(to), 0));
    }
  }
}

// Same-dtype copies whose rows are whole 16-byte runs (the query heads sliced out of a fused
// QKV row: the vector kernel), rows that are not (odd lengths, a row stride off 16 bytes, an
// offset slice: the element kernel), and dims that merge or drop (size 1); all exact.
TEST(Copy, RowsOfFusedTensorsAndMergedDims) {
  struct Case {
    int64_t rows, width, begin, end;  // src [rows, width], copy columns [begin, end)
  };
  for (DType dt : {DType::bf16, DType::f32}) {
    for (const Case c : {Case{5, 48, 0, 32}, Case{3, 48, 8, 40}, Case{4, 24, 0, 16}, Case{7, 50, 0, 40},
                         Case{3, 37, 0, 37}, Case{6, 40, 3, 35}, Case{1, 64, 16, 64}, Case{300, 96, 32, 96}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " [" << c.rows << ", " << c.width << "] columns " << c.begin
                                        << ".." << c.end);
      const Tensor h = random_host({c.rows, c.width}, dt);
      const int64_t n = c.end - c.begin;
      // As the model slices q: [rows, heads, n / heads].
      const int64_t heads = n % 4 == 0 ? 4 : 1;
      const Tensor src = ctx().to_device(h).slice(1, c.begin, c.end).unflatten(1, {heads, n / heads});
      Tensor out = ctx().empty({c.rows, heads, n / heads}, dt);
      poison(out);
      ops::copy(ctx(), src, out);
      const std::vector<double> x = to_doubles(h);
      std::vector<double> want;
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t j = c.begin; j < c.end; ++j) want.push_back(x[r * c.width + j]);
      EXPECT_TRUE(all_close(ctx().to_host(out), want, 0, 0));
    }
  }
  // Size-1 dims and a permutation of a 4-d tensor (collapsed where runs line up).
  const Tensor h = random_host({2, 1, 3, 8}, DType::bf16);
  Tensor out = ctx().empty({3, 1, 2, 8}, DType::bf16);
  poison(out);
  ops::copy(ctx(), ctx().to_device(h).transpose(0, 2), out);
  const std::vector<double> x = to_doubles(h), got = to_doubles(ctx().to_host(out));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 8; ++k) EXPECT_EQ(got[(i * 2 + j) * 8 + k], x[(j * 3 + i) * 8 + k]);
}

TEST(Copy, ContiguousAndConcat) {
  Tensor a = ctx().to_device(random_host({2, 3}, DType::bf16)), b = ctx().to_device(random_host({2, 5}, DType::bf16));
  Tensor c = ops::concat(ctx(), {a, b}, -1);
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{2, 8}));
  const std::vector<double> av = to_doubles(ctx().to_host(a)), bv = to_doubles(ctx().to_host(b));
  std::vector<double> want;
  for (int r = 0; r < 2; ++r) {
    want.insert(want.end(), av.begin() + r * 3, av.begin() + r * 3 + 3);
    want.insert(want.end(), bv.begin() + r * 5, bv.begin() + r * 5 + 5);
  }
  EXPECT_TRUE(all_close(ctx().to_host(c), want, 0, 0));
  Tensor t = ops::contiguous(ctx(), c.transpose(0, 1));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(to_doubles(ctx().to_host(t))[1], want[8]);
  EXPECT_THROW(ops::concat(ctx(), {a, ctx().empty({3, 3}, DType::bf16)}, 1), Error);
  EXPECT_THROW(ops::concat(ctx(), {a, ctx().empty({2, 3}, DType::f32)}, 0), Error);
  EXPECT_THROW(ops::copy(ctx(), a, ctx().empty({3, 2}, DType::bf16)), Error);
  EXPECT_THROW(ops::copy(ctx(), a, a), Error);
}

}  // namespace
}  // namespace lw::test
