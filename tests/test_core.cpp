// Core runtime: dtypes, tensors and views, the caching allocator, errors, launch checks.
#include <cstring>

#include "core/allocator.h"
#include "core/logging.h"
#include "gpu/launch_config.h"
#include "test_util.h"

namespace lw::test {
namespace {

TEST(DType, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_STREQ(dtype_name(parse_dtype("int8")), "i8");
  try {
    parse_dtype("f8");
    FAIL() << "f8 parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of"), std::string::npos) << e.what();
  }
}

TEST(Tensor, ShapesStridesAndViews) {
  Tensor t = Tensor::empty_host({2, 3, 4}, DType::f32);
  for (int i = 0; i < 24; ++i) t.data<float>()[i] = static_cast<float>(i);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.size(-1), 4);

  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(v.data<float>()[5], 5.0f);

  Tensor s = t.slice(2, 1, 3);  // [2, 3, 2]
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data<float>()[0], 1.0f);
  Tensor row = t.select(0, 1).select(0, 2);  // t[1][2] = 20..23
  EXPECT_EQ(row.shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(row.data<float>()[0], 20.0f);
  Tensor tt = t.transpose(0, 2);
  EXPECT_EQ(tt.shape(), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(tt.stride(0), 1);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4] host");

  Tensor u = t.slice(2, 0, 4).unflatten(2, {2, 2});  // [2, 3, 2, 2]
  EXPECT_EQ(u.strides(), (std::vector<int64_t>{12, 4, 2, 1}));
  Tensor cols = t.view({2, 12}).slice(1, 4, 12).unflatten(1, {2, 4});  // a strided [2, 2, 4]
  EXPECT_EQ(cols.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(cols.data<float>()[0], 4.0f);
  EXPECT_THROW(t.unflatten(1, {2, 2}), Error);
}

TEST(Tensor, RejectsBadViewsAndAccess) {
  Tensor t = Tensor::empty_host({2, 3}, DType::f16);
  EXPECT_THROW(t.view({4, 2}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.transpose(0, 1).view({6}), Error);
  EXPECT_THROW(t.slice(1, 2, 4), Error);
  EXPECT_THROW(t.select(0, 2), Error);
  EXPECT_THROW(t.size(2), Error);
  EXPECT_THROW(t.data<float>(), Error);
  EXPECT_THROW(Tensor::empty_host({-1, 2}, DType::f32), Error);
  EXPECT_THROW(Tensor().data_ptr(), Error);
}

TEST(Tensor, HostDeviceRoundTrip) {
  Tensor h = random_host({3, 5, 7}, DType::bf16);
  Tensor d = ctx().to_device(h);
  EXPECT_EQ(d.device(), Device::gpu);
  Tensor back = ctx().to_host(d);
  EXPECT_TRUE(bitwise_equal(h, back));
  Tensor wrong = Tensor::empty_host({3, 5}, DType::bf16);
  EXPECT_THROW(wrong.copy_from(d, ctx().stream().get()), Error);
}

TEST(Allocator, ReusesFreedBlocksAndCountsThem) {
  CachingAllocator alloc(ctx().device());
  void* a = alloc.allocate(1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  alloc.deallocate(a);
  void* b = alloc.allocate(900);  // same 1024-byte bin
  EXPECT_EQ(a, b);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.device_allocations, 1u);
  EXPECT_EQ(s.allocated_bytes, 1024u);
  void* big = alloc.allocate(3 << 20);
  EXPECT_EQ(alloc.stats().allocated_bytes, 1024u + (4u << 20));
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, 1024u + (4u << 20));
  alloc.deallocate(big);
  alloc.deallocate(b);
  EXPECT_EQ(alloc.stats().cached_bytes, 1024u + (4u << 20));
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);
  EXPECT_EQ(alloc.allocate(0), nullptr);
}

