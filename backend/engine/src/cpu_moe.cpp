// The CPU ops of routed experts (Qwen3-MoE, DeepSeek-V3) for the decoder graph: a softmax or
// sigmoid (group-limited, bias-steered) router, top-k per token, and one GEMM per expert over the
// token rows routed to it (the assignments sorted by expert, as SGMV groups rows by adapter slot).
// No per-token loops over experts.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cpu_ops.h"
#include "spindle/kernels/matmul.h"

namespace spindle::engine::internal {

using kernels::Trans;

void CpuOps::moe_route(int64_t l, const Tensor& xn, MoeActivations& m) {
  const LayerWeights& L = layer(l);
  const int64_t T = xn.dim(0), D = c_.dim, E = c_.moe.n_experts, K = c_.moe.top_k;
  ensure(m.logits, {T, E});
  kernels::linear(xn.data(), D, T, D, L.router.data(), E, m.logits.data(), E, /*beta=*/0.0f);
  ensure(m.probs, {T, E});
  ensure(m.weight, {T * K});
  route_experts(c_, m.logits.data(), c_.moe.correction_bias ? L.router_bias.data() : nullptr, T,
                st_.segments, m.probs.data(), m.weight.data(), m);
  ensure(m.xg, {T * K, D});
  for (int64_t i = 0; i < T * K; ++i) {
    std::memcpy(m.xg.row(i), xn.row(m.order[size_t(i)] / K), size_t(D) * sizeof(float));
  }
}

std::span<const kernels::LoraSegment> CpuOps::expert_segments(const MoeActivations& m,
                                                              int64_t e) const {
  const auto b = m.lora_segs.begin() + m.lora_seg_offsets[size_t(e)];
  const auto en = m.lora_segs.begin() + m.lora_seg_offsets[size_t(e + 1)];
  std::span<const kernels::LoraSegment> segs(b, en);
  return lora_ != nullptr && any_adapted(segs) ? segs : std::span<const kernels::LoraSegment>{};
}

void CpuOps::moe_gate_up(int64_t l, MoeActivations& m) {
  const LayerWeights& L = layer(l);
  const int64_t D = c_.dim, F = c_.moe.expert_dim, rows = m.xg.dim(0);
  ensure(m.gate, {rows, F});
  ensure(m.up, {rows, F});
  for (size_t e = 0; e + 1 < m.offsets.size(); ++e) {
    const int64_t o = m.offsets[e], n = m.offsets[e + 1] - o;
    if (n == 0) continue;
    kernels::linear(m.xg.row(o), D, n, D, L.experts[e].w_gate.data(), F, m.gate.row(o), F, 0.0f);
    kernels::linear(m.xg.row(o), D, n, D, L.experts[e].w_up.data(), F, m.up.row(o), F, 0.0f);
    const auto segs = expert_segments(m, int64_t(e));
    if (segs.empty()) continue;
    if (const auto v = lora_->expert_view(l, LoraTarget::gate, int64_t(e))) {
      lora_apply(*v, m.xg.row(o), D, segs, m.gate.row(o), F);
    }
    if (const auto v = lora_->expert_view(l, LoraTarget::up, int64_t(e))) {
      lora_apply(*v, m.xg.row(o), D, segs, m.up.row(o), F);
    }
  }
}

void CpuOps::moe_down_combine(int64_t l, MoeActivations& m, Tensor& x) {
  const LayerWeights& L = layer(l);
  const int64_t D = c_.dim, F = c_.moe.expert_dim, K = c_.moe.top_k, rows = m.act.dim(0);
  ensure(m.out, {rows, D});
  for (size_t e = 0; e + 1 < m.offsets.size(); ++e) {
    const int64_t o = m.offsets[e], n = m.offsets[e + 1] - o;
    if (n == 0) continue;
    kernels::linear(m.act.row(o), F, n, F, L.experts[e].w_down.data(), D, m.out.row(o), D, 0.0f);
    const auto segs = expert_segments(m, int64_t(e));
    if (segs.empty()) continue;
    if (const auto v = lora_->expert_view(l, LoraTarget::down, int64_t(e))) {
      lora_apply(*v, m.act.row(o), F, segs, m.out.row(o), D);
    }
  }
  // Sorted order: each token's experts are added in expert order, deterministically.
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t j = m.order[size_t(i)];
    const float w = m.weight.data()[j];
    float* xr = x.row(j / K);
    const float* out = m.out.row(i);
    for (int64_t d = 0; d < D; ++d) xr[d] += w * out[d];
  }
}

