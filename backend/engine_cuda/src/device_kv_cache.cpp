#include "spindle/engine_cuda/device_kv_cache.h"

#include "spindle/core/error.h"

namespace spindle::engine_cuda {

namespace cuda = kernels::cuda;

DeviceKvCache::DeviceKvCache(const engine::ModelConfig& config, engine::KvCacheOptions options,
                             Precision precision, engine::Device device)
    : config_(config), blocks_(config.max_seq_len, options), precision_(precision),
      device_(device) {
  const int64_t rows = blocks_.n_blocks() * blocks_.block_size();
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    k_.emplace_back(rows, config_.kv_dim(), precision_);
    v_.emplace_back(rows, config_.kv_dim(), precision_);
    // Zeroed once: attention kernels may load whole blocks and mask the unused rows, which
    // must then hold finite values.
    k_.back().zero();
    v_.back().zero();
  }
  // The legacy stream only (the memsets ran there): a device-wide sync would break another
  // engine thread's graph capture on this device.
  cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (KV cache zeroing)");
}

size_t DeviceKvCache::bytes() const {
  size_t total = 0;
  for (size_t l = 0; l < k_.size(); ++l) total += k_[l].bytes() + v_[l].bytes();
  return total;
}

void DeviceKvCache::copy_block(const engine::KvBlockCopy& copy, cudaStream_t stream) {
  const size_t row_bytes = size_t(config_.kv_dim()) * precision_bytes(precision_);
  const size_t block_bytes = size_t(blocks_.block_size()) * row_bytes;
  for (size_t l = 0; l < k_.size(); ++l) {
    for (DeviceTensor* t : {&k_[l], &v_[l]}) {
      auto* base = static_cast<unsigned char*>(t->raw());
      cuda::check(cudaMemcpyAsync(base + size_t(copy.to) * block_bytes,
                                  base + size_t(copy.from) * block_bytes,
                                  size_t(copy.n_tokens) * row_bytes, cudaMemcpyDeviceToDevice,
                                  stream),
                  "cudaMemcpyAsync (KV copy-on-write)");
    }
  }
}

void DeviceKvCache::append(SeqId seq, int64_t n, std::vector<int64_t>& slots,
                           cudaStream_t stream) {
  if (const auto copy = blocks_.append(seq, n, slots)) copy_block(*copy, stream);
}

template <class T>
cuda::DevicePagedKv<T> DeviceKvCache::layer(int64_t l) {
  cuda::DevicePagedKv<T> kv;
  kv.k = k_.at(size_t(l)).data<T>();
  kv.v = v_.at(size_t(l)).data<T>();
  kv.n_blocks = blocks_.n_blocks();
  kv.block_size = blocks_.block_size();
  kv.n_kv_heads = config_.n_kv_heads;
  kv.head_dim = config_.head_dim;
  return kv;
}

template cuda::DevicePagedKv<float> DeviceKvCache::layer<float>(int64_t);
template cuda::DevicePagedKv<cuda::bf16> DeviceKvCache::layer<cuda::bf16>(int64_t);

}  // namespace spindle::engine_cuda