TEST(Allocator, PrivatePoolKeepsItsBlocksFromOthers) {
  CachingAllocator alloc(ctx().device());
  void* before = alloc.allocate(1000);  // a shared block the recorded work frees
  void* shared_free = alloc.allocate(1000);
  alloc.deallocate(shared_free);
  void *temp = nullptr, *kept = nullptr;
  {
    PrivatePool pool(alloc);
    pool.use([&] {
      temp = alloc.allocate(1000);  // taken from the shared cache: the pool's now
      EXPECT_EQ(temp, shared_free);
      kept = alloc.allocate(3 << 20);
      alloc.deallocate(temp);
      EXPECT_EQ(alloc.allocate(1000), temp);  // reused inside the pool
      alloc.deallocate(temp);
      alloc.deallocate(before);  // adopted by the pool
    });
    EXPECT_EQ(pool.bytes(), 1024u + 1024u + (4u << 20));
    EXPECT_EQ(alloc.stats().pooled_bytes, 2048u);
    EXPECT_EQ(alloc.stats().cached_bytes, 0u);
    // Outside the pool nobody gets its blocks, even of the same size.
    void* other = alloc.allocate(1000);
    EXPECT_NE(other, temp);
    EXPECT_NE(other, before);
    alloc.deallocate(other);
    alloc.deallocate(kept);  // a pool block freed later returns to the pool
    EXPECT_EQ(alloc.stats().pooled_bytes, 2048u + (4u << 20));
    void* big = alloc.allocate(3 << 20);
    EXPECT_NE(big, kept);
    alloc.deallocate(big);
    pool.use([&] { EXPECT_EQ(alloc.allocate(3 << 20), kept); });  // the pool serves again
    EXPECT_THROW(alloc.begin_pool(12345), Error);
    const CachingAllocator::PoolId second = alloc.create_pool();
    alloc.begin_pool(second);
    EXPECT_THROW(pool.use([] {}), Error);  // one pool active at a time
    alloc.end_pool();
    EXPECT_THROW(alloc.end_pool(), Error);
    alloc.release_pool(second);
    // Work that throws leaves the pool inactive: the next allocation is not the pool's.
    EXPECT_THROW(pool.use([] { LW_FAIL("the recorded work failed"); }), Error);
    void* after = alloc.allocate(1000);
    EXPECT_NE(after, temp);
    EXPECT_NE(after, before);
    alloc.deallocate(after);
  }
  // Released: the free blocks are the shared cache's, the block still in use returns there.
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.pooled_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 1024u + 1024u + 1024u + (4u << 20));
  alloc.deallocate(kept);
  EXPECT_EQ(alloc.stats().cached_bytes, 1024u * 3 + (8u << 20));
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
}

TEST(Allocator, ReportsMisuseAndExhaustion) {
  CachingAllocator alloc(ctx().device());
  int on_stack = 0;
  EXPECT_THROW(alloc.deallocate(&on_stack), Error);
  try {
    alloc.allocate(size_t(1) << 52);  // 4 PiB
    FAIL() << "a 4 PiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
}

TEST(Errors, VendorFailuresCarryTheVendorMessageAndLocation) {
  try {
    LW_CUDA_CHECK(cudaSetDevice(12345));
    FAIL() << "cudaSetDevice(12345) succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cudaSetDevice(12345)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_core.cpp:"), std::string::npos) << msg;
    EXPECT_NE(msg.find(cudaGetErrorName(cudaErrorInvalidDevice)), std::string::npos) << msg;
  }
  LW_CUDA_CHECK(cudaSetDevice(ctx().device()));
}

TEST(Errors, LaunchConfigurationIsChecked) {
  EXPECT_THROW(gpu::check_launch_config("k", {dim3(1), dim3(2048), 0, nullptr}), Error);
  EXPECT_THROW(gpu::check_launch_config("k", {dim3(0), dim3(32), 0, nullptr}), Error);
  EXPECT_THROW(gpu::check_launch_config("k", {dim3(1, 70000), dim3(32), 0, nullptr}), Error);
  EXPECT_NO_THROW(gpu::check_launch_config("k", {dim3(1000), dim3(32, 32), 0, nullptr}));
  // Clusters along y: at most 8 blocks, dividing grid y; only CUDA builds launch them.
  gpu::LaunchConfig clustered{dim3(2, 12), dim3(128), 0, nullptr};
  clustered.cluster_y = 5;
  EXPECT_THROW(gpu::check_launch_config("k", clustered), Error);
  clustered.cluster_y = 9;
  clustered.grid = dim3(2, 18);
  EXPECT_THROW(gpu::check_launch_config("k", clustered), Error);
  clustered.cluster_y = 0;
  EXPECT_THROW(gpu::check_launch_config("k", clustered), Error);
  clustered.cluster_y = 4;
  clustered.grid = dim3(2, 12);
  if (std::string(gpu::target_name()) == "cuda") EXPECT_NO_THROW(gpu::check_launch_config("k", clustered));
  else EXPECT_THROW(gpu::check_launch_config("k", clustered), Error);
  try {
    gpu::check_launch_config("my_kernel", {dim3(1), dim3(33, 32), 0, nullptr});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("my_kernel"), std::string::npos) << e.what();
  }
}

TEST(Context, KnowsItsDevice) {
  EXPECT_TRUE(ctx().warp_size() == 32 || ctx().warp_size() == 64);
  EXPECT_EQ(ctx().warp_size(), gpu::warp_size(ctx().device()));
  EXPECT_FALSE(ctx().device_name().empty());
  EXPECT_EQ(gpu::round_block_size(1, 64), 64);
  EXPECT_EQ(gpu::round_block_size(65, 32), 96);
  EXPECT_EQ(gpu::round_block_size(0, 32), 32);
  EXPECT_THROW(Context(9999), Error);
}

struct CountingResource {
  explicit CountingResource(Context&) { ++made; }
  static inline int made = 0;
};

TEST(Context, ResourcesAreMadeOnce) {
  CountingResource& a = ctx().resource<CountingResource>();
  CountingResource& b = ctx().resource<CountingResource>();
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(CountingResource::made, 1);
}

}  // namespace
}  // namespace lw::test
