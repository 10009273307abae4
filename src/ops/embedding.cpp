#include "ops/embedding.h"

#include "kernels/embedding.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

void check_args(const char* op, const Tensor& table, const Tensor& ids, const Tensor& out) {
  check_float_input(op, "table", table);
  check_float_input(op, "out", out);
  check_same_dtype(op, "table", table, "out", out);
  check_on_device(op, "ids", ids);
  LW_CHECK(table.dim() == 2, op << ": table " << table.describe() << " must be [vocab, hidden]");
  LW_CHECK((ids.dtype() == DType::i32 || ids.dtype() == DType::i64) && ids.dim() == 1 && ids.is_contiguous(),
           op << ": ids " << ids.describe() << " must be a contiguous i32 or i64 [tokens]");
  LW_CHECK(out.dim() == 2 && out.size(0) == ids.size(0) && out.size(1) == table.size(1),
           op << ": out " << out.describe() << " must be [" << ids.size(0) << ", " << table.size(1) << "]");
}

void launch(Context& ctx, const Tensor& table, int64_t first, const Tensor& ids, const Tensor& out, int64_t* bad) {
  const int64_t tokens = ids.size(0), rows = table.size(0), hidden = table.size(1);
  dispatch_float(table.dtype(), "embedding", [&]<class T>() {
    if (ids.dtype() == DType::i32) {
      kernels::embedding<T, int32_t>(out.data<T>(), table.data<T>(), ids.data<int32_t>(), tokens, first, rows, hidden,
                                     bad, ctx.warp_size(), ctx.stream().get());
    } else {
      kernels::embedding<T, int64_t>(out.data<T>(), table.data<T>(), ids.data<int64_t>(), tokens, first, rows, hidden,
                                     bad, ctx.warp_size(), ctx.stream().get());
    }
  });
}

}  // namespace

void embedding(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out, bool check) {
  check_args("embedding", table, ids, out);
  const int64_t vocab = table.size(0);
  Tensor flag = ctx.empty({1}, DType::i64);
  LW_CUDA_CHECK(cudaMemsetAsync(flag.data_ptr(), 0, sizeof(int64_t), ctx.stream().get()));
  launch(ctx, table, 0, ids, out, flag.data<int64_t>());
  if (!check) return;
  const int64_t bad = ctx.to_host(flag).data<int64_t>()[0];
  if (bad != 0) {
    Tensor id = ctx.to_host(ids.slice(0, bad - 1, bad));
    const int64_t value = ids.dtype() == DType::i32 ? id.data<int32_t>()[0] : id.data<int64_t>()[0];
    LW_FAIL("embedding: token id " << value << " at position " << bad - 1 << " is outside the vocabulary of " << vocab
                                   << " (its row of out was zeroed)");
  }
}

void embedding_shard(Context& ctx, const Tensor& table, int64_t first, const Tensor& ids, const Tensor& out) {
  check_args("embedding_shard", table, ids, out);
  LW_CHECK(first >= 0, "embedding_shard: the first row " << first << " must not be negative");
  launch(ctx, table, first, ids, out, nullptr);
}

}  // namespace lw::ops
