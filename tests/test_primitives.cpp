// Warp and block primitives against float64 references, on every target and warp size.
#include <algorithm>

#include "primitive_kernels.h"
#include "test_util.h"

namespace lw::test {
namespace {

double reduce_ref(const std::vector<double>& v, size_t begin, size_t end, ReduceOp op) {
  double r = v[begin];
  for (size_t i = begin + 1; i < end; ++i) {
    r = op == ReduceOp::sum ? r + v[i] : op == ReduceOp::max ? std::max(r, v[i]) : std::min(r, v[i]);
  }
  return r;
}

cudaStream_t stream() { return ctx().stream().get(); }

const char* op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : op == ReduceOp::max ? "max" : "min"; }

TEST(Primitives, DeviceCodeAgreesWithRuntimeWarpSize) {
  Tensor out = ctx().empty({1}, DType::i32);
  poison(out);
  run_device_warp_size(out.data<int32_t>(), stream());
  Tensor host = ctx().to_host(out);
  EXPECT_EQ(host.data<int32_t>()[0], ctx().warp_size());
}

TEST(Primitives, WarpsTakeThreadsInLinearOrder) {
  const int ws = ctx().warp_size();
  for (dim3 block : {dim3(32, 32), dim3(16, 4, 2), dim3(7, 9), dim3(64)}) {
    const int n = static_cast<int>(block.x * block.y * block.z);
    Tensor lane = ctx().empty({n}, DType::i32), warp = ctx().empty({n}, DType::i32);
    poison(lane);
    poison(warp);
    run_lane_ids(lane.data<int32_t>(), warp.data<int32_t>(), block, stream());
    Tensor hl = ctx().to_host(lane), hw = ctx().to_host(warp);
    for (int t = 0; t < n; ++t) {
      ASSERT_EQ(hl.data<int32_t>()[t], t % ws) << "thread " << t;
      ASSERT_EQ(hw.data<int32_t>()[t], t / ws) << "thread " << t;
    }
  }
}

TEST(Primitives, WarpReduceEveryWidthAndOp) {
  const int ws = ctx().warp_size();
  const unsigned blocks = 3;
  for (dim3 block : {dim3(ws), dim3(256), dim3(32, 4), dim3(64, 2)}) {
    const int per_block = static_cast<int>(block.x * block.y * block.z);
    if (per_block % ws != 0) continue;  // full warps only: the launch helper rounds blocks up
    const int n = per_block * static_cast<int>(blocks);
    for (int width = 1; width <= ws; width *= 2) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        SCOPED_TRACE(::testing::Message() << "width " << width << ", op " << op_name(op) << ", block " << block.x << "x"
                                          << block.y);
        Tensor in_h = random_host({n}, DType::f32);
        Tensor in = ctx().to_device(in_h), out = ctx().empty({n}, DType::f32);
        poison(out);
        run_warp_reduce(in.data<float>(), out.data<float>(), width, op, blocks, block, ws, stream());
        const std::vector<double> x = to_doubles(in_h), y = to_doubles(ctx().to_host(out));
        for (int i = 0; i < n; ++i) {
          const size_t seg = static_cast<size_t>(i / width * width);
          const double ref = reduce_ref(x, seg, seg + width, op);
          ASSERT_NEAR(y[i], ref, 1e-5 * width) << "element " << i;
        }
      }
    }
  }
}

TEST(Primitives, WarpReduceRejectsWidthBeyondTheWarp) {
  const int ws = ctx().warp_size();
  if (ws == 64) GTEST_SKIP() << "every width up to 64 fits this warp";
  Tensor buf = ctx().empty({64}, DType::f32);
  EXPECT_THROW(run_warp_reduce(buf.data<float>(), buf.data<float>(), 64, ReduceOp::sum, 1, dim3(64), ws, stream()), Error);
}

TEST(Primitives, WarpBroadcast) {
  const int ws = ctx().warp_size();
  const int n = 2 * 128;
  for (int width = 1; width <= ws; width *= 2) {
    const int src = static_cast<int>(rng()() % width);
    Tensor in_h = random_host({n}, DType::f32);
    Tensor in = ctx().to_device(in_h), out = ctx().empty({n}, DType::f32);
    poison(out);
    run_warp_broadcast(in.data<float>(), out.data<float>(), width, src, 2, dim3(128), ws, stream());
    const std::vector<double> x = to_doubles(in_h), y = to_doubles(ctx().to_host(out));
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i / width * width + src]) << "width " << width << ", element " << i;
  }
}

