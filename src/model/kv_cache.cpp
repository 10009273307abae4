#include "model/kv_cache.h"

#include <algorithm>

#include "core/logging.h"

namespace lw::model {

KvCache::KvCache(Context& ctx, const ModelConfig& config, DType dtype, int64_t num_blocks, int block_size,
                 ops::KvCacheFormat format, const std::vector<KvHeadScales>& head_scales)
    : num_blocks_(num_blocks), block_size_(block_size), format_(format) {
  LW_CHECK(num_blocks > 0 && block_size > 0,
           "KvCache: " << num_blocks << " blocks of " << block_size << " tokens; both must be positive");
  LW_CHECK(format == ops::KvCacheFormat::model || config.head_dim % 16 == 0,
           "KvCache: an " << ops::kv_cache_format_name(format) << " cache needs a head_dim that is a multiple of 16; "
                          << "this model's is " << config.head_dim);
  const std::vector<int64_t> shape{num_blocks, block_size, config.kv_heads, config.head_dim};
  const DType stored = format == ops::KvCacheFormat::model ? dtype : DType::i8;
  Tensor ones;
  if (format == ops::KvCacheFormat::fp8_e4m3) {
    Tensor h = Tensor::empty_host({config.kv_heads}, DType::f32);
    std::fill_n(h.data<float>(), config.kv_heads, 1.0f);
    ones = ctx.to_device(h);
  }
  LW_CHECK(head_scales.empty() || static_cast<int64_t>(head_scales.size()) == config.layers,
           "KvCache: scales for " << head_scales.size() << " layers; the model has " << config.layers);
  if (format == ops::KvCacheFormat::fp8_e4m3) {
    const bool given = std::any_of(head_scales.begin(), head_scales.end(),
                                   [](const KvHeadScales& s) { return s.k.defined() || s.v.defined(); });
    log().info("KV cache: {} blocks of {} tokens in e4m3 with {}", num_blocks, block_size,
               given ? "the checkpoint's key/value scales" : "scale 1 (the checkpoint gives none; magnitudes past 448 saturate)");
  }
  for (int64_t l = 0; l < config.layers; ++l) {
    ops::PagedKv c{ctx.empty(shape, stored), ctx.empty(shape, stored), format, Tensor(), Tensor()};
    if (format == ops::KvCacheFormat::fp8_e4m3) {
      c.k_scale = ctx.empty({config.kv_heads}, DType::f32);
      c.v_scale = ctx.empty({config.kv_heads}, DType::f32);
      const KvHeadScales given = head_scales.empty() ? KvHeadScales{} : head_scales[static_cast<size_t>(l)];
      for (auto [dst, src] : {std::pair<Tensor*, const Tensor*>{&c.k_scale, &given.k}, {&c.v_scale, &given.v}}) {
        LW_CHECK(!src->defined() || (src->dtype() == DType::f32 && src->numel() == config.kv_heads),
                 "KvCache: layer " << l << "'s scales " << src->describe() << " must be f32[" << config.kv_heads << "]");
        dst->copy_from(src->defined() ? *src : ones, ctx.stream().get());
      }
    } else if (format == ops::KvCacheFormat::int8) {
      c.k_scale = ctx.empty({num_blocks, block_size, config.kv_heads}, DType::f32);
      c.v_scale = ctx.empty({num_blocks, block_size, config.kv_heads}, DType::f32);
      LW_CUDA_CHECK(cudaMemsetAsync(c.k_scale.data_ptr(), 0, c.k_scale.nbytes(), ctx.stream().get()));
      LW_CUDA_CHECK(cudaMemsetAsync(c.v_scale.data_ptr(), 0, c.v_scale.nbytes(), ctx.stream().get()));
    }
    layers_.push_back(std::move(c));
  }
}

size_t KvCache::block_bytes(const ModelConfig& config, DType dtype, int block_size, ops::KvCacheFormat format) {
  const size_t per_head = static_cast<size_t>(config.head_dim) * ops::kv_cache_element_bytes(format, dtype) +
                          (format == ops::KvCacheFormat::int8 ? sizeof(float) : 0);
  return 2 * static_cast<size_t>(config.layers) * static_cast<size_t>(block_size) *
         static_cast<size_t>(config.kv_heads) * per_head;
}

}  // namespace lw::model
