#include "spindle/engine/model.h"

#include "cpu_ops.h"
#include "model_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "spindle/core/error.h"
#include "spindle/engine/decoder_graph.h"
#include "spindle/engine/forward_checks.h"
#include "spindle/kernels/matmul.h"

namespace spindle::engine {
namespace {

using internal::chunk_segments;
using internal::ensure;

// transformers' _compute_yarn_parameters (find_correction_range, linear_ramp_factor): each
// frequency blends interpolation (f / factor) and extrapolation (f) by a ramp over the dims
// whose wavelength lies between beta_fast and beta_slow rotations of the original context.
void apply_yarn(const ModelConfig& c, const RopeScaling& s, std::vector<float>& inv) {
  const double dim = double(c.rope_dim()), base = c.rope_theta;
  const double orig = double(s.original_max_position);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;
    const double f = inv[i];
    inv[i] = float(f / s.factor * (1.0 - extrapolation) + f * extrapolation);
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t rd = c.rope_dim();
  std::vector<float> inv(size_t(rd / 2));
  for (int64_t i = 0; i < rd / 2; ++i) {
    inv[size_t(i)] = 1.0f / std::pow(c.rope_theta, float(2 * i) / float(rd));
  }
  if (c.rope_scaling && c.rope_scaling->type == RopeScalingType::yarn) {
    apply_yarn(c, *c.rope_scaling, inv);
  } else if (c.rope_scaling) {
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

float rope_attention_factor(const ModelConfig& c) {
  if (!c.rope_scaling || c.rope_scaling->type != RopeScalingType::yarn) return 1.0f;
  const RopeScaling& s = *c.rope_scaling;
  if (s.attention_factor) return *s.attention_factor;
  if (s.mscale > 0 && s.mscale_all_dim > 0) {
    return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  }
  return yarn_mscale(s.factor);
}

float attention_softmax_scale(const ModelConfig& c) {
  if (!c.mla_attention()) {
    // YaRN's factor f on the rotated q and k multiplies every score by f²: taken here, so the
    // rope needs no extra pass.
    const float f = rope_attention_factor(c);
    return f * f / std::sqrt(float(c.head_dim));
  }
  float scale = 1.0f / std::sqrt(float(c.mla.qk_head_dim()));
  if (c.rope_scaling && c.rope_scaling->type == RopeScalingType::yarn &&
      c.rope_scaling->mscale_all_dim > 0) {
    const float m = yarn_mscale(c.rope_scaling->factor, c.rope_scaling->mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

Model::Model(const ModelWeights& weights) : weights_(weights), inv_freq_(rope_inv_freq(weights.config)) {}

void Model::validate(std::span<const BatchSequence> batch, const KvCache& cache,
                     const LoraSlotPool* lora) const {
  validate_forward_batch(config(), batch, cache, lora);
}

void Model::forward(std::span<const BatchSequence> batch, KvCache& cache, const LoraSlotPool* lora,
                    ForwardState& st, const ForwardOptions& options) const {
  validate(batch, cache, lora);

  // Lay out rows sequence by sequence; reserve cache slots (cannot fail after validate).
  st.T = 0;
  for (const auto& b : batch) st.T += int64_t(b.tokens.size());
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

  st.tokens.clear();
  for (const auto& b : batch) st.tokens.insert(st.tokens.end(), b.tokens.begin(), b.tokens.end());
  st.all_tokens = options.logits != LogitsFor::last_token;

  internal::CpuOps ops(*this, &cache, lora, st);
  DecoderGraph<internal::CpuOps>(ops).forward(options.keep_activations,
                                              options.logits == LogitsFor::last_token,
                                              options.logits == LogitsFor::hidden_only);
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
  internal::CpuOps(*this, nullptr, lora, st)
      .lora_add(0, LoraTarget::lm_head, st.x_final.row(r0), c.dim, segs, logits.data(),
                c.vocab_size);
}

}  // namespace spindle::engine
