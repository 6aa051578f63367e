#pragma once
// Small random models and an independent reference forward for engine tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "spindle/engine/lora.h"
#include "spindle/engine/weights.h"

namespace spindle::testing {

// Largest |a − b| over every adapted tensor (dense modules and routed experts) of two adapters
// of the same shape (a failed expectation when their adapted tensors differ in name or shape).
inline float max_abs_diff(const engine::LoraWeights& a, const engine::LoraWeights& b) {
  std::vector<std::pair<std::string, const Tensor*>> x, y;
  engine::for_each_lora_tensor(a, [&](const std::string& n, const Tensor& t) { x.push_back({n, &t}); });
  engine::for_each_lora_tensor(b, [&](const std::string& n, const Tensor& t) { y.push_back({n, &t}); });
  EXPECT_EQ(x.size(), y.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    EXPECT_EQ(x[i].first, y[i].first);
    EXPECT_EQ(x[i].second->shape(), y[i].second->shape()) << x[i].first;
    if (x[i].second->shape() != y[i].second->shape()) continue;
    for (int64_t j = 0; j < x[i].second->numel(); ++j) {
      worst = std::max(worst, std::abs(x[i].second->data()[j] - y[i].second->data()[j]));
    }
  }
  return worst;
}

// Largest |x| over every adapted tensor: the scale for comparing two sums of the same
// gradients taken in different orders (float rounding differs by a few ulps of the largest term).
inline float max_abs(const engine::LoraWeights& a) {
  float m = 0.0f;
  engine::for_each_lora_tensor(a, [&](const std::string&, const Tensor& t) {
    for (float x : t.span()) m = std::max(m, std::abs(x));
  });
  return m;
}

inline engine::ModelConfig tiny_config(engine::Arch arch) {
  engine::ModelConfig c;
  c.arch = arch;
  c.dim = 48;
  c.hidden_dim = 80;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = arch == engine::Arch::llama ? 8 : 12;  // qwen3: head_dim decoupled from dim
  c.vocab_size = 97;
  c.max_seq_len = 64;
  c.rope_theta = arch == engine::Arch::llama ? 10000.0f : 1000000.0f;
  if (arch == engine::Arch::qwen3_moe) {
    // Layers 0 and 2 routed (8 experts, top 2, renormalised), layer 1 dense (mlp_only_layers).
    c.n_layers = 3;
    c.moe = {.n_experts = 8,
             .top_k = 2,
             .expert_dim = 24,
             .sparse_step = 1,
             .dense_layers = {1},
             .norm_topk = true,
             .aux_loss_coef = 0.001f};
  }
  if (arch == engine::Arch::deepseek_v3) {
    // Layer 0 dense (first_k_dense_replace), layers 1 and 2 routed: 8 experts in 4 groups, the
    // best 2 groups kept, top 2, sigmoid + correction bias, one shared expert, scaled weights.
    // MLA with a query latent; v_head_dim ≠ the qk head (the uncompressed form pads); YaRN
    // with an attention factor ≠ 1 (mscale ≠ mscale_all_dim) and a ramp inside the rope dims.
    c.n_layers = 3;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.mla = {.q_lora_rank = 16,
             .kv_lora_rank = 12,
             .qk_nope_head_dim = 8,
             .qk_rope_head_dim = 4,
             .v_head_dim = 10,
             .rope_interleave = true};
    c.head_dim = c.mla.qk_head_dim();
    c.rope_theta = 10000.0f;
    c.rope_scaling = engine::RopeScaling{.type = engine::RopeScalingType::yarn,
                                         .factor = 4.0f,
                                         .original_max_position = 16,
                                         .mscale = 1.0f,
                                         .mscale_all_dim = 0.8f};
    c.moe = {.n_experts = 8,
             .top_k = 2,
             .expert_dim = 16,
             .norm_topk = true,
             .scoring = engine::RouterScoring::sigmoid,
             .n_group = 4,
             .topk_group = 2,
             .routed_scaling = 2.5f,
             .n_shared_experts = 1,
             .first_dense = 1,
             .correction_bias = true};
  }
  c.rms_eps = 1e-6f;
  c.tie_embeddings = arch == engine::Arch::llama;
  c.bos_id = 1;
  c.eos_id = 2;
  return c;
}

// tiny_config with the head dims the CUDA attention kernels take (multiples of 8): Qwen3's 12
// becomes 16; DeepSeek-V3's query head 8 + 4 becomes 12 + 4, so that its latent row (12 + 4)
// and its padded uncompressed head (max(16, 10)) are multiples of 8 too. Qwen3-MoE: 3 layers,
// 0 and 2 routed (8 experts, top 2, renormalised), 1 dense.
inline engine::ModelConfig gpu_tiny_config(engine::Arch arch) {
  engine::ModelConfig c = tiny_config(arch);
  if (c.mla_attention()) {
    c.mla.qk_nope_head_dim = 12;
    c.head_dim = c.mla.qk_head_dim();
  } else if (c.head_dim % 8 != 0) {
    c.head_dim = 16;
  }
  return c;
}

inline engine::ModelWeights random_weights(const engine::ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto fill = [&](Shape shape, float lo, float hi) {
    Tensor t(std::move(shape));
    std::uniform_real_distribution<float> u(lo, hi);
    for (float& x : t.span()) x = u(rng);
    return t;
  };
  engine::ModelWeights w;
  w.config = c;
  w.tok_emb = fill({c.vocab_size, c.dim}, -1.0f, 1.0f);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    engine::LayerWeights L;
    const float a = 1.0f / std::sqrt(float(c.dim));
    L.attn_norm = fill({c.dim}, 0.8f, 1.2f);
    if (c.mla_attention()) {
      const engine::MlaConfig& m = c.mla;
      const int64_t Q = m.q_lora_rank, R = m.kv_lora_rank;
      if (Q > 0) {
        L.wq_a = fill({Q, c.dim}, -a, a);
        L.q_a_norm = fill({Q}, 0.8f, 1.2f);
        L.wq_b = fill({c.q_dim(), Q}, -1 / std::sqrt(float(Q)), 1 / std::sqrt(float(Q)));
      } else {
        L.wq = fill({c.q_dim(), c.dim}, -a, a);
      }
      L.wkv_a = fill({R + m.qk_rope_head_dim, c.dim}, -a, a);
      L.kv_a_norm = fill({R}, 0.8f, 1.2f);
      L.wkv_b = fill({c.n_heads * (m.qk_nope_head_dim + m.v_head_dim), R}, -1 / std::sqrt(float(R)),
                     1 / std::sqrt(float(R)));
    } else {
      L.wq = fill({c.q_dim(), c.dim}, -a, a);
      L.wk = fill({c.kv_dim(), c.dim}, -a, a);
      L.wv = fill({c.kv_dim(), c.dim}, -a, a);
    }
    L.wo = fill({c.dim, c.attn_out_dim()}, -a, a);
    if (c.qk_norm()) {
      L.q_norm = fill({c.head_dim}, 0.8f, 1.2f);
      L.k_norm = fill({c.head_dim}, 0.8f, 1.2f);
    }
    L.ffn_norm = fill({c.dim}, 0.8f, 1.2f);
    if (c.sparse_layer(l)) {
      // A wide router range keeps the top-k choice away from ties.
      L.router = fill({c.moe.n_experts, c.dim}, -4 * a, 4 * a);
      if (c.moe.correction_bias) L.router_bias = fill({c.moe.n_experts}, -0.2f, 0.2f);
      const float b = 1.0f / std::sqrt(float(c.moe.expert_dim));
      for (int64_t e = 0; e < c.moe.n_experts; ++e) {
        L.experts.push_back({fill({c.moe.expert_dim, c.dim}, -a, a),
                             fill({c.moe.expert_dim, c.dim}, -a, a),
                             fill({c.dim, c.moe.expert_dim}, -b, b)});
      }
    }
    if (const int64_t F = c.dense_mlp_dim(l); F > 0) {  // the dense MLP or the shared experts
      L.w_gate = fill({F, c.dim}, -a, a);
      L.w_up = fill({F, c.dim}, -a, a);
      L.w_down = fill({c.dim, F}, -a, a);
    }
    w.layers.push_back(std::move(L));
  }
  w.final_norm = fill({c.dim}, 0.8f, 1.2f);
  if (!c.tie_embeddings) w.lm_head = fill({c.vocab_size, c.dim}, -0.5f, 0.5f);
  w.validate("random test model");
  return w;
}

