// Model::backward: reverse-mode through the decoder for LoRA (and optionally base) gradients.
// Reads the activations a keep_activations forward left in ForwardState; the base is read only.

#include <cmath>
#include <cstring>

#include "spindle/core/error.h"
#include "spindle/engine/model.h"

#include "model_internal.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/lora.h"
#include "spindle/kernels/matmul.h"
#include "spindle/kernels/norm.h"
#include "spindle/kernels/rope.h"

namespace spindle::engine {
namespace {

using kernels::Trans;

using internal::chunk_segments;
using internal::ensure;

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
      if (l < out.modules.size() && !out.modules[l][size_t(t)].empty()) {
        LoraPair& p = out.modules[l][size_t(t)];
        const int64_t r = p.A.dim(0);
        for (int64_t i = 0; i < r * d_in; ++i) p.A.data()[i] += gA[i];
        for (int64_t j = 0; j < d_out; ++j)
          for (int64_t i = 0; i < r; ++i) p.B.data()[j * r + i] += gB[j * R + i];
      }
      std::memset(gA, 0, size_t(R * d_in) * sizeof(float));
      std::memset(gB, 0, size_t(d_out * R) * sizeof(float));
    }
  }
}

void Model::project_backward(const LoraSlotPool* lora, const BackwardOptions& opt, int64_t layer,
                             LoraTarget target, const float* x, int64_t T, const Tensor& W,
                             const float* dy, int64_t ld_dy,
                             std::span<const kernels::LoraSegment> segments, float* dx,
                             float beta_dx, Tensor* dW, ForwardState& st) const {
  const int64_t k = W.dim(1), n = W.dim(0);
  // dx = dy·W (+ beta·dx)
  kernels::gemm(Trans::no, Trans::no, T, k, n, 1.0f, dy, ld_dy, W.data(), k, beta_dx, dx, k);
  if (dW) {  // dW += dyᵀ·x
    kernels::gemm(Trans::yes, Trans::no, n, k, T, 1.0f, dy, ld_dy, x, k, 1.0f, dW->data(), k);
  }
  if (lora == nullptr || opt.lora_grads == nullptr) return;
  bool any = false;
  for (const auto& s : segments) any |= s.slot >= 0;
  if (!any) return;
  const auto view = lora->view(layer, target);
  if (!view) return;
  ensure(st.lora_h, {T, view->max_rank});
  ensure(st.lora_dh, {T, view->max_rank});
  kernels::lora_shrink(x, k, *view, segments, st.lora_h.data());
  kernels::lora_expand_backward(st.lora_h.data(), dy, ld_dy, /*col_offset=*/0, *view, segments,
                                st.lora_dh.data(), opt.lora_grads->dB(layer, target));
  kernels::lora_shrink_backward(x, k, st.lora_dh.data(), *view, segments,
                                opt.lora_grads->dA(layer, target), dx, k);
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
  project_backward(lora, opt, 0, LoraTarget::lm_head, st.x_final.row(r0), r1 - r0,
                   weights_.unembedding(), dlogits.data(), c.vocab_size, segs, d_hidden.row(r0),
                   /*beta_dx=*/0.0f, dU, st);
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
  ModelWeights* G = opt.base_grads;
  const Tensor* d_xf = opt.d_hidden;
  SPINDLE_CHECK(d_xf != nullptr, invalid_argument,
                "backward: d_hidden (from unembed_backward over every row) is required");
  SPINDLE_CHECK(d_xf->shape() == (Shape{T, c.dim}), invalid_argument,
                "backward: d_hidden must be [{}, {}]", T, c.dim);
  Tensor dx({T, c.dim});
  kernels::rmsnorm_backward(st.x_last.data(), c.dim, weights_.final_norm.data(),
                            st.inv_rms_final.data(), d_xf->data(), c.dim, dx.data(), c.dim, T,
                            c.dim, 0.0f, G ? G->final_norm.data() : nullptr);

  std::vector<kernels::DenseSeq> dense;
  for (const auto& s : st.attn_seqs) dense.push_back({s.row_begin, s.n_new});
  Tensor d_act({T, c.hidden_dim}), d_gate({T, c.hidden_dim}), d_up({T, c.hidden_dim});
  Tensor d_xn({T, c.dim}), d_attn({T, c.q_dim()});
  Tensor dq({T, c.q_dim()}), dk({T, c.kv_dim()}), dv({T, c.kv_dim()});

  for (int64_t l = c.n_layers - 1; l >= 0; --l) {
    const LayerWeights& w = weights_.layers[size_t(l)];
    LayerActivations& a = st.layers[size_t(l)];
    LayerWeights* g = G ? &G->layers[size_t(l)] : nullptr;

    // MLP: x_out = x_mid + down(silu(gate(xn))·up(xn)), xn = ffn_norm(x_mid).
    project_backward(lora, opt, l, LoraTarget::down, a.act.data(), T, w.w_down, dx.data(), c.dim,
                     st.segments, d_act.data(), 0.0f, g ? &g->w_down : nullptr, st);
    kernels::swiglu_backward(a.gate.data(), a.up.data(), d_act.data(), d_gate.data(), d_up.data(),
                             T * c.hidden_dim);
    project_backward(lora, opt, l, LoraTarget::gate, a.xn_mlp.data(), T, w.w_gate, d_gate.data(),
                     c.hidden_dim, st.segments, d_xn.data(), 0.0f, g ? &g->w_gate : nullptr, st);
    project_backward(lora, opt, l, LoraTarget::up, a.xn_mlp.data(), T, w.w_up, d_up.data(), c.hidden_dim,
                     st.segments, d_xn.data(), 1.0f, g ? &g->w_up : nullptr, st);
    kernels::rmsnorm_backward(a.x_mid.data(), c.dim, w.ffn_norm.data(), a.inv_rms_mlp.data(),
                              d_xn.data(), c.dim, dx.data(), c.dim, T, c.dim, /*beta_dx=*/1.0f,
                              g ? g->ffn_norm.data() : nullptr);

    // Attention: x_mid = x_in + o(attn(rope(norm(q(xn))), rope(norm(k(xn))), v(xn))).
    project_backward(lora, opt, l, LoraTarget::o, a.attn.data(), T, w.wo, dx.data(), c.dim, st.segments,
                     d_attn.data(), 0.0f, g ? &g->wo : nullptr, st);
    kernels::attention_backward(a.q.data(), a.k.data(), a.v.data(), d_attn.data(), dq.data(),
                                dk.data(), dv.data(), c.n_heads, c.n_kv_heads, c.head_dim, dense,
                                1.0f / std::sqrt(float(c.head_dim)));
    kernels::rope(dq.data(), c.q_dim(), T, c.n_heads, c.head_dim, st.positions.data(),
                  inv_freq_.data(), kernels::RopeStyle::half, /*inverse=*/true);
    kernels::rope(dk.data(), c.kv_dim(), T, c.n_kv_heads, c.head_dim, st.positions.data(),
                  inv_freq_.data(), kernels::RopeStyle::half, /*inverse=*/true);
    if (c.arch == Arch::qwen3) {
      // In place is not allowed (dx may not alias dy): go through d_pre buffers.
      Tensor dq_pre({T, c.q_dim()}), dk_pre({T, c.kv_dim()});
      kernels::rmsnorm_backward(a.q_pre.data(), c.head_dim, w.q_norm.data(), a.inv_rms_q.data(),
                                dq.data(), c.head_dim, dq_pre.data(), c.head_dim, T * c.n_heads,
                                c.head_dim, 0.0f, g ? g->q_norm.data() : nullptr);
      kernels::rmsnorm_backward(a.k_pre.data(), c.head_dim, w.k_norm.data(), a.inv_rms_k.data(),
                                dk.data(), c.head_dim, dk_pre.data(), c.head_dim,
                                T * c.n_kv_heads, c.head_dim, 0.0f,
                                g ? g->k_norm.data() : nullptr);
      dq = std::move(dq_pre);
      dk = std::move(dk_pre);
    }
    project_backward(lora, opt, l, LoraTarget::q, a.xn_attn.data(), T, w.wq, dq.data(), c.q_dim(),
                     st.segments, d_xn.data(), 0.0f, g ? &g->wq : nullptr, st);
    project_backward(lora, opt, l, LoraTarget::k, a.xn_attn.data(), T, w.wk, dk.data(), c.kv_dim(),
                     st.segments, d_xn.data(), 1.0f, g ? &g->wk : nullptr, st);
    project_backward(lora, opt, l, LoraTarget::v, a.xn_attn.data(), T, w.wv, dv.data(), c.kv_dim(),
                     st.segments, d_xn.data(), 1.0f, g ? &g->wv : nullptr, st);
    kernels::rmsnorm_backward(a.x_in.data(), c.dim, w.attn_norm.data(), a.inv_rms_attn.data(),
                              d_xn.data(), c.dim, dx.data(), c.dim, T, c.dim, /*beta_dx=*/1.0f,
                              g ? g->attn_norm.data() : nullptr);
  }

  // Embedding gather: scatter-add into the rows of the tokens (full-parameter mode only).
  if (G) {
    SPINDLE_CHECK(int64_t(st.tokens.size()) == T, internal, "backward: token record missing");
    for (int64_t t = 0; t < T; ++t) {
      float* row = G->tok_emb.row(st.tokens[size_t(t)]);
      const float* d = dx.row(t);
      for (int64_t i = 0; i < c.dim; ++i) row[i] += d[i];
    }
  }
}

}  // namespace spindle::engine