void CpuOps::moe_down_combine_backward(int64_t l, const MoeActivations& m, const Tensor& dy,
                                       Tensor& d_act, Tensor& d_weight) {
  const LayerWeights& L = layer(l);
  LayerWeights* G = layer_grads(l);
  const int64_t D = c_.dim, F = c_.moe.expert_dim, K = c_.moe.top_k, rows = m.out.dim(0);
  ensure(moe_d_out_, {rows, D});
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t j = m.order[size_t(i)];
    const float w = m.weight.data()[j];
    const float* g = dy.row(j / K);
    const float* out = m.out.row(i);
    float* d = moe_d_out_.row(i);
    double dot = 0;
    for (int64_t c = 0; c < D; ++c) {
      d[c] = w * g[c];
      dot += double(g[c]) * out[c];
    }
    d_weight.data()[j] = float(dot);
  }
  for (size_t e = 0; e + 1 < m.offsets.size(); ++e) {
    const int64_t o = m.offsets[e], n = m.offsets[e + 1] - o;
    if (n == 0) continue;
    // d_act = d_out · W_down (W_down [D, F])
    kernels::gemm(Trans::no, Trans::no, n, F, D, 1.0f, moe_d_out_.row(o), D,
                  L.experts[e].w_down.data(), F, 0.0f, d_act.row(o), F);
    if (G) {  // dW_down += d_outᵀ · act
      kernels::gemm(Trans::yes, Trans::no, D, F, n, 1.0f, moe_d_out_.row(o), D, m.act.row(o), F,
                    1.0f, G->experts[e].w_down.data(), F);
    }
    const auto segs = expert_segments(m, int64_t(e));
    if (!training_lora() || segs.empty()) continue;
    if (const auto v = lora_->expert_view(l, LoraTarget::down, int64_t(e))) {
      LoraGrads& g = *opt_->lora_grads;
      lora_apply_backward(*v, m.act.row(o), F, moe_d_out_.row(o), D, segs,
                          g.expert_dA(l, LoraTarget::down, int64_t(e)),
                          g.expert_dB(l, LoraTarget::down, int64_t(e)), d_act.row(o), F);
    }
  }
}

void CpuOps::moe_gate_up_backward(int64_t l, const MoeActivations& m, const Tensor& d_gate,
                                  const Tensor& d_up, Tensor& d_xn) {
  const LayerWeights& L = layer(l);
  LayerWeights* G = layer_grads(l);
  const int64_t D = c_.dim, F = c_.moe.expert_dim, K = c_.moe.top_k, rows = m.xg.dim(0);
  ensure(moe_d_xg_, {rows, D});
  for (size_t e = 0; e + 1 < m.offsets.size(); ++e) {
    const int64_t o = m.offsets[e], n = m.offsets[e + 1] - o;
    if (n == 0) continue;
    const ExpertWeights& X = L.experts[e];
    kernels::gemm(Trans::no, Trans::no, n, D, F, 1.0f, d_gate.row(o), F, X.w_gate.data(), D, 0.0f,
                  moe_d_xg_.row(o), D);
    kernels::gemm(Trans::no, Trans::no, n, D, F, 1.0f, d_up.row(o), F, X.w_up.data(), D, 1.0f,
                  moe_d_xg_.row(o), D);
    if (G) {  // dW_gate += d_gateᵀ · xg, dW_up += d_upᵀ · xg
      kernels::gemm(Trans::yes, Trans::no, F, D, n, 1.0f, d_gate.row(o), F, m.xg.row(o), D, 1.0f,
                    G->experts[e].w_gate.data(), D);
      kernels::gemm(Trans::yes, Trans::no, F, D, n, 1.0f, d_up.row(o), F, m.xg.row(o), D, 1.0f,
                    G->experts[e].w_up.data(), D);
    }
    const auto segs = expert_segments(m, int64_t(e));
    if (!training_lora() || segs.empty()) continue;
    LoraGrads& g = *opt_->lora_grads;
    for (LoraTarget t : {LoraTarget::gate, LoraTarget::up}) {
      const auto v = lora_->expert_view(l, t, int64_t(e));
      if (!v) continue;
      const Tensor& dy = t == LoraTarget::gate ? d_gate : d_up;
      lora_apply_backward(*v, m.xg.row(o), D, dy.row(o), F, segs, g.expert_dA(l, t, int64_t(e)),
                          g.expert_dB(l, t, int64_t(e)), moe_d_xg_.row(o), D);
    }
  }
  std::memset(d_xn.data(), 0, size_t(d_xn.numel()) * sizeof(float));
  for (int64_t i = 0; i < rows; ++i) {
    float* dst = d_xn.row(m.order[size_t(i)] / K);
    const float* src = moe_d_xg_.row(i);
    for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
  }
}

