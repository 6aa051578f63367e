#include "spindle/engine_cuda/train_grads.h"

#include "spindle/core/error.h"

namespace spindle::engine_cuda {

namespace cuda = kernels::cuda;
using engine::LoraTarget;

DeviceLoraGrads::DeviceLoraGrads(const DeviceLoraPool& pool)
    : max_slots_(pool.max_slots()), max_rank_(pool.max_rank()) {
  const engine::ModelConfig& c = pool.config();
  pairs_.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      if (!engine::lora_target_per_layer(t) && l != 0) continue;
      const auto v = pool.view(l, t);
      if (!v) continue;
      Pair& p = pairs_[size_t(l)][size_t(t)];
      p.d_in = v->d_in;
      p.d_out = v->d_out;
      p.dA = cuda::DeviceBuffer<float>(size_t(max_slots_ * max_rank_ * p.d_in));
      p.dB = cuda::DeviceBuffer<float>(size_t(max_slots_ * p.d_out * max_rank_));
      p.dA.zero();
      p.dB.zero();
    }
  }
  n_experts_ = c.moe.n_experts;
  expert_pairs_.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (LoraTarget t : engine::kExpertProjTargets) {
      const auto v = pool.expert_view(l, t, 0);
      if (!v) continue;
      Pair& p = expert_pairs_[size_t(l)][size_t(engine::expert_proj(t))];
      p.d_in = v->d_in;
      p.d_out = v->d_out;
      p.dA = cuda::DeviceBuffer<float>(size_t(n_experts_ * max_slots_ * max_rank_ * p.d_in));
      p.dB = cuda::DeviceBuffer<float>(size_t(n_experts_ * max_slots_ * p.d_out * max_rank_));
      p.dA.zero();
      p.dB.zero();
    }
  }
  // The legacy stream only (the zeroing ran there): a device-wide sync would break another
  // engine thread's graph capture on this device.
  cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (gradient buffers zeroed)");
}

DeviceLoraGrads::Pair* DeviceLoraGrads::pair(int64_t layer, LoraTarget target) {
  Pair& p = pairs_.at(size_t(engine::lora_target_per_layer(target) ? layer : 0))[size_t(target)];
  return p.dA.empty() ? nullptr : &p;
}

float* DeviceLoraGrads::dA(int64_t layer, LoraTarget target) {
  Pair* p = pair(layer, target);
  return p ? p->dA.data() : nullptr;
}

float* DeviceLoraGrads::dB(int64_t layer, LoraTarget target) {
  Pair* p = pair(layer, target);
  return p ? p->dB.data() : nullptr;
}

const float* DeviceLoraGrads::dA(int64_t layer, LoraTarget target) const {
  return const_cast<DeviceLoraGrads*>(this)->dA(layer, target);
}

const float* DeviceLoraGrads::dB(int64_t layer, LoraTarget target) const {
  return const_cast<DeviceLoraGrads*>(this)->dB(layer, target);
}

DeviceLoraGrads::Pair* DeviceLoraGrads::expert_pair(int64_t layer, LoraTarget target) {
  const int proj = engine::expert_proj(target);
  if (proj < 0 || layer < 0 || layer >= int64_t(expert_pairs_.size())) return nullptr;
  Pair& p = expert_pairs_[size_t(layer)][size_t(proj)];
  return p.dA.empty() ? nullptr : &p;
}

float* DeviceLoraGrads::expert_dA(int64_t layer, LoraTarget target, int64_t expert) {
  Pair* p = expert_pair(layer, target);
  return p ? p->dA.data() + expert * max_slots_ * max_rank_ * p->d_in : nullptr;
}

float* DeviceLoraGrads::expert_dB(int64_t layer, LoraTarget target, int64_t expert) {
  Pair* p = expert_pair(layer, target);
  return p ? p->dB.data() + expert * max_slots_ * p->d_out * max_rank_ : nullptr;
}

const float* DeviceLoraGrads::expert_dA(int64_t layer, LoraTarget target, int64_t expert) const {
  return const_cast<DeviceLoraGrads*>(this)->expert_dA(layer, target, expert);
}

const float* DeviceLoraGrads::expert_dB(int64_t layer, LoraTarget target, int64_t expert) const {
  return const_cast<DeviceLoraGrads*>(this)->expert_dB(layer, target, expert);
}

void DeviceLoraGrads::zero_slot(int32_t slot, cudaStream_t stream) {
  SPINDLE_CHECK(slot >= 0 && slot < max_slots_, invalid_argument,
                "LoRA gradients: slot {} out of range [0, {})", slot, max_slots_);
  for (auto& layer : pairs_) {
    for (Pair& p : layer) {
      if (p.dA.empty()) continue;
      const int64_t a = max_rank_ * p.d_in, b = p.d_out * max_rank_;
      cuda::check(cudaMemsetAsync(p.dA.data() + slot * a, 0, size_t(a) * sizeof(float), stream),
                  "cudaMemsetAsync (LoRA dA)");
      cuda::check(cudaMemsetAsync(p.dB.data() + slot * b, 0, size_t(b) * sizeof(float), stream),
                  "cudaMemsetAsync (LoRA dB)");
    }
  }
  // Experts: the slot's block of every expert, one strided memset per tensor.
  for (auto& layer : expert_pairs_) {
    for (Pair& p : layer) {
      if (p.dA.empty()) continue;
      const int64_t a = max_rank_ * p.d_in, b = p.d_out * max_rank_;
      cuda::check(cudaMemset2DAsync(p.dA.data() + slot * a, size_t(max_slots_ * a) * sizeof(float),
                                    0, size_t(a) * sizeof(float), size_t(n_experts_), stream),
                  "cudaMemset2DAsync (expert LoRA dA)");
      cuda::check(cudaMemset2DAsync(p.dB.data() + slot * b, size_t(max_slots_ * b) * sizeof(float),
                                    0, size_t(b) * sizeof(float), size_t(n_experts_), stream),
                  "cudaMemset2DAsync (expert LoRA dB)");
    }
  }
}

size_t DeviceLoraGrads::bytes() const {
  size_t total = 0;
  for (const auto& layer : pairs_)
    for (const Pair& p : layer) total += p.dA.bytes() + p.dB.bytes();
  for (const auto& layer : expert_pairs_)
    for (const Pair& p : layer) total += p.dA.bytes() + p.dB.bytes();
  return total;
}

engine::LoraPair download_slot_pair(const float* A_pool, const float* B_pool, int32_t slot,
                                    int64_t max_rank, int64_t r, int64_t d_in, int64_t d_out,
                                    cudaStream_t stream) {
  SPINDLE_CHECK(r >= 1 && r <= max_rank, invalid_argument,
                "download_slot_pair: rank {} outside [1, {}]", r, max_rank);
  engine::LoraPair p{Tensor({r, d_in}), Tensor({d_out, r})};
  // A: rows [0, r) of the slot's [max_rank, d_in] block are contiguous.
  cuda::check(cudaMemcpyAsync(p.A.data(), A_pool + int64_t(slot) * max_rank * d_in,
                              size_t(r * d_in) * sizeof(float), cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync D2H (LoRA A)");
  // B: columns [0, r) of the slot's [d_out, max_rank] block (pitch max_rank).
  cuda::check(
      cudaMemcpy2DAsync(p.B.data(), size_t(r) * sizeof(float),
                        B_pool + int64_t(slot) * d_out * max_rank, size_t(max_rank) * sizeof(float),
                        size_t(r) * sizeof(float), size_t(d_out), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpy2DAsync D2H (LoRA B)");
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (LoRA download)");
  return p;
}

}  // namespace spindle::engine_cuda
