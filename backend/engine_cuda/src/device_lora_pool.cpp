#include "spindle/engine_cuda/device_lora_pool.h"

#include <algorithm>
#include <cstring>

#include "spindle/core/error.h"
#include "spindle/engine_cuda/device_errors.h"

namespace spindle::engine_cuda {

namespace cuda = kernels::cuda;
using engine::kAllLoraTargets;
using engine::LoraTarget;

DeviceLoraPool::DeviceLoraPool(const engine::ModelConfig& config, engine::LoraPoolOptions options,
                               engine::Device device)
    : config_(config), options_(std::move(options)), device_(device) {
  engine::validate_lora_pool_options(options_);
  const int64_t S = options_.max_slots, R = options_.max_rank;
  modules_.resize(size_t(config_.n_layers));
  expert_modules_.resize(size_t(config_.n_layers));
  size_t per_slot_floats = 0;  // one adapter's packed A and B, every module
  // `blocks` zeroed [max_slots, ...] blocks (1 for a dense module, n_experts for experts).
  const auto make_module = [&](int64_t d_in, int64_t d_out, int64_t blocks) {
    Module m;
    m.A = cuda::DeviceBuffer<float>(size_t(blocks * S * R * d_in));
    m.B = cuda::DeviceBuffer<float>(size_t(blocks * S * d_out * R));
    m.A.zero();
    m.B.zero();
    m.d_in = d_in;
    m.d_out = d_out;
    m.index = n_modules_++;
    per_slot_floats += size_t(blocks * R * (d_in + d_out));
    return m;
  };
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (LoraTarget t : options_.targets) {
      auto& dense = modules_[size_t(l)][size_t(t)];
      if (engine::lora_module_exists(config_, l, t) && !dense) {  // (a target listed twice)
        auto [d_in, d_out] = engine::lora_target_dims(config_, l, t);
        dense = make_module(d_in, d_out, 1);
        dense->dirty.assign(size_t(S), 0);
      }
      if (!engine::lora_experts_exist(config_, l, t)) continue;
      auto& experts = expert_modules_[size_t(l)][size_t(engine::expert_proj(t))];
      if (experts) continue;
      auto [d_in, d_out] = engine::lora_expert_dims(config_, t);
      experts = make_module(d_in, d_out, config_.moe.n_experts);
    }
  }
  rank_host_.assign(size_t(n_modules_ * S), 0);
  scale_host_.assign(size_t(n_modules_ * S), 0.0f);
  rank_dev_ = cuda::DeviceBuffer<int32_t>(rank_host_.size());
  scale_dev_ = cuda::DeviceBuffer<float>(scale_host_.size());
  rank_dev_.upload(rank_host_);
  scale_dev_.upload(scale_host_);
  slot_rank_.assign(size_t(S), 0);
  occupied_.assign(size_t(S), false);

  // Staging: one adapter's A/B blocks, then its column of the rank and scale tables.
  staging_bytes_ = per_slot_floats * sizeof(float) + size_t(n_modules_) * 8;
  cuda::check(cudaMallocHost(&staging_, std::max<size_t>(staging_bytes_, 8)), "cudaMallocHost");
  cuda::check(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming), "cudaEventCreate");
  loaded_.assign(size_t(S), nullptr);
  for (auto& e : loaded_) {
    cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  // The legacy stream only (the zeroing ran there): a device-wide sync would break another
  // engine thread's graph capture on this device.
  cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (pool zeroing)");
}

