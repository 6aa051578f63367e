// Model::backward: reverse-mode through the decoder for LoRA (and optionally base) gradients.
// Reads the activations a keep_activations forward left in ForwardState; the base is read only.

#include <cstring>

#include "spindle/core/error.h"
#include "spindle/engine/model.h"

#include "cpu_ops.h"
#include "model_internal.h"

namespace spindle::engine {
namespace {

using internal::chunk_segments;

void add_into(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

LoraGrads::LoraGrads(const LoraSlotPool& pool) : pool_(pool) {
  const ModelConfig& c = pool.config();
  grads_.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      if (!lora_target_per_layer(t) && l != 0) continue;
      const auto v = pool.view(l, t);
      if (!v) continue;
      grads_[size_t(l)][size_t(t)] = {Tensor::zeros({v->max_slots, v->max_rank, v->d_in}),
                                      Tensor::zeros({v->max_slots, v->d_out, v->max_rank})};
    }
  }
  expert_grads_.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (LoraTarget t : kExpertProjTargets) {
      const auto v = pool.expert_view(l, t, 0);
      if (!v) continue;
      const int64_t E = c.moe.n_experts;
      expert_grads_[size_t(l)][size_t(expert_proj(t))] = {
          Tensor::zeros({E, v->max_slots, v->max_rank, v->d_in}),
          Tensor::zeros({E, v->max_slots, v->d_out, v->max_rank})};
    }
  }
}

float* LoraGrads::expert_dA(int64_t layer, LoraTarget target, int64_t expert) {
  if (expert_proj(target) < 0) return nullptr;
  Tensor& g = expert_grads_.at(size_t(layer))[size_t(expert_proj(target))].first;
  return g.empty() ? nullptr : g.data() + expert * g.dim(1) * g.dim(2) * g.dim(3);
}

float* LoraGrads::expert_dB(int64_t layer, LoraTarget target, int64_t expert) {
  if (expert_proj(target) < 0) return nullptr;
  Tensor& g = expert_grads_.at(size_t(layer))[size_t(expert_proj(target))].second;
  return g.empty() ? nullptr : g.data() + expert * g.dim(1) * g.dim(2) * g.dim(3);
}

float* LoraGrads::dA(int64_t layer, LoraTarget target) {
  auto& g = grads_.at(size_t(lora_target_per_layer(target) ? layer : 0))[size_t(target)];
  return g.first.empty() ? nullptr : g.first.data();
}

float* LoraGrads::dB(int64_t layer, LoraTarget target) {
  auto& g = grads_.at(size_t(lora_target_per_layer(target) ? layer : 0))[size_t(target)];
  return g.second.empty() ? nullptr : g.second.data();
}

void LoraGrads::take(int32_t slot, LoraWeights& out) {
  SPINDLE_CHECK(slot >= 0 && slot < pool_.max_slots(), invalid_argument,
                "LoRA gradients: slot {} out of range", slot);
  const int64_t R = pool_.max_rank();
  for (size_t l = 0; l < grads_.size(); ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      auto& g = grads_[l][size_t(t)];
      if (g.first.empty()) continue;
      const int64_t d_in = g.first.dim(2), d_out = g.second.dim(1);
      float* gA = g.first.data() + int64_t(slot) * R * d_in;
      float* gB = g.second.data() + int64_t(slot) * d_out * R;
      int64_t r = R;  // what the kernels may have written: all of it, unless the rank is known
      if (l < out.modules.size() && !out.modules[l][size_t(t)].empty()) {
        LoraPair& p = out.modules[l][size_t(t)];
        r = p.A.dim(0);
        add_into(p.A.data(), gA, r * d_in);
        add_into(p.B.data(), gB, d_out * r);  // dB_s is [d_out, r] packed, as B is
      }
      std::memset(gA, 0, size_t(r * d_in) * sizeof(float));
      std::memset(gB, 0, size_t(d_out * r) * sizeof(float));
    }
  }
  for (size_t l = 0; l < expert_grads_.size(); ++l) {
    for (LoraTarget t : kExpertProjTargets) {
      auto& g = expert_grads_[l][size_t(expert_proj(t))];
      if (g.first.empty()) continue;
      const int64_t E = g.first.dim(0), S = g.first.dim(1), d_in = g.first.dim(3);
      const int64_t d_out = g.second.dim(2);
      ExpertLoraPair* p = nullptr;
      if (l < out.experts.size() && !out.experts[l][size_t(expert_proj(t))].empty()) {
        p = &out.experts[l][size_t(expert_proj(t))];
      }
      for (int64_t e = 0; e < E; ++e) {
        float* gA = g.first.data() + (e * S + slot) * R * d_in;
        float* gB = g.second.data() + (e * S + slot) * d_out * R;
        int64_t r = R;
        if (p) {
          r = p->A.dim(1);
          add_into(p->A.data() + e * r * d_in, gA, r * d_in);
          add_into(p->B.data() + e * d_out * r, gB, d_out * r);
        }
        std::memset(gA, 0, size_t(r * d_in) * sizeof(float));
        std::memset(gB, 0, size_t(d_out * r) * sizeof(float));
      }
    }
  }
}

void Model::unembed_backward(ForwardState& st, const LoraSlotPool* lora,
                             const BackwardOptions& opt, int64_t r0, int64_t r1,
                             const Tensor& dlogits, Tensor& d_hidden) const {
  const ModelConfig& c = config();
  SPINDLE_CHECK(0 <= r0 && r0 < r1 && r1 <= st.x_final.dim(0) &&
                    dlogits.shape() == (Shape{r1 - r0, c.vocab_size}) &&
                    d_hidden.shape() == (Shape{st.x_final.dim(0), c.dim}),
                invalid_argument, "unembed_backward: rows [{}, {}) or shapes do not fit", r0, r1);
  ModelWeights* G = opt.base_grads;
  Tensor* dU = G ? (c.tie_embeddings ? &G->tok_emb : &G->lm_head) : nullptr;
  const auto segs = chunk_segments(st.out_segments, r0, r1);
  internal::CpuOps(*this, nullptr, lora, st, &opt)
      .project_backward_rows(0, LoraTarget::lm_head, st.x_final.row(r0), r1 - r0,
                             weights_.unembedding(), dlogits.data(), c.vocab_size, segs,
                             d_hidden.row(r0), /*beta_dx=*/0.0f, dU);
}

void Model::backward(ForwardState& st, const LoraSlotPool* lora,
                     const BackwardOptions& opt) const {
  const ModelConfig& c = config();
  SPINDLE_CHECK(st.keep_activations && st.all_tokens && int64_t(st.layers.size()) == c.n_layers,
                invalid_argument,
                "backward needs a forward with keep_activations and LogitsFor::all_tokens");
  for (const auto& s : st.attn_seqs) {
    SPINDLE_CHECK(s.n_past == 0, invalid_argument,
                  "backward: training sequences must start at position 0 (one had {} cached)",
                  s.n_past);
  }
  const int64_t T = st.T;
  SPINDLE_CHECK(opt.d_hidden != nullptr, invalid_argument,
                "backward: d_hidden (from unembed_backward over every row) is required");
  SPINDLE_CHECK(opt.d_hidden->shape() == (Shape{T, c.dim}), invalid_argument,
                "backward: d_hidden must be [{}, {}]", T, c.dim);
  internal::CpuOps ops(*this, nullptr, lora, st, &opt);
  DecoderGraph<internal::CpuOps>(ops).backward(*opt.d_hidden);
}

}  // namespace spindle::engine
