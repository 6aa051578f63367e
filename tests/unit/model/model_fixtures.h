#pragma once
// Small random models and an independent reference forward for engine tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
  c.rms_eps = 1e-6f;
  c.tie_embeddings = arch == engine::Arch::llama;
  c.bos_id = 1;
  c.eos_id = 2;
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
    L.wq = fill({c.q_dim(), c.dim}, -a, a);
    L.wk = fill({c.kv_dim(), c.dim}, -a, a);
    L.wv = fill({c.kv_dim(), c.dim}, -a, a);
    L.wo = fill({c.dim, c.q_dim()}, -a, a);
    if (c.qk_norm()) {
      L.q_norm = fill({c.head_dim}, 0.8f, 1.2f);
      L.k_norm = fill({c.head_dim}, 0.8f, 1.2f);
    }
    L.ffn_norm = fill({c.dim}, 0.8f, 1.2f);
    if (c.sparse_layer(l)) {
      // A wide router range keeps the top-k choice away from ties.
      L.router = fill({c.moe.n_experts, c.dim}, -4 * a, 4 * a);
      const float b = 1.0f / std::sqrt(float(c.moe.expert_dim));
      for (int64_t e = 0; e < c.moe.n_experts; ++e) {
        L.experts.push_back({fill({c.moe.expert_dim, c.dim}, -a, a),
                             fill({c.moe.expert_dim, c.dim}, -a, a),
                             fill({c.dim, c.moe.expert_dim}, -b, b)});
      }
    } else {
      L.w_gate = fill({c.hidden_dim, c.dim}, -a, a);
      L.w_up = fill({c.hidden_dim, c.dim}, -a, a);
      L.w_down = fill({c.dim, c.hidden_dim}, -a, a);
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
      R.wq = merged(L.wq, l, engine::LoraTarget::q);
      R.wk = merged(L.wk, l, engine::LoraTarget::k);
      R.wv = merged(L.wv, l, engine::LoraTarget::v);
      R.wo = merged(L.wo, l, engine::LoraTarget::o);
      if (L.experts.empty()) {
        R.wg = merged(L.w_gate, l, engine::LoraTarget::gate);
        R.wu = merged(L.w_up, l, engine::LoraTarget::up);
        R.wd = merged(L.w_down, l, engine::LoraTarget::down);
      } else {
        R.router = vec(L.router);
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
      auto xn2 = rms(x, L.ffn_norm);
      auto swiglu_mlp = [&](const std::vector<double>& wg, const std::vector<double>& wu,
                            const std::vector<double>& wd, int64_t hidden) {
        auto g = matvec(wg, xn2, hidden), u = matvec(wu, xn2, hidden);
        for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
        return matvec(wd, g, D);
      };
      if (L.experts.empty()) {
        auto dn = swiglu_mlp(L.wg, L.wu, L.wd, c_.hidden_dim);
        for (int64_t i = 0; i < D; ++i) x[size_t(i)] += dn[size_t(i)];
      } else {
        // HF Qwen3MoeSparseMoeBlock, one token: softmax router, top-k, optional
        // renormalisation, Σ weight·expert(x).
        const int64_t E = c_.moe.n_experts, K = c_.moe.top_k;
        auto p = matvec(L.router, xn2, E);
        const double mx = *std::max_element(p.begin(), p.end());
        double z = 0;
        for (double& v : p) z += (v = std::exp(v - mx));
        for (double& v : p) v /= z;
        std::vector<int64_t> idx(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) idx[size_t(e)] = e;
        std::stable_sort(idx.begin(), idx.end(),
                         [&](int64_t a2, int64_t b2) { return p[size_t(a2)] > p[size_t(b2)]; });
        double sel = 0;
        for (int64_t k = 0; k < K; ++k) sel += p[size_t(idx[size_t(k)])];
        for (int64_t k = 0; k < K; ++k) {
          const auto& ex = L.experts[size_t(idx[size_t(k)])];
          const double wgt = p[size_t(idx[size_t(k)])] / (c_.moe.norm_topk ? sel : 1.0);
          auto dn = swiglu_mlp(ex.wg, ex.wu, ex.wd, c_.moe.expert_dim);
          for (int64_t i = 0; i < D; ++i) x[size_t(i)] += wgt * dn[size_t(i)];
        }
      }
    }
    return matvec(head_, rms(x, final_norm_), c_.vocab_size);
  }

 private:
  struct Expert {
    std::vector<double> wg, wu, wd;
  };
  struct Layer {
    std::vector<double> attn_norm, ffn_norm, wq, wk, wv, wo, wg, wu, wd, q_norm, k_norm, router;
    std::vector<Expert> experts;
  };
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
  // Optional per-head RMSNorm (Qwen3), then HF rotate-half RoPE with theta^(-2i/hd).
  void head_op(std::vector<double>& v, int64_t h, const std::vector<double>& norm, int64_t pos) {
    const int64_t hd = c_.head_dim;
    std::vector<double> seg(v.begin() + h * hd, v.begin() + (h + 1) * hd);
    if (!norm.empty()) seg = rms(seg, norm);
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double f = 1.0 / std::pow(double(c_.rope_theta), double(2 * i) / double(hd));
      const double a = double(pos) * f, c = std::cos(a), s = std::sin(a);
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
