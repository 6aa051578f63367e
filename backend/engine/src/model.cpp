#include "spindle/engine/model.h"

#include "model_internal.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "spindle/core/error.h"
#include "spindle/engine/forward_checks.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/matmul.h"
#include "spindle/kernels/norm.h"
#include "spindle/kernels/rope.h"

namespace spindle::engine {
namespace {

using internal::chunk_segments;
using internal::ensure;

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  std::vector<float> inv(size_t(c.head_dim / 2));
  for (int64_t i = 0; i < c.head_dim / 2; ++i) {
    inv[size_t(i)] = 1.0f / std::pow(c.rope_theta, float(2 * i) / float(c.head_dim));
  }
  if (c.rope_scaling) {
    const RopeScaling& s = *c.rope_scaling;
    const float old_ctx = float(s.original_max_position);
    const float low_wavelen = old_ctx / s.low_freq_factor;
    const float high_wavelen = old_ctx / s.high_freq_factor;
    for (float& f : inv) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else {
        const float smooth =
            (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0f - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

Model::Model(const ModelWeights& weights) : weights_(weights), inv_freq_(rope_inv_freq(weights.config)) {}

void Model::validate(std::span<const BatchSequence> batch, const KvCache& cache,
                     const LoraSlotPool* lora) const {
  validate_forward_batch(config(), batch, cache, lora);
}

void Model::forward(std::span<const BatchSequence> batch, KvCache& cache, const LoraSlotPool* lora,
                    ForwardState& st, const ForwardOptions& options) const {
  validate(batch, cache, lora);
  const ModelConfig& c = config();

  // Lay out rows sequence by sequence; reserve cache slots (cannot fail after validate).
  st.T = 0;
  for (const auto& b : batch) st.T += int64_t(b.tokens.size());
  const int64_t T = st.T;
  st.positions.clear();
  st.cache_slots.clear();
  st.segments.clear();
  st.out_segments.clear();
  st.attn_seqs.clear();
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSequence& b = batch[i];
    const int64_t n = int64_t(b.tokens.size());
    const int64_t past = cache.length(b.seq);
    cache.append(b.seq, n, st.cache_slots);
    for (int64_t j = 0; j < n; ++j) st.positions.push_back(int32_t(past + j));
    append_segment(st.segments, row, row + n, b.slot);
    if (options.logits == LogitsFor::last_token) {
      append_segment(st.out_segments, int64_t(i), int64_t(i) + 1, b.slot);
    }
    st.attn_seqs.push_back({row, n, past, nullptr});
    row += n;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    st.attn_seqs[i].block_table = cache.block_table(batch[i].seq).data();
  }
  if (options.logits != LogitsFor::last_token) st.out_segments = st.segments;

  // Embedding gather.
  Tensor x({T, c.dim});
  row = 0;
  st.tokens.clear();
  for (const auto& b : batch) {
    st.tokens.insert(st.tokens.end(), b.tokens.begin(), b.tokens.end());
    for (int32_t t : b.tokens) {
      std::memcpy(x.row(row++), weights_.tok_emb.row(t), size_t(c.dim) * sizeof(float));
    }
  }

  st.keep_activations = options.keep_activations;
  st.all_tokens = options.logits != LogitsFor::last_token;
  st.layers.resize(options.keep_activations ? size_t(c.n_layers) : 1);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerActivations& a = st.layers[options.keep_activations ? size_t(l) : 0];
    if (options.keep_activations) a.x_in = x.clone();
    attention_block(l, cache, lora, st, a, x);
    if (options.keep_activations) a.x_mid = x.clone();
    mlp_forward(l, lora, st, a, x);
  }

  // Final norm on the rows that produce logits, then the unembedding (+ lm_head LoRA).
  const int64_t rows_out = options.logits == LogitsFor::last_token ? int64_t(batch.size()) : T;
  ensure(st.x_final, {rows_out, c.dim});
  ensure(st.inv_rms_final, {rows_out});
  if (options.logits == LogitsFor::last_token) {
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto& s = st.attn_seqs[i];
      kernels::rmsnorm(x.row(s.row_begin + s.n_new - 1), c.dim, weights_.final_norm.data(),
                       st.x_final.row(int64_t(i)), c.dim, 1, c.dim, c.rms_eps);
    }
  } else {
    kernels::rmsnorm(x.data(), c.dim, weights_.final_norm.data(), st.x_final.data(), c.dim, T,
                     c.dim, c.rms_eps, st.inv_rms_final.data());
  }
  if (options.logits != LogitsFor::hidden_only) {
    project(lora, 0, LoraTarget::lm_head, st.x_final, weights_.unembedding(), st.out_segments,
            st.logits, st);
  }
  if (st.keep_activations) st.x_last = std::move(x);
}

void Model::unembed(ForwardState& st, const LoraSlotPool* lora, int64_t r0, int64_t r1,
                    Tensor& logits) const {
  const ModelConfig& c = config();
  SPINDLE_CHECK(0 <= r0 && r0 < r1 && r1 <= st.x_final.dim(0), invalid_argument,
                "unembed: rows [{}, {}) outside [0, {})", r0, r1, st.x_final.dim(0));
  const int64_t n = r1 - r0;
  ensure(logits, {n, c.vocab_size});
  const auto segs = chunk_segments(st.out_segments, r0, r1);
  const Tensor& U = weights_.unembedding();
  kernels::linear(st.x_final.row(r0), c.dim, n, c.dim, U.data(), c.vocab_size, logits.data(),
                  c.vocab_size, /*beta=*/0.0f);
  lora_add(lora, 0, LoraTarget::lm_head, st.x_final.row(r0), c.dim, segs, logits.data(),
           c.vocab_size, st);
}

void Model::attention_block(int64_t l, KvCache& cache, const LoraSlotPool* lora, ForwardState& st,
                            LayerActivations& a, Tensor& x) const {
  const ModelConfig& c = config();
  const LayerWeights& w = weights_.layers[size_t(l)];
  const int64_t T = st.T;
  ensure(a.xn_attn, {T, c.dim});
  ensure(a.inv_rms_attn, {T});
  kernels::rmsnorm(x.data(), c.dim, w.attn_norm.data(), a.xn_attn.data(), c.dim, T, c.dim,
                   c.rms_eps, a.inv_rms_attn.data());
  project(lora, l, LoraTarget::q, a.xn_attn, w.wq, st.segments, a.q, st);
  project(lora, l, LoraTarget::k, a.xn_attn, w.wk, st.segments, a.k, st);
  project(lora, l, LoraTarget::v, a.xn_attn, w.wv, st.segments, a.v, st);
  if (c.arch == Arch::qwen3) {
    float* inv_q = nullptr;
    float* inv_k = nullptr;
    if (st.keep_activations) {
      a.q_pre = a.q.clone();
      a.k_pre = a.k.clone();
      ensure(a.inv_rms_q, {T * c.n_heads});
      ensure(a.inv_rms_k, {T * c.n_kv_heads});
      inv_q = a.inv_rms_q.data();
      inv_k = a.inv_rms_k.data();
    }
    kernels::rmsnorm(a.q.data(), c.head_dim, w.q_norm.data(), a.q.data(), c.head_dim,
                     T * c.n_heads, c.head_dim, c.rms_eps, inv_q);
    kernels::rmsnorm(a.k.data(), c.head_dim, w.k_norm.data(), a.k.data(), c.head_dim,
                     T * c.n_kv_heads, c.head_dim, c.rms_eps, inv_k);
  }
  kernels::rope(a.q.data(), c.q_dim(), T, c.n_heads, c.head_dim, st.positions.data(),
                inv_freq_.data(), kernels::RopeStyle::half);
  kernels::rope(a.k.data(), c.kv_dim(), T, c.n_kv_heads, c.head_dim, st.positions.data(),
                inv_freq_.data(), kernels::RopeStyle::half);
  const kernels::PagedKv kv = cache.layer(l);
  kernels::kv_cache_write(kv, a.k.data(), a.v.data(), c.kv_dim(), T, st.cache_slots.data());
  ensure(a.attn, {T, c.q_dim()});
  kernels::attention_paged(a.q.data(), c.q_dim(), a.attn.data(), c.q_dim(), c.n_heads, kv,
                           st.attn_seqs, 1.0f / std::sqrt(float(c.head_dim)));
  // x += attn·Woᵀ + LoRA_o(attn)
  kernels::linear(a.attn.data(), c.q_dim(), T, c.q_dim(), w.wo.data(), c.dim, x.data(), c.dim,
                  /*beta=*/1.0f);
  lora_add(lora, l, LoraTarget::o, a.attn.data(), c.q_dim(), st.segments, x.data(), c.dim, st);
}

void Model::mlp_forward(int64_t l, const LoraSlotPool* lora, ForwardState& st, LayerActivations& a,
                        Tensor& x) const {
  const ModelConfig& c = config();
  const LayerWeights& w = weights_.layers[size_t(l)];
  const int64_t T = st.T;
  ensure(a.xn_mlp, {T, c.dim});
  ensure(a.inv_rms_mlp, {T});
  kernels::rmsnorm(x.data(), c.dim, w.ffn_norm.data(), a.xn_mlp.data(), c.dim, T, c.dim, c.rms_eps,
                   a.inv_rms_mlp.data());
  project(lora, l, LoraTarget::gate, a.xn_mlp, w.w_gate, st.segments, a.gate, st);
  project(lora, l, LoraTarget::up, a.xn_mlp, w.w_up, st.segments, a.up, st);
  ensure(a.act, {T, c.hidden_dim});
  kernels::swiglu(a.gate.data(), a.up.data(), a.act.data(), T * c.hidden_dim);
  kernels::linear(a.act.data(), c.hidden_dim, T, c.hidden_dim, w.w_down.data(), c.dim, x.data(),
                  c.dim, /*beta=*/1.0f);
  lora_add(lora, l, LoraTarget::down, a.act.data(), c.hidden_dim, st.segments, x.data(), c.dim,
           st);
}

void Model::project(const LoraSlotPool* lora, int64_t layer, LoraTarget target, const Tensor& x,
                    const Tensor& W, std::span<const kernels::LoraSegment> segments, Tensor& y,
                    ForwardState& st) const {
  const int64_t rows = x.dim(0), k = x.dim(1), n = W.dim(0);
  ensure(y, {rows, n});
  kernels::linear(x.data(), k, rows, k, W.data(), n, y.data(), n, /*beta=*/0.0f);
  lora_add(lora, layer, target, x.data(), k, segments, y.data(), n, st);
}

void Model::lora_add(const LoraSlotPool* lora, int64_t layer, LoraTarget target, const float* x,
                     int64_t ld_x, std::span<const kernels::LoraSegment> segments, float* y,
                     int64_t ld_y, ForwardState& st) const {
  if (lora == nullptr) return;
  bool any = false;
  for (const auto& s : segments) any |= s.slot >= 0;
  if (!any) return;
  const auto view = lora->view(layer, target);
  if (!view) return;
  const int64_t rows = segments.back().row_end;
  if (st.lora_h.empty() || st.lora_h.dim(0) < rows || st.lora_h.dim(1) != view->max_rank) {
    st.lora_h = Tensor({std::max<int64_t>(rows, st.T), view->max_rank});
  }
  kernels::lora_shrink(x, ld_x, *view, segments, st.lora_h.data());
  kernels::lora_expand(st.lora_h.data(), *view, segments, y, ld_y, /*col_offset=*/0);
}

}  // namespace spindle::engine
