#include "device_forward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <span>

#include "spindle/kernels/cuda/activation.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/qk_rope.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::gpu::internal {
namespace {

namespace cuda = kernels::cuda;
using engine::LoraTarget;

template <class T>
class Forward {
 public:
  Forward(ForwardContext& ctx)
      : ctx_(ctx), st_(ctx.st), s_(ctx.stream), c_(ctx.weights.config()),
        P_(precision_of<T>()) {}

  void run(DeviceKvCache& cache, const DeviceForwardOptions& o) {
    const int64_t rows = st_.T;
    adapted_ = !st_.slots_used.empty() && ctx_.lora != nullptr;
    segs_ = {st_.d_segments.data(), int32_t(st_.segments.size()), rows};
    if (adapted_) {
      // One [rows, max_rank] h per target of a multi-target LoRA call (lora_add_multi).
      st_.lora_h.ensure(int64_t(cuda::kLoraMaxTargets) * rows, ctx_.lora->max_rank(),
                        Precision::fp32);
    }

    // The decode attention's partials, sized for this call's (or graph bucket's) context.
    const size_t attn_bytes = cuda::attention_scratch_bytes(
        int32_t(st_.attn_seqs.size()), c_.n_heads, c_.n_kv_heads, c_.head_dim, st_.attn_max_ctx);
    st_.attn_scratch.ensure(1, int64_t((attn_bytes + sizeof(float) - 1) / sizeof(float)),
                            Precision::fp32);

    DeviceTensor& x = st_.x_last;  // the residual stream
    x.ensure(rows, c_.dim, P_);
    cuda::embedding_gather(ctx_.weights.tok_emb().data<T>(), c_.dim, st_.d_tokens.data(), rows,
                           x.data<T>(), c_.dim, s_);
    st_.layers.resize(o.keep_activations ? size_t(c_.n_layers) : 1);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      DeviceLayerActivations& a = st_.layers[o.keep_activations ? size_t(l) : 0];
      if (o.keep_activations) a.x_in.copy_from(x, s_);
      attention_block(l, cache, a, x);
      if (o.keep_activations) a.x_mid.copy_from(x, s_);
      mlp_block(l, a, x);
    }

    // Final norm on the logits rows (each sequence's last row, or every row).
    const int64_t rows_out = st_.rows_out;
    const DeviceTensor* src = &x;
    if (o.logits == engine::LogitsFor::last_token) {
      st_.x_gather.ensure(rows_out, c_.dim, P_);
      cuda::embedding_gather(x.data<T>(), c_.dim, st_.d_last_rows.data(), rows_out,
                             st_.x_gather.data<T>(), c_.dim, s_);
      src = &st_.x_gather;
    }
    st_.x_final.ensure(rows_out, c_.dim, P_);
    st_.inv_rms_final.ensure(rows_out, 1, Precision::fp32);
    cuda::rmsnorm(src->data<T>(), c_.dim, ctx_.weights.final_norm().data<float>(),
                  st_.x_final.data<T>(), c_.dim, rows_out, c_.dim, c_.rms_eps,
                  st_.inv_rms_final.data<float>(), s_);
    if (o.logits != engine::LogitsFor::hidden_only) {
      run_unembed<T>(ctx_, 0, rows_out, st_.d_out_segments.data(),
                     int32_t(st_.out_segments.size()), adapted_, st_.logits);
    }
  }