TEST(Primitives, BlockReduceAnyBlockShape) {
  const unsigned blocks = 2;
  for (dim3 block : {dim3(1), dim3(7), dim3(31), dim3(32), dim3(33), dim3(63), dim3(64), dim3(65), dim3(100),
                     dim3(256), dim3(999), dim3(1024), dim3(32, 32), dim3(16, 3), dim3(5, 5, 5)}) {
    const int per_block = static_cast<int>(block.x * block.y * block.z);
    const int n = per_block * static_cast<int>(blocks);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      SCOPED_TRACE(::testing::Message() << "block " << block.x << "x" << block.y << "x" << block.z << ", op "
                                        << op_name(op));
      Tensor in_h = random_host({n}, DType::f32);
      Tensor in = ctx().to_device(in_h), out = ctx().empty({n}, DType::f32);
      poison(out);
      run_block_reduce(in.data<float>(), out.data<float>(), op, blocks, block, stream());
      const std::vector<double> x = to_doubles(in_h), y = to_doubles(ctx().to_host(out));
      for (int i = 0; i < n; ++i) {
        const size_t b = static_cast<size_t>(i / per_block * per_block);
        ASSERT_NEAR(y[i], reduce_ref(x, b, b + per_block, op), 1e-6 * per_block) << "element " << i;
      }
    }
  }
}

// gpu::allow_dynamic_shared: a kernel with static shared memory takes dynamic shared memory up
// to and past 48 KiB in all (static + dynamic exactly 48 KiB + 1 KiB is above the default limit,
// which NVIDIA counts with the static part).
TEST(Primitives, DynamicSharedMemoryBesideStatic) {
  for (int dynamic_floats : {1024, 12 * 1024 - 256, 12 * 1024, 16 * 1024}) {
    SCOPED_TRACE(::testing::Message() << dynamic_floats * 4 << " bytes of dynamic shared memory");
    const int64_t n = 256 + dynamic_floats;
    const Tensor in_h = random_host({n}, DType::f32);
    const Tensor in = ctx().to_device(in_h);
    Tensor out = ctx().empty({n}, DType::f32);
    poison(out);
    run_shared_round_trip(in.data<float>(), out.data<float>(), dynamic_floats, stream());
    EXPECT_TRUE(bitwise_equal(ctx().to_host(out), in_h));
  }
}

// gpu/matrix_fragment.h: one warp's 16x16x16 multiply-accumulate in the target's layout (on the
// emulator: NVIDIA's at warp 32, MFMA's at warp 64) against float64, B read row-major and
// transposed; the row maxima through reduce_row; the narrow product's first columns, and with
// B's transpose of only 1, 5 or 8 rows (load_b_narrow_transposed_shared: the other columns zero).
TEST(Primitives, FragmentMultiplyAccumulate) {
  const int ws = ctx().warp_size();
  const unsigned tiles = 3;
  const int64_t n = 256 * tiles;
  for (DType dt : {DType::f16, DType::bf16}) {
    for (int variant = 0; variant < 11; ++variant) {
      const bool bt = variant & 1 || variant >= 8, via_shared = variant & 2 || variant >= 8, narrow = variant & 4 || variant >= 8;
      const int narrow_rows = variant == 8 ? 1 : variant == 9 ? 5 : variant == 10 ? kNarrowFragmentCols : 0;
      const int cols = narrow ? kNarrowFragmentCols : 16, b_cols = narrow_rows > 0 ? narrow_rows : 16;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (bt ? ", B transposed" : ", B row-major")
                                        << (via_shared ? ", from shared memory" : ", from global memory")
                                        << (narrow ? ", narrow" : "") << (narrow_rows > 0 ? ", B rows " : "")
                                        << (narrow_rows > 0 ? std::to_string(narrow_rows) : ""));
      Tensor a_h = random_host({n}, dt), b_h = random_host({n}, dt), c_h = random_host({n}, DType::f32);
      Tensor a = ctx().to_device(a_h), b = ctx().to_device(b_h), c = ctx().to_device(c_h);
      Tensor d = ctx().empty({n}, DType::f32), row_max = ctx().empty({16 * tiles}, DType::f32);
      poison(d);
      poison(row_max);
      if (dt == DType::f16) {
        run_fragment_mma(a.data<half>(), b.data<half>(), bt, via_shared, c.data<float>(), d.data<float>(),
                         row_max.data<float>(), tiles, ws, ws, stream(), narrow, narrow_rows);
      } else {
        run_fragment_mma(a.data<bfloat16>(), b.data<bfloat16>(), bt, via_shared, c.data<float>(), d.data<float>(),
                         row_max.data<float>(), tiles, ws, ws, stream(), narrow, narrow_rows);
      }
      const std::vector<double> x = to_doubles(a_h), y = to_doubles(b_h), z = to_doubles(c_h);
      const std::vector<double> got = to_doubles(ctx().to_host(d)), got_max = to_doubles(ctx().to_host(row_max));
      for (unsigned t = 0; t < tiles; ++t) {
        const int64_t o = 256 * t;
        for (int r = 0; r < 16; ++r) {
          double want_max = -INFINITY;
          for (int col = 0; col < cols; ++col) {
            double want = z[o + r * 16 + col];
            if (col < b_cols)
              for (int k = 0; k < 16; ++k) want += x[o + r * 16 + k] * y[o + (bt ? col * 16 + k : k * 16 + col)];
            ASSERT_NEAR(got[o + r * 16 + col], want, 1e-5) << "tile " << t << ", element (" << r << ", " << col << ")";
            want_max = std::max(want_max, got[o + r * 16 + col]);
          }
          ASSERT_EQ(got_max[16 * t + r], want_max) << "tile " << t << ", row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lw::test