// Independent reference: a plain, token-at-a-time, double-precision decoder with an optional
// LoRA adapter merged into copies of the weights (W' = W + s·B·A). Returns logits per token.
class ReferenceModel {
 public:
  ReferenceModel(const engine::ModelWeights& w, const engine::LoraWeights* adapter) : c_(w.config) {
    auto merged = [&](const Tensor& W, int64_t layer, engine::LoraTarget t) {
      std::vector<double> out(W.span().begin(), W.span().end());
      if (adapter) {
        const engine::LoraPair& p =
            adapter->modules[size_t(engine::lora_target_per_layer(t) ? layer : 0)][size_t(t)];
        if (!p.empty()) {
          const int64_t r = adapter->rank, n = W.dim(0), k = W.dim(1);
          const double s = adapter->scale();
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < k; ++j) {
              double acc = 0;
              for (int64_t q = 0; q < r; ++q) acc += double(p.B.data()[i * r + q]) * p.A.data()[q * k + j];
              out[size_t(i * k + j)] += s * acc;
            }
        }
      }
      return out;
    };
    auto vec = [](const Tensor& t) { return std::vector<double>(t.span().begin(), t.span().end()); };
    // Expert e's W + s·B_e·A_e when the adapter adapts the routed experts of this layer.
    auto merged_expert = [&](const Tensor& W, int64_t layer, engine::LoraTarget t, size_t e) {
      std::vector<double> out(W.span().begin(), W.span().end());
      if (!adapter || !adapter->has_experts()) return out;
      const engine::ExpertLoraPair& p =
          adapter->experts[size_t(layer)][size_t(engine::expert_proj(t))];
      if (p.empty()) return out;
      const int64_t r = adapter->rank, n = W.dim(0), k = W.dim(1);
      const float* A = p.A.data() + int64_t(e) * r * k;
      const float* B = p.B.data() + int64_t(e) * n * r;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j) {
          double acc = 0;
          for (int64_t q = 0; q < r; ++q) acc += double(B[i * r + q]) * A[q * k + j];
          out[size_t(i * k + j)] += adapter->scale() * acc;
        }
      return out;
    };
    emb_ = vec(w.tok_emb);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      const auto& L = w.layers[size_t(l)];
      Layer R;
      R.attn_norm = vec(L.attn_norm);
      R.ffn_norm = vec(L.ffn_norm);
      if (c_.mla_attention()) {
        if (!L.wq.empty()) R.wq = merged(L.wq, l, engine::LoraTarget::q);
        if (!L.wq_a.empty()) {
          R.wq_a = merged(L.wq_a, l, engine::LoraTarget::q_a);
          R.q_a_norm = vec(L.q_a_norm);
          R.wq_b = merged(L.wq_b, l, engine::LoraTarget::q_b);
        }
        R.wkv_a = merged(L.wkv_a, l, engine::LoraTarget::kv_a);
        R.kv_a_norm = vec(L.kv_a_norm);
        R.wkv_b = merged(L.wkv_b, l, engine::LoraTarget::kv_b);
      } else {
        R.wq = merged(L.wq, l, engine::LoraTarget::q);
        R.wk = merged(L.wk, l, engine::LoraTarget::k);
        R.wv = merged(L.wv, l, engine::LoraTarget::v);
      }
      R.wo = merged(L.wo, l, engine::LoraTarget::o);
      if (!L.w_gate.empty()) {  // the dense MLP, or a sparse layer's shared experts
        R.wg = merged(L.w_gate, l, engine::LoraTarget::gate);
        R.wu = merged(L.w_up, l, engine::LoraTarget::up);
        R.wd = merged(L.w_down, l, engine::LoraTarget::down);
      }
      if (!L.experts.empty()) {
        R.router = vec(L.router);
        R.router_bias = vec(L.router_bias);
        for (size_t e = 0; e < L.experts.size(); ++e) {
          const auto& X = L.experts[e];
          R.experts.push_back({merged_expert(X.w_gate, l, engine::LoraTarget::gate, e),
                               merged_expert(X.w_up, l, engine::LoraTarget::up, e),
                               merged_expert(X.w_down, l, engine::LoraTarget::down, e)});
        }
      }
      if (!L.q_norm.empty()) {
        R.q_norm = vec(L.q_norm);
        R.k_norm = vec(L.k_norm);
      }
      layers_.push_back(std::move(R));
      k_cache_.emplace_back();
      v_cache_.emplace_back();
    }
    final_norm_ = vec(w.final_norm);
    head_ = merged(w.unembedding(), 0, engine::LoraTarget::lm_head);
  }

  // Feeds one token at the next position; returns logits [vocab].
  std::vector<double> step(int32_t token) {
    const int64_t D = c_.dim, hd = c_.head_dim, pos = pos_++;
    std::vector<double> x(emb_.begin() + token * D, emb_.begin() + (token + 1) * D);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      Layer& L = layers_[size_t(l)];
      auto xn = rms(x, L.attn_norm);
      if (c_.mla_attention()) {
        auto o = matvec(L.wo, mla_attention(l, xn, pos), D);
        for (int64_t i = 0; i < D; ++i) x[size_t(i)] += o[size_t(i)];
        mlp(L, x);
        continue;
      }
      auto q = matvec(L.wq, xn, c_.q_dim()), k = matvec(L.wk, xn, c_.kv_dim()),
           v = matvec(L.wv, xn, c_.kv_dim());
      for (int64_t h = 0; h < c_.n_heads; ++h) head_op(q, h, L.q_norm, pos);
      for (int64_t h = 0; h < c_.n_kv_heads; ++h) head_op(k, h, L.k_norm, pos);
      k_cache_[size_t(l)].push_back(k);
      v_cache_[size_t(l)].push_back(v);
      std::vector<double> att(size_t(c_.q_dim()), 0.0);
      const int64_t group = c_.n_heads / c_.n_kv_heads;
      for (int64_t h = 0; h < c_.n_heads; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> sc;
        for (auto& kk : k_cache_[size_t(l)]) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[size_t(h * hd + i)] * kk[size_t(kvh * hd + i)];
          sc.push_back(d / std::sqrt(double(hd)));
        }
        double m = *std::max_element(sc.begin(), sc.end()), z = 0;
        for (double& s : sc) z += (s = std::exp(s - m));
        for (size_t j = 0; j < sc.size(); ++j)
          for (int64_t i = 0; i < hd; ++i)
            att[size_t(h * hd + i)] += sc[j] / z * v_cache_[size_t(l)][j][size_t(kvh * hd + i)];
      }
      auto o = matvec(L.wo, att, D);
      for (int64_t i = 0; i < D; ++i) x[size_t(i)] += o[size_t(i)];
      mlp(L, x);
    }
    return matvec(head_, rms(x, final_norm_), c_.vocab_size);
  }

 private:
  struct Expert {
    std::vector<double> wg, wu, wd;
  };
  struct Layer {
    std::vector<double> attn_norm, ffn_norm, wq, wk, wv, wo, wg, wu, wd, q_norm, k_norm, router,
        router_bias, wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wkv_b;
    std::vector<Expert> experts;
  };
  // The layer's MLP: a dense SwiGLU, or routed experts (+ shared experts), added into x.
  void mlp(Layer& L, std::vector<double>& x) const {
    const int64_t D = c_.dim;
    auto xn2 = rms(x, L.ffn_norm);
    auto swiglu_mlp = [&](const std::vector<double>& wg, const std::vector<double>& wu,
                          const std::vector<double>& wd, int64_t hidden) {
      auto g = matvec(wg, xn2, hidden), u = matvec(wu, xn2, hidden);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      return matvec(wd, g, D);
    };
    if (!L.wg.empty()) {
      const int64_t F = int64_t(L.wg.size()) / D;
      auto dn = swiglu_mlp(L.wg, L.wu, L.wd, F);
      for (int64_t i = 0; i < D; ++i) x[size_t(i)] += dn[size_t(i)];
    }
    if (L.experts.empty()) return;
    const int64_t E = c_.moe.n_experts, K = c_.moe.top_k;
    std::vector<double> p = matvec(L.router, xn2, E), choice;
    std::vector<int64_t> idx(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) idx[size_t(e)] = e;
    if (c_.moe.scoring == engine::RouterScoring::softmax) {
      // HF Qwen3MoeSparseMoeBlock, one token: softmax router, top-k, optional
      // renormalisation, Σ weight·expert(x).
      const double mx = *std::max_element(p.begin(), p.end());
      double z = 0;
      for (double& v : p) z += (v = std::exp(v - mx));
      for (double& v : p) v /= z;
      choice = p;
    } else {
      // HF DeepseekV3TopkRouter: sigmoid scores; the choice adds e_score_correction_bias;
      // groups score the sum of their top 2; experts outside the topk_group best groups are
      // masked to 0; top-k of the choice; the weights are the plain scores.
      for (double& v : p) v = 1.0 / (1.0 + std::exp(-v));
      choice = p;
      for (int64_t e = 0; e < E; ++e) {
        if (!L.router_bias.empty()) choice[size_t(e)] += L.router_bias[size_t(e)];
      }
      const int64_t G = c_.moe.n_group, per = E / G;
      std::vector<double> gs(static_cast<size_t>(G));
      for (int64_t g = 0; g < G; ++g) {
        std::vector<double> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(v.begin(), v.end(), std::greater<>());
        gs[size_t(g)] = v[0] + v[1];
      }
      std::vector<int64_t> gi(static_cast<size_t>(G));
      for (int64_t g = 0; g < G; ++g) gi[size_t(g)] = g;
      std::stable_sort(gi.begin(), gi.end(),
                       [&](int64_t a2, int64_t b2) { return gs[size_t(a2)] > gs[size_t(b2)]; });
      std::vector<bool> keep(size_t(G), false);
      for (int64_t g = 0; g < c_.moe.topk_group; ++g) keep[size_t(gi[size_t(g)])] = true;
      for (int64_t e = 0; e < E; ++e) {
        if (!keep[size_t(e / per)]) choice[size_t(e)] = 0.0;
      }
    }
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a2, int64_t b2) {
      return choice[size_t(a2)] > choice[size_t(b2)];
    });
    double sel = 0;
    for (int64_t k = 0; k < K; ++k) sel += p[size_t(idx[size_t(k)])];
    if (c_.moe.scoring == engine::RouterScoring::sigmoid) sel += 1e-20;
    for (int64_t k = 0; k < K; ++k) {
      const auto& ex = L.experts[size_t(idx[size_t(k)])];
      const double wgt = p[size_t(idx[size_t(k)])] / (c_.moe.norm_topk ? sel : 1.0) *
                         double(c_.moe.routed_scaling);
      auto dn = swiglu_mlp(ex.wg, ex.wu, ex.wd, c_.moe.expert_dim);
      for (int64_t i = 0; i < D; ++i) x[size_t(i)] += wgt * dn[size_t(i)];
    }
  }

  // YaRN (transformers' _compute_yarn_parameters) over `dim` rope dims: the inverse
  // frequencies and the attention factor that multiplies cos and sin.
  std::pair<std::vector<double>, double> rope_freqs(int64_t dim) const {
    std::vector<double> inv(size_t(dim / 2));
    for (int64_t i = 0; i < dim / 2; ++i) {
      inv[size_t(i)] = 1.0 / std::pow(double(c_.rope_theta), double(2 * i) / double(dim));
    }
    if (!c_.rope_scaling || c_.rope_scaling->type != engine::RopeScalingType::yarn)
      return {inv, 1.0};
    const auto& y = *c_.rope_scaling;
    const double factor = y.factor, base = c_.rope_theta, orig = double(y.original_max_position);
    auto get_mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    double attention = y.attention_factor ? *y.attention_factor
                       : (y.mscale > 0 && y.mscale_all_dim > 0)
                           ? get_mscale(factor, y.mscale) / get_mscale(factor, y.mscale_all_dim)
                           : get_mscale(factor, 1.0);
    auto corr = [&](double rot) {
      return double(dim) * std::log(orig / (rot * 2 * 3.14159265358979323846)) /
             (2 * std::log(base));
    };
    double low = corr(y.beta_fast), high = corr(y.beta_slow);
    if (y.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      const double extra = 1.0 - ramp;  // inv_freq_extrapolation_factor
      inv[size_t(i)] = inv[size_t(i)] / factor * (1 - extra) + inv[size_t(i)] * extra;
    }
    return {inv, attention};
  }

  // HF DeepseekV3Attention, one token, uncompressed: q through its latent, the KV latent
  // expanded by kv_b_proj for every cached token, RoPE (apply_rotary_pos_emb_interleave:
  // de-interleave, then rotate-half) on the rope parts, softmax scale 1/√qk_head_dim times
  // mscale(factor, mscale_all_dim)². Returns the attention output [H·v_head_dim].
  std::vector<double> mla_attention(int64_t l, const std::vector<double>& xn, int64_t pos) {
    Layer& L = layers_[size_t(l)];
    const engine::MlaConfig& m = c_.mla;
    const int64_t H = c_.n_heads, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim,
                  dv = m.v_head_dim, R = m.kv_lora_rank, qk = dn + dr;
    std::vector<double> q;
    if (m.q_lora_rank > 0) {
      q = matvec(L.wq_b, rms(matvec(L.wq_a, xn, m.q_lora_rank), L.q_a_norm), H * qk);
    } else {
      q = matvec(L.wq, xn, H * qk);
    }
    auto kv = matvec(L.wkv_a, xn, R + dr);
    std::vector<double> ckv(kv.begin(), kv.begin() + R), k_pe(kv.begin() + R, kv.end());
    ckv = rms(ckv, L.kv_a_norm);
    const auto [inv, att_factor] = rope_freqs(dr);
    auto rotate = [&, &inv = inv, att_factor = att_factor](double* v) {
      std::vector<double> u(static_cast<size_t>(dr));
      for (int64_t i = 0; i < dr; ++i) {
        u[size_t(i)] =
            c_.mla.rope_interleave ? (i < dr / 2 ? v[2 * i] : v[2 * (i - dr / 2) + 1]) : v[i];
      }
      for (int64_t i = 0; i < dr / 2; ++i) {
        const double a = double(pos) * inv[size_t(i)];
        const double c = std::cos(a) * att_factor, s = std::sin(a) * att_factor;
        const double x0 = u[size_t(i)], x1 = u[size_t(i + dr / 2)];
        v[i] = x0 * c - x1 * s;
        v[i + dr / 2] = x0 * s + x1 * c;
      }
    };
    for (int64_t h = 0; h < H; ++h) rotate(q.data() + h * qk + dn);
    rotate(k_pe.data());
    k_cache_[size_t(l)].push_back(ckv);
    v_cache_[size_t(l)].push_back(k_pe);  // the rope key, shared by every head
    double scale = 1.0 / std::sqrt(double(qk));
    if (c_.rope_scaling && c_.rope_scaling->type == engine::RopeScalingType::yarn &&
        c_.rope_scaling->mscale_all_dim > 0) {
      const double f = c_.rope_scaling->factor,
                   mm = 0.1 * c_.rope_scaling->mscale_all_dim * std::log(f) + 1.0;
      if (f > 1) scale *= mm * mm;
    }
    const size_t n = k_cache_[size_t(l)].size();
    std::vector<std::vector<double>> kvs(n);
    for (size_t j = 0; j < n; ++j) kvs[j] = matvec(L.wkv_b, k_cache_[size_t(l)][j], H * (dn + dv));
    std::vector<double> out(size_t(H * dv), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> sc(n);
      for (size_t j = 0; j < n; ++j) {
        double d = 0;
        for (int64_t i = 0; i < dn; ++i)
          d += q[size_t(h * qk + i)] * kvs[j][size_t(h * (dn + dv) + i)];
        for (int64_t i = 0; i < dr; ++i)
          d += q[size_t(h * qk + dn + i)] * v_cache_[size_t(l)][j][size_t(i)];
        sc[j] = d * scale;
      }
      double mx = *std::max_element(sc.begin(), sc.end()), z = 0;
      for (double& v : sc) z += (v = std::exp(v - mx));
      for (size_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < dv; ++i) {
          out[size_t(h * dv + i)] += sc[j] / z * kvs[j][size_t(h * (dn + dv) + dn + i)];
        }
      }
    }
    return out;
  }

  std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + c_.rms_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
    return y;
  }
  static std::vector<double> matvec(const std::vector<double>& W, const std::vector<double>& x,
                                    int64_t n) {
    std::vector<double> y(size_t(n), 0.0);
    const size_t k = x.size();
    for (int64_t i = 0; i < n; ++i)
      for (size_t j = 0; j < k; ++j) y[size_t(i)] += W[size_t(i) * k + j] * x[j];
    return y;
  }
  // Optional per-head RMSNorm (Qwen3), then HF rotate-half RoPE.
  void head_op(std::vector<double>& v, int64_t h, const std::vector<double>& norm, int64_t pos) {
    const int64_t hd = c_.head_dim;
    std::vector<double> seg(v.begin() + h * hd, v.begin() + (h + 1) * hd);
    if (!norm.empty()) seg = rms(seg, norm);
    const auto [inv, att_factor] = rope_freqs(hd);  // theta^(-2i/hd), YaRN-scaled if configured
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double a = double(pos) * inv[size_t(i)], c = std::cos(a) * att_factor,
                   s = std::sin(a) * att_factor;
      const double x0 = seg[size_t(i)], x1 = seg[size_t(i + hd / 2)];
      seg[size_t(i)] = x0 * c - x1 * s;
      seg[size_t(i + hd / 2)] = x0 * s + x1 * c;
    }
    std::copy(seg.begin(), seg.end(), v.begin() + h * hd);
  }

  engine::ModelConfig c_;
  std::vector<double> emb_, final_norm_, head_;
  std::vector<Layer> layers_;
  std::vector<std::vector<std::vector<double>>> k_cache_, v_cache_;
  int64_t pos_ = 0;
};

}  // namespace spindle::testing