 private:
  void attention_block(int64_t l, DeviceKvCache& cache, DeviceLayerActivations& a,
                       DeviceTensor& x) {
    const DeviceLayerWeights& w = ctx_.weights.layer(l);
    const int64_t rows = st_.T, hd = c_.head_dim;
    a.xn_attn.ensure(rows, c_.dim, P_);
    a.inv_rms_attn.ensure(rows, 1, Precision::fp32);
    cuda::rmsnorm(x.data<T>(), c_.dim, w.attn_norm.data<float>(), a.xn_attn.data<T>(), c_.dim, rows,
                  c_.dim, c_.rms_eps, a.inv_rms_attn.data<float>(), s_);
    project(
        l, a.xn_attn,
        {{LoraTarget::q, &w.wq, &a.q}, {LoraTarget::k, &w.wk, &a.k}, {LoraTarget::v, &w.wv, &a.v}});
    const bool qwen3 = c_.arch == engine::Arch::qwen3;
    const float* inv_freq = ctx_.weights.rope_inv_freq().data<float>();
    const cuda::DevicePagedKv<T> kv = cache.layer<T>(l);
    if (!st_.keep_activations) {
      // Inference: norms, RoPE and the cache write in one launch (bitwise the steps below).
      cuda::qk_norm_rope_kv_write(
          a.q.data<T>(), c_.q_dim(), c_.n_heads, a.k.data<T>(), a.v.data<T>(), c_.kv_dim(), rows,
          qwen3 ? w.q_norm.data<float>() : nullptr, qwen3 ? w.k_norm.data<float>() : nullptr,
          c_.rms_eps, st_.d_positions.data(), inv_freq, kernels::RopeStyle::half, kv,
          st_.d_cache_slots.data(), s_);
    } else {
      if (qwen3) {
        a.q_pre.copy_from(a.q, s_);
        a.k_pre.copy_from(a.k, s_);
        a.inv_rms_q.ensure(rows * c_.n_heads, 1, Precision::fp32);
        a.inv_rms_k.ensure(rows * c_.n_kv_heads, 1, Precision::fp32);
        cuda::rmsnorm(a.q.data<T>(), hd, w.q_norm.data<float>(), a.q.data<T>(), hd,
                      rows * c_.n_heads, hd, c_.rms_eps, a.inv_rms_q.data<float>(), s_);
        cuda::rmsnorm(a.k.data<T>(), hd, w.k_norm.data<float>(), a.k.data<T>(), hd,
                      rows * c_.n_kv_heads, hd, c_.rms_eps, a.inv_rms_k.data<float>(), s_);
      }
      cuda::rope(a.q.data<T>(), c_.q_dim(), rows, c_.n_heads, hd, st_.d_positions.data(), inv_freq,
                 kernels::RopeStyle::half, /*inverse=*/false, s_);
      cuda::rope(a.k.data<T>(), c_.kv_dim(), rows, c_.n_kv_heads, hd, st_.d_positions.data(),
                 inv_freq, kernels::RopeStyle::half, /*inverse=*/false, s_);
      cuda::kv_cache_write(kv, a.k.data<T>(), a.v.data<T>(), c_.kv_dim(), rows,
                           st_.d_cache_slots.data(), s_);
    }
    a.attn.ensure(rows, c_.q_dim(), P_);
    cuda::attention_paged(a.q.data<T>(), c_.q_dim(), a.attn.data<T>(), c_.q_dim(), c_.n_heads, kv,
                          st_.d_attn_seqs.data(), int32_t(st_.attn_seqs.size()),
                          st_.d_block_tables.data(), st_.attn_max_new, st_.attn_max_ctx,
                          1.0f / std::sqrt(float(hd)), st_.attn_scratch.data<float>(),
                          st_.attn_scratch.bytes(), s_);
    // x += attn·Woᵀ + LoRA_o(attn)
    cuda::linear(ctx_.blas, a.attn.data<T>(), c_.q_dim(), rows, c_.q_dim(), w.wo.data<T>(), c_.dim,
                 x.data<T>(), c_.dim, /*beta=*/1.0f, s_);
    lora_add(l, LoraTarget::o, a.attn.data<T>(), c_.q_dim(), x.data<T>(), c_.dim);
  }

  void mlp_block(int64_t l, DeviceLayerActivations& a, DeviceTensor& x) {
    const DeviceLayerWeights& w = ctx_.weights.layer(l);
    const int64_t rows = st_.T;
    a.xn_mlp.ensure(rows, c_.dim, P_);
    a.inv_rms_mlp.ensure(rows, 1, Precision::fp32);
    cuda::rmsnorm(x.data<T>(), c_.dim, w.ffn_norm.data<float>(), a.xn_mlp.data<T>(), c_.dim, rows,
                  c_.dim, c_.rms_eps, a.inv_rms_mlp.data<float>(), s_);
    project(l, a.xn_mlp,
            {{LoraTarget::gate, &w.w_gate, &a.gate}, {LoraTarget::up, &w.w_up, &a.up}});
    a.act.ensure(rows, c_.hidden_dim, P_);
    cuda::swiglu(a.gate.data<T>(), a.up.data<T>(), a.act.data<T>(), rows * c_.hidden_dim, s_);
    cuda::linear(ctx_.blas, a.act.data<T>(), c_.hidden_dim, rows, c_.hidden_dim, w.w_down.data<T>(),
                 c_.dim, x.data<T>(), c_.dim, /*beta=*/1.0f, s_);
    lora_add(l, LoraTarget::down, a.act.data<T>(), c_.hidden_dim, x.data<T>(), c_.dim);
  }

  // One projection of project(): y = x·Wᵀ + LoRA_target(x).
  struct Proj {
    LoraTarget target;
    const DeviceTensor* W;
    DeviceTensor* y;
  };

