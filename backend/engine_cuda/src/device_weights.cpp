#include "spindle/engine_cuda/device_weights.h"

#include <algorithm>

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

// Every expert's `member` [d_out, d_in] stacked into one [n_experts·d_out, d_in] tensor.
DeviceTensor upload_stacked(const std::vector<engine::ExpertWeights>& experts,
                            Tensor engine::ExpertWeights::*member, Precision dtype) {
  if (experts.empty()) return {};
  const Tensor& first = experts.front().*member;
  const int64_t rows = first.dim(0), cols = first.dim(1);
  std::vector<float> host(size_t(int64_t(experts.size()) * rows * cols));
  for (size_t e = 0; e < experts.size(); ++e) {
    const Tensor& t = experts[e].*member;
    std::copy(t.data(), t.data() + t.numel(), host.begin() + int64_t(e) * rows * cols);
  }
  DeviceTensor d(int64_t(experts.size()) * rows, cols, dtype);
  d.upload(host.data(), int64_t(host.size()));
  return d;
}

}  // namespace

DeviceWeights::DeviceWeights(const engine::ModelWeights& w, Precision precision)
    : config_(w.config), precision_(precision) {
  w.validate("DeviceWeights upload");
  if (w.config.mla_attention()) {
    // The attention kernels take head dims that are multiples of 8 up to 256: the absorbed
    // form's latent rows (R + dr) and the uncompressed form's padded heads (max(dn+dr, dv)).
    const engine::MlaConfig& m = w.config.mla;
    const int64_t latent = m.kv_lora_rank + m.qk_rope_head_dim;
    const int64_t padded = std::max(m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim);
    SPINDLE_CHECK(latent % 8 == 0 && latent <= 256 && padded % 8 == 0 && padded <= 256,
                  unsupported,
                  "{}: multi-head latent attention with kv_lora_rank + qk_rope_head_dim = {} and "
                  "a padded head of {} does not run on the CUDA engine (its attention kernels "
                  "take multiples of 8 up to 256; DeepSeek-V3's 576-wide latent needs its own "
                  "decode kernel); serve it with --device cpu",
                  w.config.name, latent, padded);
  }
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
    D.router = upload(L.router, p);
    D.router_bias.assign(L.router_bias.data(), L.router_bias.data() + L.router_bias.numel());
    D.expert_gate = upload_stacked(L.experts, &engine::ExpertWeights::w_gate, p);
    D.expert_up = upload_stacked(L.experts, &engine::ExpertWeights::w_up, p);
    D.expert_down = upload_stacked(L.experts, &engine::ExpertWeights::w_down, p);
    D.wq_a = upload(L.wq_a, p);
    D.q_a_norm = upload(L.q_a_norm, f32);
    D.wq_b = upload(L.wq_b, p);
    D.wkv_a = upload(L.wkv_a, p);
    D.kv_a_norm = upload(L.kv_a_norm, f32);
    D.wkv_b = upload(L.wkv_b, p);
    layers_.push_back(std::move(D));
  }
  final_norm_ = upload(w.final_norm, f32);
  if (!config_.tie_embeddings) lm_head_ = upload(w.lm_head, p);
  const std::vector<float> inv = engine::rope_inv_freq(config_);
  inv_freq_.ensure(1, int64_t(inv.size()), f32);
  inv_freq_.upload(inv.data(), int64_t(inv.size()));
}

size_t DeviceWeights::bytes() const {
  // The checkpoint's tensors, as engine::ModelWeights::bytes (the RoPE table is derived).
  size_t total = tok_emb_.bytes() + final_norm_.bytes() + lm_head_.bytes();
  for (const DeviceLayerWeights& L : layers_) {
    total += L.router_bias.size() * sizeof(float);  // host-side (the routing is), still the base's
    for (const DeviceTensor* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.q_norm, &L.k_norm,
                                  &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down, &L.router, &L.expert_gate,
                                  &L.expert_up, &L.expert_down, &L.wq_a, &L.q_a_norm, &L.wq_b,
                                  &L.wkv_a, &L.kv_a_norm, &L.wkv_b}) {
      total += t->bytes();
    }
  }
  return total;
}

}  // namespace spindle::engine_cuda
