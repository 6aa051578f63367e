#include "spindle/engine/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace spindle::engine {

namespace {

std::vector<int32_t> row_slots(std::span<const kernels::LoraSegment> segments, int64_t T) {
  std::vector<int32_t> token_slot(size_t(T), -1);
  for (const auto& g : segments) {
    for (int64_t r = g.row_begin; r < g.row_end && r < T; ++r) token_slot[size_t(r)] = g.slot;
  }
  return token_slot;
}

}  // namespace

void route_experts(const ModelConfig& c, const float* logits, const float* router_bias, int64_t T,
                   std::span<const kernels::LoraSegment> segments, float* probs, float* weight,
                   MoeRouting& m) {
  const MoeConfig& mc = c.moe;
  const int64_t E = mc.n_experts, K = mc.top_k;
  m.expert.resize(size_t(T * K));
  const bool sigmoid = mc.scoring == RouterScoring::sigmoid;
  const bool bias = mc.correction_bias && router_bias != nullptr;
  const int64_t G = mc.n_group, per_group = E / G;
  std::vector<int32_t> idx(static_cast<size_t>(E)), gidx(static_cast<size_t>(G));
  std::vector<float> choice(static_cast<size_t>(E)), gscore(static_cast<size_t>(G));
  std::vector<char> keep(static_cast<size_t>(G));
  for (int64_t t = 0; t < T; ++t) {
    const float* z = logits + t * E;
    float* p = probs + t * E;
    if (sigmoid) {
      for (int64_t e = 0; e < E; ++e) p[e] = 1.0f / (1.0f + std::exp(-z[e]));
    } else {
      const float mx = *std::max_element(z, z + E);
      float sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(z[e] - mx);
      for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    }
    // The choice scores: the probabilities (+ the correction bias, which only steers the
    // choice); with groups, a group scores the sum of its two best, the topk_group best groups
    // stay and the others' experts score 0 (HF's masked_fill).
    for (int64_t e = 0; e < E; ++e) choice[size_t(e)] = p[e] + (bias ? router_bias[e] : 0.0f);
    if (G > 1) {
      for (int64_t g = 0; g < G; ++g) {
        const float* ch = choice.data() + g * per_group;
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t i = 0; i < per_group; ++i) {
          if (ch[i] > b1)
            b2 = b1, b1 = ch[i];
          else if (ch[i] > b2)
            b2 = ch[i];
        }
        gscore[size_t(g)] = per_group > 1 ? b1 + b2 : b1;
      }
      std::iota(gidx.begin(), gidx.end(), 0);
      std::partial_sort(gidx.begin(), gidx.begin() + mc.topk_group, gidx.end(),
                        [&](int32_t a, int32_t b) {
                          return gscore[size_t(a)] > gscore[size_t(b)] ||
                                 (gscore[size_t(a)] == gscore[size_t(b)] && a < b);
                        });
      std::fill(keep.begin(), keep.end(), char(0));
      for (int64_t g = 0; g < mc.topk_group; ++g) keep[size_t(gidx[size_t(g)])] = 1;
      for (int64_t e = 0; e < E; ++e) {
        if (!keep[size_t(e / per_group)]) choice[size_t(e)] = 0.0f;
      }
    }
    // Top-k by choice score; ties go to the lower expert index.
    const float* ch = choice.data();
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int32_t a, int32_t b) {
      return ch[a] > ch[b] || (ch[a] == ch[b] && a < b);
    });
    // The combine weights: the selected probabilities, renormalised (HF adds 1e-20 to the
    // sigmoid's sum), times routed_scaling_factor.
    double sel = 0;
    for (int64_t k = 0; k < K; ++k) sel += p[idx[size_t(k)]];
    if (sigmoid) sel += 1e-20;
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = idx[size_t(k)];
      m.expert[size_t(t * K + k)] = e;
      const double w = mc.norm_topk ? p[e] / sel : p[e];
      weight[t * K + k] = float(w * mc.routed_scaling);
    }
  }
  // Group the assignments by expert (a counting sort, stable in j), then each expert's rows by
  // adapter slot, so that an expert's LoRA runs as SGMV segments (one per slot).
  m.offsets.assign(size_t(E + 1), 0);
  for (int32_t e : m.expert) ++m.offsets[size_t(e) + 1];
  for (int64_t e = 0; e < E; ++e) m.offsets[size_t(e + 1)] += m.offsets[size_t(e)];
  std::vector<int64_t> next(m.offsets.begin(), m.offsets.end() - 1);
  m.order.resize(size_t(T * K));
  for (int64_t j = 0; j < T * K; ++j)
    m.order[size_t(next[size_t(m.expert[size_t(j)])]++)] = int32_t(j);
  const std::vector<int32_t> token_slot = row_slots(segments, T);
  const auto slot_of = [&](int32_t j) { return token_slot[size_t(j / K)]; };
  m.lora_segs.clear();
  m.lora_seg_offsets.assign(1, 0);
  for (int64_t e = 0; e < E; ++e) {
    const auto b = m.order.begin() + m.offsets[size_t(e)],
               en = m.order.begin() + m.offsets[size_t(e + 1)];
    std::stable_sort(b, en, [&](int32_t x, int32_t y) { return slot_of(x) < slot_of(y); });
    for (auto it = b; it != en; ++it) {
      const int64_t row = it - b;
      const int32_t s = slot_of(*it);
      if (m.lora_segs.size() > size_t(m.lora_seg_offsets.back()) && m.lora_segs.back().slot == s) {
        m.lora_segs.back().row_end = row + 1;
      } else {
        m.lora_segs.push_back({row, row + 1, s});
      }
    }
    m.lora_seg_offsets.push_back(int64_t(m.lora_segs.size()));
  }
}