  // 1..3 projections of the same x over every row: one multi-output linear (a single launch for
  // bf16 decode batches), then the targets' LoRA adds (one shrink and one expand launch).
  void project(int64_t l, const DeviceTensor& x, std::initializer_list<Proj> projs) {
    const int64_t rows = x.rows(), k = x.cols();
    std::array<cuda::LinearOut<T>, 3> outs;
    size_t count = 0;
    for (const Proj& p : projs) {
      const int64_t n = p.W->rows();
      p.y->ensure(rows, n, P_);
      outs.at(count++) = {p.W->template data<T>(), n, p.y->template data<T>(), n};
    }
    cuda::linear_multi<T>(ctx_.blas, x.data<T>(), k, rows, k,
                          std::span<const cuda::LinearOut<T>>(outs.data(), count), /*beta=*/0.0f,
                          s_);
    lora_add_multi(l, x.data<T>(), k, projs);
  }

  // lora_add for each of projs (same x), bitwise the per-target calls; target k's h is block k
  // of lora_h.
  void lora_add_multi(int64_t l, const T* x, int64_t ld_x, std::initializer_list<Proj> projs) {
    if (!adapted_) return;
    std::array<cuda::LoraMultiTarget<T>, cuda::kLoraMaxTargets> targets;
    size_t count = 0;
    for (const Proj& p : projs) {
      const auto view = ctx_.lora->view(l, p.target);
      if (!view) continue;
      float* h = st_.lora_h.data<float>() + int64_t(count) * st_.T * view->max_rank;
      targets.at(count++) = {*view, h, p.y->template data<T>(), p.W->rows(), /*col_offset=*/0};
    }
    const std::span<const cuda::LoraMultiTarget<T>> span(targets.data(), count);
    cuda::lora_shrink_multi<T>(x, ld_x, span, segs_, s_);
    cuda::lora_expand_multi<T>(span, segs_, s_);
  }

  void lora_add(int64_t l, LoraTarget target, const T* x, int64_t ld_x, T* y, int64_t ld_y) {
    if (!adapted_) return;
    const auto view = ctx_.lora->view(l, target);
    if (!view) return;
    cuda::lora_shrink(x, ld_x, *view, segs_, st_.lora_h.data<float>(), s_);
    cuda::lora_expand(st_.lora_h.data<float>(), *view, segs_, y, ld_y, /*col_offset=*/0, s_);
  }

  ForwardContext& ctx_;
  DeviceForwardState& st_;
  cudaStream_t s_;
  const engine::ModelConfig& c_;
  Precision P_;
  bool adapted_ = false;
  cuda::DeviceSegments segs_;
};

}  // namespace

template <class T>
void run_forward(ForwardContext& ctx, DeviceKvCache& cache, const DeviceForwardOptions& options) {
  Forward<T>(ctx).run(cache, options);
}

template <class T>
void run_unembed(ForwardContext& ctx, int64_t r0, int64_t r1, const kernels::LoraSegment* segments,
                 int32_t count, bool adapted, DeviceTensor& logits) {
  const engine::ModelConfig& c = ctx.weights.config();
  DeviceForwardState& st = ctx.st;
  const int64_t n = r1 - r0;
  logits.ensure(n, c.vocab_size, precision_of<T>());
  const T* x = st.x_final.data<T>() + r0 * c.dim;
  cuda::linear(ctx.blas, x, c.dim, n, c.dim, ctx.weights.unembedding().data<T>(), c.vocab_size,
               logits.data<T>(), c.vocab_size, /*beta=*/0.0f, ctx.stream);
  if (!adapted || ctx.lora == nullptr) return;
  const auto view = ctx.lora->view(0, LoraTarget::lm_head);
  if (!view) return;
  if (st.lora_h.rows() < n || st.lora_h.cols() != view->max_rank) {
    st.lora_h.ensure(std::max(n, st.T), view->max_rank, Precision::fp32);
  }
  const cuda::DeviceSegments segs{segments, count, n};
  cuda::lora_shrink(x, c.dim, *view, segs, st.lora_h.data<float>(), ctx.stream);
  cuda::lora_expand(st.lora_h.data<float>(), *view, segs, logits.data<T>(), c.vocab_size,
                    /*col_offset=*/0, ctx.stream);
}

template void run_forward<float>(ForwardContext&, DeviceKvCache&, const DeviceForwardOptions&);
template void run_forward<kernels::cuda::bf16>(ForwardContext&, DeviceKvCache&,
                                               const DeviceForwardOptions&);
template void run_unembed<float>(ForwardContext&, int64_t, int64_t, const kernels::LoraSegment*,
                                 int32_t, bool, DeviceTensor&);
template void run_unembed<kernels::cuda::bf16>(ForwardContext&, int64_t, int64_t,
                                               const kernels::LoraSegment*, int32_t, bool,
                                               DeviceTensor&);

}  // namespace spindle::gpu::internal
