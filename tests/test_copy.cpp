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
