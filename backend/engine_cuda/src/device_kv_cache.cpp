#include "spindle/engine_cuda/device_kv_cache.h"

#include "spindle/core/error.h"

namespace spindle::engine_cuda {

namespace cuda = kernels::cuda;

DeviceKvCache::DeviceKvCache(const engine::ModelConfig& config, engine::KvCacheOptions options,
                             Precision precision, engine::Device device)
    : config_(config), blocks_(config.max_seq_len, options), precision_(precision),
      device_(device) {
  const int64_t rows = blocks_.n_blocks() * blocks_.block_size();
  // Per token and layer: K and V rows of n_kv_heads·head_dim, or (MLA) one latent row
  // [ckv, k_pe] that attention reads as both K and V (as engine::KvCache).
  const int64_t width = config_.kv_cache_heads() * config_.kv_cache_head_dim();
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    k_.emplace_back(rows, width, precision_);
    // Zeroed once: attention kernels may load whole blocks and mask the unused rows, which
    // must then hold finite values.
    k_.back().zero();
    if (!config_.mla_attention()) {
      v_.emplace_back(rows, width, precision_);
      v_.back().zero();
    }
  }
  // The legacy stream only (the memsets ran there): a device-wide sync would break another
  // engine thread's graph capture on this device.
  cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (KV cache zeroing)");
}

size_t DeviceKvCache::bytes() const {
  size_t total = 0;
  for (const DeviceTensor& t : k_) total += t.bytes();
  for (const DeviceTensor& t : v_) total += t.bytes();
  return total;
}

void DeviceKvCache::copy_block(const engine::KvBlockCopy& copy, cudaStream_t stream) {
  const size_t row_bytes = size_t(config_.kv_cache_heads() * config_.kv_cache_head_dim()) *
                           precision_bytes(precision_);
  const size_t block_bytes = size_t(blocks_.block_size()) * row_bytes;
  const auto copy_in = [&](DeviceTensor& t) {
    auto* base = static_cast<unsigned char*>(t.raw());
    cuda::check(cudaMemcpyAsync(base + size_t(copy.to) * block_bytes,
                                base + size_t(copy.from) * block_bytes,
                                size_t(copy.n_tokens) * row_bytes, cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpyAsync (KV copy-on-write)");
  };
  for (DeviceTensor& t : k_) copy_in(t);
  for (DeviceTensor& t : v_) copy_in(t);  // none for MLA's latent cache
}

void DeviceKvCache::append(SeqId seq, int64_t n, std::vector<int64_t>& slots,
                           cudaStream_t stream) {
  if (const auto copy = blocks_.append(seq, n, slots)) copy_block(*copy, stream);
}

template <class T>
cuda::DevicePagedKv<T> DeviceKvCache::layer(int64_t l) {
  cuda::DevicePagedKv<T> kv;
  kv.k = k_.at(size_t(l)).data<T>();
  kv.v = config_.mla_attention() ? kv.k : v_.at(size_t(l)).data<T>();  // MLA: the row is K and V
  kv.n_blocks = blocks_.n_blocks();
  kv.block_size = blocks_.block_size();
  kv.n_kv_heads = config_.kv_cache_heads();
  kv.head_dim = config_.kv_cache_head_dim();
  return kv;
}

template cuda::DevicePagedKv<float> DeviceKvCache::layer<float>(int64_t);
template cuda::DevicePagedKv<cuda::bf16> DeviceKvCache::layer<cuda::bf16>(int64_t);

}  // namespace spindle::engine_cuda