void CpuOps::moe_route_backward(int64_t l, const Tensor& xn, const MoeActivations& m,
                                const Tensor& d_weight, Tensor& d_xn) {
  const LayerWeights& L = layer(l);
  LayerWeights* G = layer_grads(l);
  const int64_t T = xn.dim(0), D = c_.dim, E = c_.moe.n_experts;
  ensure(moe_d_logits_, {T, E});
  route_experts_backward(c_, m.probs.data(), m.expert, d_weight.data(), T, st_.segments,
                         opt_ ? opt_->moe_aux : nullptr, moe_d_logits_.data());
  // d_xn += dz · W_router (W_router [E, D])
  kernels::gemm(Trans::no, Trans::no, T, D, E, 1.0f, moe_d_logits_.data(), E, L.router.data(), D,
                1.0f, d_xn.data(), D);
  if (G) {
    kernels::gemm(Trans::yes, Trans::no, E, D, T, 1.0f, moe_d_logits_.data(), E, xn.data(), D, 1.0f,
                  G->router.data(), D);
  }
}

}  // namespace spindle::engine::internal

namespace spindle::engine {

MoeAuxLoss moe_aux_loss(const ModelConfig& c, const ForwardState& st) {
  MoeAuxLoss out;
  if (!c.moe.router_aux_loss || c.moe.aux_loss_coef == 0.0f || c.moe.n_experts == 0 ||
      c.moe.scoring != RouterScoring::softmax) {
    return out;  // Qwen3-MoE's softmax router only (DeepSeek balances with the bias instead)
  }
  SPINDLE_CHECK(st.keep_activations && int64_t(st.layers.size()) == c.n_layers, invalid_argument,
                "moe_aux_loss: needs a keep_activations forward");
  const int64_t E = c.moe.n_experts, K = c.moe.top_k;
  const std::vector<int32_t> token_slot = internal::row_slots(st.segments, st.T);
  struct Sums {
    std::vector<double> count, prob;
    double rows = 0;
  };
  std::map<int32_t, Sums> by_slot;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (!c.sparse_layer(l)) continue;
    const MoeActivations& m = st.layers[size_t(l)].moe;
    for (int64_t t = 0; t < st.T; ++t) {
      Sums& s = by_slot[token_slot[size_t(t)]];
      if (s.count.empty()) s.count.assign(size_t(E), 0.0), s.prob.assign(size_t(E), 0.0);
      s.rows += 1;
      for (int64_t k = 0; k < K; ++k) s.count[size_t(m.expert[size_t(t * K + k)])] += 1;
      for (int64_t e = 0; e < E; ++e) s.prob[size_t(e)] += m.probs.row(t)[e];
    }
  }
  const double coef = c.moe.aux_loss_coef;
  for (const auto& [slot, s] : by_slot) {
    const double N = s.rows;
    double aux = 0;
    std::vector<float> g(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      aux += (s.count[size_t(e)] / N) * (s.prob[size_t(e)] / N);
      g[size_t(e)] = float(coef * double(E) * s.count[size_t(e)] / (N * N));
    }
    out.value += coef * double(E) * aux;
    out.grad.emplace(slot, std::move(g));
  }
  return out;
}

}  // namespace spindle::engine
