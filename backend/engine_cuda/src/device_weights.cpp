#include "spindle/engine_cuda/device_weights.h"

#include "spindle/core/error.h"
#include "spindle/engine/model.h"

namespace spindle::engine_cuda {
namespace {

DeviceTensor upload(const Tensor& t, Precision dtype) {
  if (t.empty()) return {};
  const int64_t rows = t.rank() == 1 ? 1 : t.dim(0);
  DeviceTensor d(rows, t.numel() / rows, dtype);
  d.upload(t.data(), t.numel());
  return d;
}

}  // namespace

DeviceWeights::DeviceWeights(const engine::ModelWeights& w, Precision precision)
    : config_(w.config), precision_(precision) {
  w.validate("DeviceWeights upload");
  SPINDLE_CHECK(w.config.moe.n_experts == 0, unsupported,
                "{}: {} (routed experts) does not run on the CUDA engine yet; serve it with "
                "--device cpu",
                w.config.name, engine::arch_name(w.config.arch));
  SPINDLE_CHECK(!w.config.mla_attention(), unsupported,
                "{}: multi-head latent attention (kv_lora_rank {}) does not run on the CUDA "
                "engine yet; serve it with --device cpu",
                w.config.name, w.config.mla.kv_lora_rank);
  SPINDLE_CHECK(
      !w.config.rope_scaling || w.config.rope_scaling->type != engine::RopeScalingType::yarn,
      unsupported,
      "{}: YaRN rope scaling does not run on the CUDA engine yet; serve it with "
      "--device cpu",
      w.config.name);
  const Precision p = precision, f32 = Precision::fp32;
  tok_emb_ = upload(w.tok_emb, p);
  for (const engine::LayerWeights& L : w.layers) {
    DeviceLayerWeights D;
    D.attn_norm = upload(L.attn_norm, f32);
    D.wq = upload(L.wq, p);
    D.wk = upload(L.wk, p);
    D.wv = upload(L.wv, p);
    D.wo = upload(L.wo, p);
    D.q_norm = upload(L.q_norm, f32);
    D.k_norm = upload(L.k_norm, f32);
    D.ffn_norm = upload(L.ffn_norm, f32);
    D.w_gate = upload(L.w_gate, p);
    D.w_up = upload(L.w_up, p);
    D.w_down = upload(L.w_down, p);
    layers_.push_back(std::move(D));
  }
  final_norm_ = upload(w.final_norm, f32);
  if (!config_.tie_embeddings) lm_head_ = upload(w.lm_head, p);
  const std::vector<float> inv = engine::rope_inv_freq(config_);
  inv_freq_.ensure(1, int64_t(inv.size()), f32);
  inv_freq_.upload(inv.data(), int64_t(inv.size()));
}

size_t DeviceWeights::bytes() const {
  size_t total = tok_emb_.bytes() + final_norm_.bytes() + lm_head_.bytes() + inv_freq_.bytes();
  for (const DeviceLayerWeights& L : layers_) {
    for (const DeviceTensor* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.q_norm, &L.k_norm,
                                  &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down}) {
      total += t->bytes();
    }
  }
  return total;
}

}  // namespace spindle::engine_cuda
