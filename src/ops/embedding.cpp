#include "ops/embedding.h"

#include "kernels/embedding.h"
#include "ops/check.h"

namespace lw::ops {

void embedding(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out, bool check) {
  check_float_input("embedding", "table", table);
  check_float_input("embedding", "out", out);
  check_same_dtype("embedding", "table", table, "out", out);
  check_on_device("embedding", "ids", ids);
  LW_CHECK(table.dim() == 2, "embedding: table " << table.describe() << " must be [vocab, hidden]");
  LW_CHECK((ids.dtype() == DType::i32 || ids.dtype() == DType::i64) && ids.dim() == 1 && ids.is_contiguous(),
           "embedding: ids " << ids.describe() << " must be a contiguous i32 or i64 [tokens]");
  const int64_t tokens = ids.size(0), vocab = table.size(0), hidden = table.size(1);
  LW_CHECK(out.dim() == 2 && out.size(0) == tokens && out.size(1) == hidden,
           "embedding: out " << out.describe() << " must be [" << tokens << ", " << hidden << "]");
  Tensor flag = ctx.empty({1}, DType::i64);
  LW_CUDA_CHECK(cudaMemsetAsync(flag.data_ptr(), 0, sizeof(int64_t), ctx.stream().get()));
  dispatch_float(table.dtype(), "embedding", [&]<class T>() {
    if (ids.dtype() == DType::i32) {
      kernels::embedding<T, int32_t>(out.data<T>(), table.data<T>(), ids.data<int32_t>(), tokens, vocab, hidden,
                                     flag.data<int64_t>(), ctx.warp_size(), ctx.stream().get());
    } else {
      kernels::embedding<T, int64_t>(out.data<T>(), table.data<T>(), ids.data<int64_t>(), tokens, vocab, hidden,
                                     flag.data<int64_t>(), ctx.warp_size(), ctx.stream().get());
    }
  });
  if (!check) return;
  const int64_t bad = ctx.to_host(flag).data<int64_t>()[0];
  if (bad != 0) {
    Tensor id = ctx.to_host(ids.slice(0, bad - 1, bad));
    const int64_t value = ids.dtype() == DType::i32 ? id.data<int32_t>()[0] : id.data<int64_t>()[0];
    LW_FAIL("embedding: token id " << value << " at position " << bad - 1 << " is outside the vocabulary of " << vocab
                                   << " (its row of out was zeroed)");
  }
}

}  // namespace lw::ops