void route_experts_backward(const ModelConfig& c, const float* probs,
                            std::span<const int32_t> expert, const float* d_weight, int64_t T,
                            std::span<const kernels::LoraSegment> segments, const MoeAuxLoss* aux,
                            float* d_logits) {
  const int64_t E = c.moe.n_experts, K = c.moe.top_k;
  const std::vector<int32_t> token_slot = row_slots(segments, T);
  const bool sigmoid = c.moe.scoring == RouterScoring::sigmoid;
  std::vector<float> dp(static_cast<size_t>(K));
  for (int64_t t = 0; t < T; ++t) {
    const float* p = probs + t * E;
    const float* dw = d_weight + t * K;
    const int32_t* ex = expert.data() + t * K;
    // w_k = rsf·p_k / S, S = Σ_sel p (norm_topk), else rsf·p_k:
    // dp_k = rsf·(dw_k − Σ_j dw_j·p_j/S) / S, else rsf·dw_k.
    const double rsf = c.moe.routed_scaling;
    if (c.moe.norm_topk) {
      double S = sigmoid ? 1e-20 : 0.0, dot = 0;
      for (int64_t k = 0; k < K; ++k) S += p[ex[k]];
      for (int64_t k = 0; k < K; ++k) dot += double(dw[k]) * p[ex[k]] / S;
      for (int64_t k = 0; k < K; ++k) dp[size_t(k)] = float(rsf * (dw[k] - dot) / S);
    } else {
      for (int64_t k = 0; k < K; ++k) dp[size_t(k)] = float(rsf * dw[k]);
    }
    float* dz = d_logits + t * E;
    if (sigmoid) {
      // Sigmoid: dz_e = dp_e·p_e·(1 − p_e) on the selection, 0 elsewhere.
      std::fill(dz, dz + E, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const float pe = p[ex[k]];
        dz[ex[k]] += dp[size_t(k)] * pe * (1.0f - pe);
      }
      continue;
    }
    // Softmax: dz_e = p_e·(dp_e − Σ_sel dp·p), dp_e = 0 off the selection.
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += double(dp[size_t(k)]) * p[ex[k]];
    for (int64_t e = 0; e < E; ++e) dz[e] = float(-p[e] * s);
    for (int64_t k = 0; k < K; ++k) dz[ex[k]] += p[ex[k]] * dp[size_t(k)];
    // The aux loss's own gradient g = ∂aux/∂p (every expert), through the softmax.
    if (aux != nullptr) {
      const auto it = aux->grad.find(token_slot[size_t(t)]);
      if (it != aux->grad.end()) {
        const float* g = it->second.data();
        double gp = 0;
        for (int64_t e = 0; e < E; ++e) gp += double(g[e]) * p[e];
        for (int64_t e = 0; e < E; ++e) dz[e] += float(p[e] * (g[e] - gp));
      }
    }
  }
}

}  // namespace spindle::engine