DeviceLoraPool::~DeviceLoraPool() {
  // Queued copies read the staging buffer: let them finish before freeing it.
  if (loader_.get() != nullptr) cudaStreamSynchronize(loader_.get());
  for (cudaEvent_t e : loaded_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (staging_free_ != nullptr) cudaEventDestroy(staging_free_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

DeviceLoraPool::Module* DeviceLoraPool::module(int64_t layer, LoraTarget target) {
  if (!engine::lora_target_per_layer(target)) layer = 0;
  auto& m = modules_.at(size_t(layer))[size_t(target)];
  return m ? &*m : nullptr;
}

const DeviceLoraPool::Module* DeviceLoraPool::module(int64_t layer, LoraTarget target) const {
  return const_cast<DeviceLoraPool*>(this)->module(layer, target);
}

DeviceLoraPool::Module* DeviceLoraPool::expert_module(int64_t layer, LoraTarget target) {
  const int p = engine::expert_proj(target);
  if (p < 0 || layer < 0 || layer >= int64_t(expert_modules_.size())) return nullptr;
  auto& m = expert_modules_[size_t(layer)][size_t(p)];
  return m ? &*m : nullptr;
}

const DeviceLoraPool::Module* DeviceLoraPool::expert_module(int64_t layer,
                                                            LoraTarget target) const {
  return const_cast<DeviceLoraPool*>(this)->expert_module(layer, target);
}

void DeviceLoraPool::check_slot(int32_t slot) const {
  SPINDLE_CHECK(slot >= 0 && slot < options_.max_slots, invalid_argument,
                "LoRA slot {} out of range [0, {})", slot, options_.max_slots);
}

void DeviceLoraPool::wait_staging_free() {
  cuda::check(cudaEventSynchronize(staging_free_), "cudaEventSynchronize (LoRA staging)");
}

void DeviceLoraPool::upload_tables_and_record(int32_t slot, size_t offset) {
  // The slot's column of the [n_modules, max_slots] rank and scale tables: one strided copy
  // each (cudaMemcpy2DAsync), so other slots' entries are never rewritten.
  const int64_t S = options_.max_slots;
  auto* base = static_cast<unsigned char*>(staging_);
  auto* ranks = reinterpret_cast<int32_t*>(base + offset);
  auto* scales = reinterpret_cast<float*>(base + offset + size_t(n_modules_) * 4);
  for (int64_t m = 0; m < n_modules_; ++m) {
    ranks[m] = rank_host_[size_t(m * S + slot)];
    scales[m] = scale_host_[size_t(m * S + slot)];
  }
  cudaStream_t s = loader_.get();
  if (n_modules_ > 0) {
    cuda::check(cudaMemcpy2DAsync(rank_dev_.data() + slot, size_t(S) * 4, ranks, 4, 4,
                                  size_t(n_modules_), cudaMemcpyHostToDevice, s),
                "cudaMemcpy2DAsync (LoRA ranks)");
    cuda::check(cudaMemcpy2DAsync(scale_dev_.data() + slot, size_t(S) * 4, scales, 4, 4,
                                  size_t(n_modules_), cudaMemcpyHostToDevice, s),
                "cudaMemcpy2DAsync (LoRA scales)");
  }
  cuda::check(cudaEventRecord(loaded_[size_t(slot)], s), "cudaEventRecord (LoRA slot)");
  cuda::check(cudaEventRecord(staging_free_, s), "cudaEventRecord (LoRA staging)");
}

void DeviceLoraPool::load(int32_t slot, const engine::LoraWeights& adapter) {
  device_call(
      device_,
      [&] { return fmt::format("loading an adapter of rank {} into slot {}", adapter.rank, slot); },
      [&] { load_now(slot, adapter); });
}

void DeviceLoraPool::clear(int32_t slot) {
  device_call(
      device_, [&] { return fmt::format("clearing slot {}", slot); }, [&] { clear_now(slot); });
}

void DeviceLoraPool::load_now(int32_t slot, const engine::LoraWeights& adapter) {
  check_slot(slot);
  engine::validate_lora_load(adapter, slot, config_, options_.max_rank,
                             [&](int64_t l, LoraTarget t) {
                               return module(l, t) != nullptr || expert_module(l, t) != nullptr;
                             });
  wait_staging_free();
  const int64_t S = options_.max_slots, R = options_.max_rank, r = adapter.rank;
  for (int64_t m = 0; m < n_modules_; ++m) {
    rank_host_[size_t(m * S + slot)] = 0;
    scale_host_[size_t(m * S + slot)] = 0.0f;
  }
  auto* stage = static_cast<float*>(staging_);
  size_t used = 0;
  cudaStream_t s = loader_.get();
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      const engine::LoraPair& p = adapter.modules[size_t(l)][size_t(t)];
      if (p.empty() || (!engine::lora_target_per_layer(t) && l != 0)) continue;
      Module& m = *module(l, t);
      // Rows / columns [0, u): the adapter's r, then zeros over what the slot's previous
      // occupant left in [r, dirty). A [u, d_in] lands as one contiguous copy, B [d_out, u]
      // as one strided copy into the [d_out, max_rank] block.
      int32_t& dirty = m.dirty[size_t(slot)];
      const int64_t u = std::max<int64_t>(r, dirty);
      float* a = stage + used;
      float* b = a + u * m.d_in;
      engine::pack_lora_slot(p, u, a, b);  // [u, d_in] and [d_out, u], zero past r
      cuda::check(cudaMemcpyAsync(m.A.data() + int64_t(slot) * R * m.d_in, a,
                                  size_t(u * m.d_in) * sizeof(float), cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync (LoRA A)");
      cuda::check(cudaMemcpy2DAsync(m.B.data() + int64_t(slot) * m.d_out * R,
                                    size_t(R) * sizeof(float), b, size_t(u) * sizeof(float),
                                    size_t(u) * sizeof(float), size_t(m.d_out),
                                    cudaMemcpyHostToDevice, s),
                  "cudaMemcpy2DAsync (LoRA B)");
      used += size_t(u * (m.d_in + m.d_out));
      dirty = int32_t(r);
      rank_host_[size_t(m.index * S + slot)] = int32_t(r);
      scale_host_[size_t(m.index * S + slot)] = adapter.scale();
    }
  }
  // Routed experts: every expert's [max_rank, d_in] (and [d_out, max_rank]) block packed one
  // after the other, then one strided copy into the slot's block of each expert.
  const int64_t E = config_.moe.n_experts;
  for (size_t l = 0; l < adapter.experts.size(); ++l) {
    for (LoraTarget t : engine::kExpertProjTargets) {
      const engine::ExpertLoraPair& p = adapter.experts[l][size_t(engine::expert_proj(t))];
      if (p.empty()) continue;
      Module& m = *expert_module(int64_t(l), t);
      float* a = stage + used;
      float* b = a + E * R * m.d_in;
      for (int64_t e = 0; e < E; ++e) {
        engine::pack_lora_slot(p.A.data() + e * r * m.d_in, p.B.data() + e * m.d_out * r, r,
                               m.d_in, m.d_out, R, a + e * R * m.d_in, b + e * m.d_out * R);
      }
      const size_t a_bytes = size_t(R * m.d_in) * sizeof(float);
      const size_t b_bytes = size_t(m.d_out * R) * sizeof(float);
      cuda::check(cudaMemcpy2DAsync(m.A.data() + int64_t(slot) * R * m.d_in, a_bytes * size_t(S),
                                    a, a_bytes, a_bytes, size_t(E), cudaMemcpyHostToDevice, s),
                  "cudaMemcpy2DAsync (expert LoRA A)");
      cuda::check(cudaMemcpy2DAsync(m.B.data() + int64_t(slot) * m.d_out * R, b_bytes * size_t(S),
                                    b, b_bytes, b_bytes, size_t(E), cudaMemcpyHostToDevice, s),
                  "cudaMemcpy2DAsync (expert LoRA B)");
      used += size_t(E * R * (m.d_in + m.d_out));
      rank_host_[size_t(m.index * S + slot)] = int32_t(r);
      scale_host_[size_t(m.index * S + slot)] = adapter.scale();
    }
  }
  upload_tables_and_record(slot, used * sizeof(float));
  slot_rank_[size_t(slot)] = r;
  occupied_[size_t(slot)] = true;
}

void DeviceLoraPool::clear_now(int32_t slot) {
  check_slot(slot);
  wait_staging_free();
  const int64_t S = options_.max_slots;
  for (int64_t m = 0; m < n_modules_; ++m) {
    rank_host_[size_t(m * S + slot)] = 0;
    scale_host_[size_t(m * S + slot)] = 0.0f;
  }
  upload_tables_and_record(slot, 0);
  slot_rank_[size_t(slot)] = 0;
  occupied_[size_t(slot)] = false;
}

bool DeviceLoraPool::occupied(int32_t slot) const {
  check_slot(slot);
  return occupied_[size_t(slot)];
}

int64_t DeviceLoraPool::rank(int32_t slot) const {
  check_slot(slot);
  return slot_rank_[size_t(slot)];
}

std::optional<int32_t> DeviceLoraPool::first_free() const {
  for (int32_t s = 0; s < options_.max_slots; ++s) {
    if (!occupied_[size_t(s)]) return s;
  }
  return std::nullopt;
}

void DeviceLoraPool::wait_loaded(int32_t slot, cudaStream_t stream) const {
  check_slot(slot);
  cuda::check(cudaStreamWaitEvent(stream, loaded_[size_t(slot)], 0),
              "cudaStreamWaitEvent (LoRA slot)");
}

void DeviceLoraPool::synchronize() const {
  device_call(device_, "waiting for the slot pool's loads", [&] { loader_.synchronize(); });
}

std::optional<cuda::DeviceLoraSlots> DeviceLoraPool::view(int64_t layer, LoraTarget target) const {
  const Module* m = module(layer, target);
  if (!m) return std::nullopt;
  const int64_t S = options_.max_slots;
  cuda::DeviceLoraSlots v;
  v.A = m->A.data();
  v.B = m->B.data();
  v.rank = rank_dev_.data() + m->index * S;
  v.scale = scale_dev_.data() + m->index * S;
  v.host_rank = rank_host_.data() + m->index * S;
  v.host_scale = scale_host_.data() + m->index * S;
  v.max_slots = S;
  v.max_rank = options_.max_rank;
  v.d_in = m->d_in;
  v.d_out = m->d_out;
  return v;
}

std::optional<cuda::DeviceLoraSlots> DeviceLoraPool::expert_view(int64_t layer, LoraTarget target,
                                                                  int64_t expert) const {
  const Module* m = expert_module(layer, target);
  if (!m) return std::nullopt;
  SPINDLE_CHECK(expert >= 0 && expert < config_.moe.n_experts, invalid_argument,
                "expert {} out of range [0, {})", expert, config_.moe.n_experts);
  const int64_t S = options_.max_slots, R = options_.max_rank;
  cuda::DeviceLoraSlots v;
  v.A = m->A.data() + expert * S * R * m->d_in;
  v.B = m->B.data() + expert * S * m->d_out * R;
  v.rank = rank_dev_.data() + m->index * S;
  v.scale = scale_dev_.data() + m->index * S;
  v.host_rank = rank_host_.data() + m->index * S;
  v.host_scale = scale_host_.data() + m->index * S;
  v.max_slots = S;
  v.max_rank = R;
  v.d_in = m->d_in;
  v.d_out = m->d_out;
  return v;
}

size_t DeviceLoraPool::bytes() const {
  size_t total = rank_dev_.bytes() + scale_dev_.bytes();
  for (const auto& layer : modules_) {
    for (const auto& m : layer) {
      if (m) total += m->A.bytes() + m->B.bytes();
    }
  }
  for (const auto& layer : expert_modules_) {
    for (const auto& m : layer) {
      if (m) total += m->A.bytes() + m->B.bytes();
    }
  }
  return total;
}

}  // namespace spindle::engine_cuda
