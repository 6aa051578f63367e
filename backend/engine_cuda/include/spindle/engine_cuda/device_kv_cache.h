#pragma once
// Paged KV cache in device memory: the twin of engine::KvCache (engine/kv_cache.h, read it
// first). Per layer, K and V are [n_blocks, block_size, n_kv_heads, head_dim] of the model's
// Precision on the device; block tables, reference counts and the free list live on the host
// in the same engine::KvBlockTable (kv_blocks.h): fork shares every block, the first append into
// a shared, partially filled last block copies it (copy-on-write, a device-to-device copy on the
// caller's stream), full blocks stay shared for life. The block tables reach the device per
// forward (the model mirrors them into its DeviceForwardState).
//
// Threading: not thread-safe; one engine loop owns a cache.

#include <cstdint>
#include <vector>

#include "spindle/engine/kv_blocks.h"
#include "spindle/engine/kv_cache.h"
#include "spindle/engine/model_config.h"
#include "spindle/engine_cuda/device_tensor.h"
#include "spindle/kernels/cuda/attention.h"

namespace spindle::engine_cuda {

using engine::SeqId;

// The CUDA implementation of engine::KvPool (engine/device.h).
class DeviceKvCache final : public engine::KvPool {
 public:
  // Same option checks and sizing as engine::KvCache (n_blocks 0: max_seqs full contexts).
  // The cache lives on the current CUDA device (`device` names it).
  DeviceKvCache(const engine::ModelConfig& config, engine::KvCacheOptions options,
                Precision precision, engine::Device device = {engine::DeviceKind::cuda, 0});
  DeviceKvCache(const DeviceKvCache&) = delete;
  DeviceKvCache& operator=(const DeviceKvCache&) = delete;

  engine::Device device() const override { return device_; }
  // Process-unique (next_device_object_id): graph keys tell a new cache at a reused address
  // from the one a graph was captured over, whichever thread made it.
  uint64_t id() const { return id_; }
  SeqId create() override { return blocks_.create(); }
  // Shares every block of `parent` (same length, same tokens).
  SeqId fork(SeqId parent) override { return blocks_.fork(parent); }
  void release(SeqId seq) override { blocks_.release(seq); }

  int64_t length(SeqId seq) const override { return blocks_.length(seq); }
  const std::vector<int32_t>& block_table(SeqId seq) const { return blocks_.block_table(seq); }

  // As engine::KvCache::append: room for n more tokens of `seq`, flat slots of the new tokens
  // appended to `slots`. A copy-on-write block copy is queued on `stream` (all layers), so work
  // that later writes the new tokens on the same stream sees the copied prefix. Throws resource
  // when blocks run out (the cache is left unchanged).
  void append(SeqId seq, int64_t n, std::vector<int64_t>& slots, cudaStream_t stream);
  int64_t blocks_needed(SeqId seq, int64_t n) const override {
    return blocks_.blocks_needed(seq, n);
  }

  // Device view of layer l's K/V; T must match precision() (std::logic_error otherwise).
  template <class T>
  kernels::cuda::DevicePagedKv<T> layer(int64_t l);

  Precision precision() const { return precision_; }
  int64_t block_size() const override { return blocks_.block_size(); }
  int64_t n_blocks() const override { return blocks_.n_blocks(); }
  int64_t free_blocks() const override { return blocks_.free_blocks(); }
  int64_t live_sequences() const { return blocks_.live_sequences(); }
  size_t bytes() const override;

 private:
  void copy_block(const engine::KvBlockCopy& copy, cudaStream_t stream);

  engine::ModelConfig config_;
  engine::KvBlockTable blocks_;
  Precision precision_;
  engine::Device device_;
  uint64_t id_ = next_device_object_id();
  // Per layer, [n_blocks·block_size, kv_cache_heads·kv_cache_head_dim]; v_ is empty for MLA
  // (the latent row is read as K and V).
  std::vector<DeviceTensor> k_, v_;
};

}  // namespace spindle::engine_cuda
