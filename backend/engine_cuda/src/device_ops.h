#pragma once
// The CUDA engine's ops for the decoder graph (engine/decoder_graph.h), templated on the element
// type T (float or bf16): device tensors, every op queued on the model's stream, the kernels of
// spindle::kernels::cuda. Backend-specific fusions behind the graph's ops:
//   - project(): the 1–3 projections of one input as one multi-output linear (one launch for
//     bf16 decode batches) and one shrink + one expand launch for their LoRA adds;
//   - fuse_qk_norm_rope_kv(): inference's qk norm, RoPE and KV write in one launch (bitwise the
//     three steps).
// The caller validated the batch and laid out the state's tables (host and device).
// Threading: as DeviceModel (one engine thread; the device already made current).

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "backward.h"
#include "device_forward.h"
#include "spindle/core/error.h"
#include "spindle/engine/decoder_graph.h"
#include "spindle/engine/model.h"
#include "spindle/engine/moe_routing.h"
#include "spindle/kernels/cuda/activation.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/mla.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/qk_rope.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::engine_cuda::internal {

namespace cuda = kernels::cuda;

template <class T>
class DeviceOps {
 public:
  using Act = DeviceTensor;
  using Stat = DeviceTensor;
  using Proj = engine::Projection<DeviceTensor, DeviceTensor>;

  // Forward over `cache` (KV written and read there).
  DeviceOps(ForwardContext& ctx, DeviceKvCache& cache)
      : w_(ctx.weights),
        blas_(ctx.blas),
        s_(ctx.stream),
        c_(ctx.weights.config()),
        lora_(ctx.lora),
        st_(ctx.st),
        cache_(&cache),
        fwd_(&ctx) {
    const int64_t rows = st_.T;
    adapted_ = !st_.slots_used.empty() && lora_ != nullptr;
    segs_ = {st_.d_segments.data(), int32_t(st_.segments.size()), rows};
    if (adapted_) {
      // One [rows, max_rank] h per target of a multi-target LoRA call (lora_add_multi).
      st_.lora_h.ensure(int64_t(cuda::kLoraMaxTargets) * rows, lora_->max_rank(), Precision::fp32);
    }
    // The decode attention's partials, sized for this call's (or graph bucket's) context.
    // (MLA attends with every head over one latent row: kv_cache_heads / kv_cache_head_dim.)
    const size_t attn_bytes = cuda::attention_scratch_bytes(
        int32_t(st_.attn_seqs.size()), c_.n_heads, c_.kv_cache_heads(), c_.kv_cache_head_dim(),
        st_.attn_max_ctx);
    st_.attn_scratch.ensure(1, int64_t((attn_bytes + sizeof(float) - 1) / sizeof(float)),
                            Precision::fp32);
  }

  // Backward of the forward that left its activations in ctx.st.
  explicit DeviceOps(TrainContext& ctx)
      : w_(ctx.model.weights()),
        blas_(ctx.model.blas()),
        s_(ctx.model.stream()),
        c_(ctx.model.weights().config()),
        lora_(&ctx.pool),
        st_(ctx.st),
        train_(&ctx) {
    for (const auto& g : st_.segments) adapted_ |= g.slot >= 0;
    // With the host mirror, a tall call's LoRA backward runs as cuBLAS GEMMs (cuda/lora.h).
    segs_ = {st_.d_segments.data(), int32_t(st_.segments.size()), st_.T, st_.segments.data()};
  }

  DeviceForwardState& state() { return st_; }
  const engine::ModelConfig& config() const { return c_; }
  const DeviceLayerWeights& layer(int64_t l) const { return w_.layer(l); }
  const DeviceTensor& final_norm() const { return w_.final_norm(); }
  // The GPU trains adapters only: no base gradients.
  DeviceLayerWeights* layer_grads(int64_t) const { return nullptr; }
  DeviceTensor* final_norm_grad() const { return nullptr; }

  void shape(DeviceTensor& t, int64_t rows, int64_t cols) { t.ensure(rows, cols, P_); }
  void shape_stat(DeviceTensor& t, int64_t rows) { t.ensure(rows, 1, Precision::fp32); }
  void copy(const DeviceTensor& src, DeviceTensor& dst) { dst.copy_from(src, s_); }

  void embed(DeviceTensor& x) {
    cuda::embedding_gather(w_.tok_emb().data<T>(), c_.dim, st_.d_tokens.data(), st_.T, x.data<T>(),
                           c_.dim, s_);
  }
  void rmsnorm(const DeviceTensor& x, const DeviceTensor& w, DeviceTensor& y, DeviceTensor* inv) {
    const int64_t rows = x.rows(), n = x.cols();
    y.ensure(rows, n, P_);
    if (inv) inv->ensure(rows, 1, Precision::fp32);
    cuda::rmsnorm(x.data<T>(), n, w.data<float>(), y.data<T>(), n, rows, n, c_.rms_eps,
                  inv ? inv->data<float>() : nullptr, s_);
  }
  void rmsnorm_heads(DeviceTensor& x, int64_t heads, const DeviceTensor& w, DeviceTensor* inv) {
    const int64_t hd = c_.head_dim;
    cuda::rmsnorm(x.data<T>(), hd, w.data<float>(), x.data<T>(), hd, x.rows() * heads, hd,
                  c_.rms_eps, inv ? inv->data<float>() : nullptr, s_);
  }
  void rope(DeviceTensor& x, int64_t heads, bool inverse) {
    cuda::rope(x.data<T>(), x.cols(), x.rows(), heads, c_.head_dim, st_.d_positions.data(),
               w_.rope_inv_freq().data<float>(), kernels::RopeStyle::half, inverse, s_);
  }
  bool fuse_qk_norm_rope_kv(int64_t l, DeviceLayerActivations& a) {
    const DeviceLayerWeights& w = w_.layer(l);
    const bool qwen3 = c_.qk_norm();
    cuda::qk_norm_rope_kv_write(
        a.q.data<T>(), c_.q_dim(), c_.n_heads, a.k.data<T>(), a.v.data<T>(), c_.kv_dim(), st_.T,
        qwen3 ? w.q_norm.data<float>() : nullptr, qwen3 ? w.k_norm.data<float>() : nullptr,
        c_.rms_eps, st_.d_positions.data(), w_.rope_inv_freq().data<float>(),
        kernels::RopeStyle::half, cache_->layer<T>(l), st_.d_cache_slots.data(), s_);
    return true;
  }
  void kv_write(int64_t l, const DeviceTensor& k, const DeviceTensor& v) {
    cuda::kv_cache_write(cache_->layer<T>(l), k.data<T>(), v.data<T>(), c_.kv_dim(), st_.T,
                         st_.d_cache_slots.data(), s_);
  }
  void attention(int64_t l, const DeviceTensor& q, DeviceTensor& out) {
    out.ensure(st_.T, c_.q_dim(), P_);
    cuda::attention_paged(q.data<T>(), c_.q_dim(), out.data<T>(), c_.q_dim(), c_.n_heads,
                          cache_->layer<T>(l), st_.d_attn_seqs.data(),
                          int32_t(st_.attn_seqs.size()), st_.d_block_tables.data(),
                          st_.attn_max_new, st_.attn_max_ctx, attn_scale_,
                          st_.attn_scratch.data<float>(), st_.attn_scratch.bytes(), s_);
  }

  // 1..3 projections of the same x over every row: one multi-output linear, then the targets'
  // LoRA adds (one shrink and one expand launch), bitwise the per-target calls.
  void project(int64_t l, const DeviceTensor& x, std::initializer_list<Proj> projs) {
    const int64_t rows = x.rows(), k = x.cols();
    std::array<cuda::LinearOut<T>, 3> outs;
    size_t count = 0;
    for (const Proj& p : projs) {
      const int64_t n = p.w->rows();
      p.y->ensure(rows, n, P_);
      outs.at(count++) = {p.w->template data<T>(), n, p.y->template data<T>(), n};
    }
    cuda::linear_multi<T>(blas_, x.data<T>(), k, rows, k,
                          std::span<const cuda::LinearOut<T>>(outs.data(), count), /*beta=*/0.0f,
                          s_);
    if (!adapted_) return;
    std::array<cuda::LoraMultiTarget<T>, cuda::kLoraMaxTargets> targets;
    size_t n_targets = 0;
    for (const Proj& p : projs) {
      const auto view = lora_->view(l, p.target);
      if (!view) continue;
      float* h = st_.lora_h.data<float>() + int64_t(n_targets) * st_.T * view->max_rank;
      targets.at(n_targets++) = {*view, h, p.y->template data<T>(), p.w->rows(),
                                 /*col_offset=*/0};
    }
    const std::span<const cuda::LoraMultiTarget<T>> span(targets.data(), n_targets);
    cuda::lora_shrink_multi<T>(x.data<T>(), k, span, segs_, s_);
    cuda::lora_expand_multi<T>(span, segs_, s_);
  }
  void project_add(int64_t l, engine::LoraTarget target, const DeviceTensor& x,
                   const DeviceTensor& W, DeviceTensor& y) {
    cuda::linear(blas_, x.data<T>(), x.cols(), x.rows(), x.cols(), W.data<T>(), W.rows(),
                 y.data<T>(), y.cols(), /*beta=*/1.0f, s_);
    if (!adapted_) return;
    const auto view = lora_->view(l, target);
    if (!view) return;
    cuda::lora_shrink(x.data<T>(), x.cols(), *view, segs_, st_.lora_h.data<float>(), s_);
    cuda::lora_expand(st_.lora_h.data<float>(), *view, segs_, y.data<T>(), y.cols(),
                      /*col_offset=*/0, s_);
  }
  void swiglu(const DeviceTensor& gate, const DeviceTensor& up, DeviceTensor& act) {
    act.ensure(gate.rows(), gate.cols(), P_);
    cuda::swiglu(gate.data<T>(), up.data<T>(), act.data<T>(), gate.rows() * gate.cols(), s_);
  }
  void gather_last_rows(const DeviceTensor& x, DeviceTensor& out) {
    out.ensure(st_.rows_out, c_.dim, P_);
    cuda::embedding_gather(x.data<T>(), c_.dim, st_.d_last_rows.data(), st_.rows_out, out.data<T>(),
                           c_.dim, s_);
  }
  void logits() {
    run_unembed<T>(*fwd_, 0, st_.rows_out, st_.d_out_segments.data(),
                   int32_t(st_.out_segments.size()), adapted_, st_.logits);
  }

  // Routed experts (inference). The router's logits are computed here and downloaded; the
  // choice and its grouping are engine::route_experts on the host (one implementation with the
  // CPU engine), so this op waits for the stream once per sparse layer (DeviceModel never
  // captures an MoE forward into a graph). Then one GEMM per expert segment of the sorted rows
  // and one SGMV segment per (expert, slot) run for the experts' LoRA.
  void moe_route(int64_t l, const DeviceTensor& xn, DeviceMoeActivations& m) {
    const DeviceLayerWeights& L = w_.layer(l);
    const int64_t n = st_.T, D = c_.dim, E = c_.moe.n_experts, K = c_.moe.top_k;
    m.logits.ensure(n, E, P_);
    cuda::linear(blas_, xn.data<T>(), D, n, D, L.router.data<T>(), E, m.logits.data<T>(), E,
                 /*beta=*/0.0f, s_);
    const std::vector<float> logits = m.logits.download(s_);  // waits for the stream
    m.probs.resize(size_t(n * E));
    m.weight.resize(size_t(n * K));
    engine::route_experts(c_, logits.data(), L.router_bias.empty() ? nullptr : L.router_bias.data(),
                          n, st_.segments, m.probs.data(), m.weight.data(), m.routing);
    // Token t's rows in sorted order, ascending (the order the CPU engine adds them in).
    const auto& order = m.routing.order;
    // The backward's combine weights go by sorted row.
    std::vector<int32_t> rows(size_t(n * K)), pos(size_t(n * K)), filled(size_t(n), 0);
    std::vector<float> weight(size_t(n * K)), sorted(size_t(n * K));
    for (int64_t i = 0; i < n * K; ++i) {
      const int32_t j = order[size_t(i)], t = j / int32_t(K);
      rows[size_t(i)] = t;
      sorted[size_t(i)] = m.weight[size_t(j)];
      const int64_t at = int64_t(t) * K + filled[size_t(t)]++;
      pos[size_t(at)] = int32_t(i);
      weight[size_t(at)] = m.weight[size_t(j)];
    }
    upload_table(rows, m.d_rows, s_);
    upload_table(pos, m.d_pos, s_);
    upload_table(weight, m.d_weight, s_);
    upload_table(m.routing.lora_segs, m.d_lora_segs, s_);
    if (st_.keep_activations) upload_table(sorted, m.d_weight_sorted, s_);
    m.xg.ensure(n * K, D, P_);
    cuda::embedding_gather(xn.data<T>(), D, m.d_rows.data(), n * K, m.xg.data<T>(), D, s_);
  }
  void moe_gate_up(int64_t l, DeviceMoeActivations& m) {
    const DeviceLayerWeights& L = w_.layer(l);
    const int64_t D = c_.dim, F = c_.moe.expert_dim, rows = m.xg.rows();
    m.gate.ensure(rows, F, P_);
    m.up.ensure(rows, F, P_);
    for_each_expert(m, [&](int64_t e, int64_t o, int64_t n) {
      const T* x = m.xg.data<T>() + o * D;
      const std::array<cuda::LinearOut<T>, 2> outs = {
          cuda::LinearOut<T>{L.expert_gate.data<T>() + e * F * D, F, m.gate.data<T>() + o * F, F},
          cuda::LinearOut<T>{L.expert_up.data<T>() + e * F * D, F, m.up.data<T>() + o * F, F}};
      cuda::linear_multi<T>(blas_, x, D, n, D, std::span<const cuda::LinearOut<T>>(outs),
                            /*beta=*/0.0f, s_);
      const auto segs = expert_segments(m, e, n);
      if (segs.count == 0) return;
      std::array<cuda::LoraMultiTarget<T>, 2> targets;
      size_t n_targets = 0;
      for (engine::LoraTarget t : {engine::LoraTarget::gate, engine::LoraTarget::up}) {
        const auto view = lora_->expert_view(l, t, e);
        if (!view) continue;
        float* h = st_.lora_h.data<float>() + int64_t(n_targets) * st_.T * view->max_rank;
        T* y = (t == engine::LoraTarget::gate ? m.gate : m.up).template data<T>() + o * F;
        targets.at(n_targets++) = {*view, h, y, F, /*col_offset=*/0};
      }
      if (n_targets == 0) return;
      const std::span<const cuda::LoraMultiTarget<T>> span(targets.data(), n_targets);
      cuda::lora_shrink_multi<T>(x, D, span, segs, s_);
      cuda::lora_expand_multi<T>(span, segs, s_);
    });
  }
  void moe_down_combine(int64_t l, DeviceMoeActivations& m, DeviceTensor& x) {
    const DeviceLayerWeights& L = w_.layer(l);
    const int64_t D = c_.dim, F = c_.moe.expert_dim, K = c_.moe.top_k, rows = m.act.rows();
    m.out.ensure(rows, D, P_);
    for_each_expert(m, [&](int64_t e, int64_t o, int64_t n) {
      const T* act = m.act.data<T>() + o * F;
      T* out = m.out.data<T>() + o * D;
      cuda::linear(blas_, act, F, n, F, L.expert_down.data<T>() + e * D * F, D, out, D,
                   /*beta=*/0.0f, s_);
      const auto segs = expert_segments(m, e, n);
      if (segs.count == 0) return;
      if (const auto view = lora_->expert_view(l, engine::LoraTarget::down, e)) {
        cuda::lora_shrink(act, F, *view, segs, st_.lora_h.data<float>(), s_);
        cuda::lora_expand(st_.lora_h.data<float>(), *view, segs, out, D, /*col_offset=*/0, s_);
      }
    });
    cuda::moe_combine<T>(m.out.data<T>(), D, m.d_pos.data(), m.d_weight.data(), st_.T, K, D,
                         /*beta=*/1.0f, x.data<T>(), D, s_);
  }

  // Routed experts' backward (engine::DecoderGraph's contract; here d_weight is by sorted row,
  // which only these ops read). The router's part is route_experts_backward on the host, as
  // its forward.
  void moe_down_combine_backward(int64_t l, const DeviceMoeActivations& m, const DeviceTensor& dy,
                                 DeviceTensor& d_act, DeviceTensor& d_weight) {
    const DeviceLayerWeights& L = w_.layer(l);
    const int64_t D = c_.dim, F = c_.moe.expert_dim, rows = m.out.rows();
    DeviceTensor& d_out = train_->scratch.moe_d_out;
    d_out.ensure(rows, D, P_);
    d_weight.ensure(rows, 1, Precision::fp32);
    cuda::moe_combine_backward<T>(dy.data<T>(), D, m.d_rows.data(), m.d_weight_sorted.data(),
                                  m.out.data<T>(), D, rows, D, d_out.data<T>(), D,
                                  d_weight.data<float>(), s_);
    for_each_expert(m, [&](int64_t e, int64_t o, int64_t n) {
      const auto segs = expert_segments(m, e, n);
      const auto lora = expert_grad_target(l, engine::LoraTarget::down, e, segs);
      // d_act = d_out · W_down (W_down [D, F])
      linear_backward<T>(*train_, L.expert_down.data<T>() + e * D * F, D, F,
                         lora ? &*lora : nullptr, m.act.data<T>() + o * F, F, n,
                         d_out.data<T>() + o * D, D, segs, d_act.data<T>() + o * F, F, 0.0f);
    });
  }
  void moe_gate_up_backward(int64_t l, const DeviceMoeActivations& m, const DeviceTensor& d_gate,
                            const DeviceTensor& d_up, DeviceTensor& d_xn) {
    const DeviceLayerWeights& L = w_.layer(l);
    const int64_t D = c_.dim, F = c_.moe.expert_dim, K = c_.moe.top_k, rows = m.xg.rows();
    DeviceTensor& d_xg = train_->scratch.moe_d_xg;
    d_xg.ensure(rows, D, P_);
    for_each_expert(m, [&](int64_t e, int64_t o, int64_t n) {
      const auto segs = expert_segments(m, e, n);
      const T* x = m.xg.data<T>() + o * D;
      T* dx = d_xg.data<T>() + o * D;
      // d_xg = d_gate · W_gate + d_up · W_up (each [F, D]), with their LoRA parts.
      const auto lg = expert_grad_target(l, engine::LoraTarget::gate, e, segs);
      linear_backward<T>(*train_, L.expert_gate.data<T>() + e * F * D, F, D, lg ? &*lg : nullptr, x,
                         D, n, d_gate.data<T>() + o * F, F, segs, dx, D, 0.0f);
      const auto lu = expert_grad_target(l, engine::LoraTarget::up, e, segs);
      linear_backward<T>(*train_, L.expert_up.data<T>() + e * F * D, F, D, lu ? &*lu : nullptr, x,
                         D, n, d_up.data<T>() + o * F, F, segs, dx, D, 1.0f);
    });
    // d_xn[t] = Σ of token t's rows (overwritten), in the forward's order.
    cuda::moe_combine<T>(d_xg.data<T>(), D, m.d_pos.data(), nullptr, st_.T, K, D, /*beta=*/0.0f,
                         d_xn.data<T>(), D, s_);
  }
  void moe_route_backward(int64_t l, const DeviceTensor& xn, const DeviceMoeActivations& m,
                          const DeviceTensor& d_weight, DeviceTensor& d_xn) {
    const DeviceLayerWeights& L = w_.layer(l);
    const int64_t n = st_.T, D = c_.dim, E = c_.moe.n_experts, K = c_.moe.top_k;
    const std::vector<float> sorted = d_weight.download(s_);  // waits for the stream
    std::vector<float> dw(size_t(n * K));
    for (int64_t i = 0; i < n * K; ++i) dw[size_t(m.routing.order[size_t(i)])] = sorted[size_t(i)];
    std::vector<float> dz(size_t(n * E));
    engine::route_experts_backward(c_, m.probs.data(), m.routing.expert, dw.data(), n, st_.segments,
                                   /*aux=*/nullptr, dz.data());
    DeviceTensor& d_logits = train_->scratch.moe_d_logits;
    d_logits.ensure(n, E, P_);
    d_logits.upload(dz.data(), n * E, s_);
    // d_xn += dz · W_router (W_router [E, D])
    cuda::gemm<T>(blas_, kernels::Trans::no, kernels::Trans::no, n, D, E, 1.0f, d_logits.data<T>(),
                  E, L.router.data<T>(), D, 1.0f, d_xn.data<T>(), D, s_);
  }

  // ---- Multi-head Latent Attention (the CPU's cpu_mla.cpp, op for op) ----
  static constexpr bool kMla = true;

  void copy_cols(const DeviceTensor& src, int64_t c0, int64_t n, DeviceTensor& dst) {
    dst.ensure(src.rows(), n, P_);
    cuda::copy_head_cols<T>(src.data<T>(), src.cols(), src.cols(), c0, dst.data<T>(), n, n, 0,
                            src.rows(), 1, n, s_);
  }
  void put_cols(const DeviceTensor& src, DeviceTensor& dst, int64_t c0) {
    cuda::copy_head_cols<T>(src.data<T>(), src.cols(), src.cols(), 0, dst.data<T>(), dst.cols(),
                            dst.cols(), c0, src.rows(), 1, src.cols(), s_);
  }
  void mla_rope(DeviceTensor& x, int64_t heads, bool inverse) {
    const auto style =
        c_.mla.rope_interleave ? kernels::RopeStyle::interleaved : kernels::RopeStyle::half;
    cuda::mla_rope<T>(x.data<T>(), x.cols(), x.rows(), heads, x.cols() / heads,
                      c_.mla.qk_rope_head_dim, st_.d_positions.data(),
                      w_.rope_inv_freq().data<float>(), style, inverse, rope_factor_, s_);
  }
  void mla_kv_write(int64_t l, const DeviceTensor& ckv, const DeviceTensor& k_pe) {
    const int64_t R = ckv.cols(), dr = k_pe.cols();
    DeviceTensor& latent = st_.mla_latent;  // transient: the cache keeps the rows
    latent.ensure(st_.T, R + dr, P_);
    put_cols(ckv, latent, 0);
    put_cols(k_pe, latent, R);
    // The latent cache's V is its K (one row [ckv, k_pe] per token): the same values twice.
    cuda::kv_cache_write(cache_->layer<T>(l), latent.data<T>(), latent.data<T>(), R + dr, st_.T,
                         st_.d_cache_slots.data(), s_);
  }
  // Inference: q̃[h] = [q_nope[h]·W_UK[h] (+ kv_b's LoRA, absorbed), q_pe[h]] attends over the
  // cached latent rows as multi-query attention; the attended latent goes through W_UV[h].
  void mla_attention(int64_t l, DeviceLayerActivations& a) {
    const DeviceLayerWeights& L = w_.layer(l);
    const engine::MlaDims d(c_);
    DeviceMlaActivations& m = a.mla;
    const int64_t n = st_.T;
    m.q_abs.ensure(n, d.H * d.lw, P_);
    m.o_lat.ensure(n, d.H * d.lw, P_);
    a.attn.ensure(n, d.H * d.dv, P_);
    for (int64_t h = 0; h < d.H; ++h) {  // W_UK[h] = kv_b rows h·kvw + [0, dn): [dn, R]
      cuda::gemm<T>(blas_, kernels::Trans::no, kernels::Trans::no, n, d.R, d.dn, 1.0f,
                    a.q.data<T>() + h * d.qw, d.H * d.qw, L.wkv_b.data<T>() + h * d.kvw * d.R, d.R,
                    0.0f, m.q_abs.data<T>() + h * d.lw, d.H * d.lw, s_);
    }
    cuda::copy_head_cols<T>(a.q.data<T>(), d.H * d.qw, d.qw, d.dn, m.q_abs.data<T>(), d.H * d.lw,
                            d.lw, d.R, n, d.H, d.dr, s_);
    const auto view = adapted_ ? lora_->view(l, engine::LoraTarget::kv_b) : std::nullopt;
    if (view) {
      cuda::mla_lora_absorb_q<T>(a.q.data<T>(), d.H * d.qw, d.H, d.qw, d.dn, d.kvw, d.lw, *view,
                                 segs_, m.q_abs.data<T>(), d.H * d.lw, s_);
    }
    cuda::attention_paged(m.q_abs.data<T>(), d.H * d.lw, m.o_lat.data<T>(), d.H * d.lw, d.H,
                          cache_->layer<T>(l), st_.d_attn_seqs.data(),
                          int32_t(st_.attn_seqs.size()), st_.d_block_tables.data(),
                          st_.attn_max_new, st_.attn_max_ctx, attn_scale_,
                          st_.attn_scratch.data<float>(), st_.attn_scratch.bytes(), s_);
    for (int64_t h = 0; h < d.H; ++h) {  // W_UV[h] = kv_b rows h·kvw + dn + [0, dv): [dv, R]
      cuda::gemm<T>(blas_, kernels::Trans::no, kernels::Trans::yes, n, d.dv, d.R, 1.0f,
                    m.o_lat.data<T>() + h * d.lw, d.H * d.lw,
                    L.wkv_b.data<T>() + (h * d.kvw + d.dn) * d.R, d.R, 0.0f,
                    a.attn.data<T>() + h * d.dv, d.H * d.dv, s_);
    }
    if (view) {
      cuda::mla_lora_absorb_out<T>(m.o_lat.data<T>(), d.H * d.lw, d.H, d.lw, d.dn, d.dv, d.kvw,
                                   *view, segs_, a.attn.data<T>(), d.H * d.dv, s_);
    }
  }
  // Training forwards: the uncompressed form over the new rows (sequences from position 0),
  // heads zero-padded to P, through the dense attention kernels the backward differentiates.
  void mla_attention_dense(int64_t l, DeviceLayerActivations& a) {
    const engine::MlaDims d(c_);
    DeviceMlaActivations& m = a.mla;
    const int64_t n = st_.T, W = d.H * d.P;
    for (DeviceTensor* t : {&m.q_p, &m.k_p, &m.v_p}) {  // the padding columns are zeros
      t->ensure(n, W, P_);
      t->zero(s_);
    }
    m.attn_p.ensure(n, W, P_);  // every column written by the attention (head_dim P)
    cuda::copy_head_cols<T>(a.q.data<T>(), d.H * d.qw, d.qw, 0, m.q_p.data<T>(), W, d.P, 0, n, d.H,
                            d.qw, s_);
    cuda::copy_head_cols<T>(m.kv.data<T>(), d.H * d.kvw, d.kvw, 0, m.k_p.data<T>(), W, d.P, 0, n,
                            d.H, d.dn, s_);
    cuda::copy_head_cols<T>(m.k_pe.data<T>(), d.dr, 0, 0, m.k_p.data<T>(), W, d.P, d.dn, n, d.H,
                            d.dr, s_);  // src_w 0: every head reads the shared rope key
    cuda::copy_head_cols<T>(m.kv.data<T>(), d.H * d.kvw, d.kvw, d.dn, m.v_p.data<T>(), W, d.P, 0, n,
                            d.H, d.dv, s_);
    // Dense causal attention over the new rows: the backward's own kernel layout, sequences
    // from position 0 (its forward recomputes nothing: only attn_p is kept from here).
    SPINDLE_CHECK(std::all_of(st_.attn_seqs.begin(), st_.attn_seqs.end(),
                              [](const auto& q) { return q.n_past == 0; }),
                  unsupported,
                  "MLA: a forward that keeps activations (training, scoring for a backward) "
                  "needs sequences from position 0");
    if (l == 0) upload_dense_tables();  // every layer is MLA: the first of this forward
    dense_attention(m.q_p, m.k_p, m.v_p, m.attn_p, d.H, d.P);
    a.attn.ensure(n, d.H * d.dv, P_);
    cuda::copy_head_cols<T>(m.attn_p.data<T>(), W, d.P, 0, a.attn.data<T>(), d.H * d.dv, d.dv, 0, n,
                            d.H, d.dv, s_);
  }
  void mla_attention_dense_backward(const DeviceLayerActivations& a, const DeviceTensor& d_attn,
                                    DeviceTensor& dq, DeviceTensor& dkv, DeviceTensor& dk_pe) {
    const engine::MlaDims d(c_);
    const DeviceMlaActivations& m = a.mla;
    TrainScratch& sc = train_->scratch;
    const int64_t n = st_.T, W = d.H * d.P;
    for (DeviceTensor* t : {&sc.mla_d_attn_p, &sc.mla_dq_p, &sc.mla_dk_p, &sc.mla_dv_p}) {
      t->ensure(n, W, P_);
    }
    sc.mla_d_attn_p.zero(s_);
    cuda::copy_head_cols<T>(d_attn.data<T>(), d.H * d.dv, d.dv, 0, sc.mla_d_attn_p.data<T>(), W,
                            d.P, 0, n, d.H, d.dv, s_);
    auto& scratch = sc.kernel_scratch;
    const size_t bytes = cuda::attention_backward_scratch_bytes(n_dense_, max_n_, d.H);
    ensure_capacity(scratch, bytes);
    cuda::attention_backward<T>(
        m.q_p.data<T>(), m.k_p.data<T>(), m.v_p.data<T>(), sc.mla_d_attn_p.data<T>(),
        sc.mla_dq_p.data<T>(), sc.mla_dk_p.data<T>(), sc.mla_dv_p.data<T>(), d.H, d.H, d.P,
        sc.dense_seqs.data(), n_dense_, max_n_, attn_scale_, scratch.data(), bytes, s_);
    cuda::copy_head_cols<T>(sc.mla_dq_p.data<T>(), W, d.P, 0, dq.data<T>(), d.H * d.qw, d.qw, 0, n,
                            d.H, d.qw, s_);
    cuda::copy_head_cols<T>(sc.mla_dk_p.data<T>(), W, d.P, 0, dkv.data<T>(), d.H * d.kvw, d.kvw, 0,
                            n, d.H, d.dn, s_);
    cuda::copy_head_cols<T>(sc.mla_dv_p.data<T>(), W, d.P, 0, dkv.data<T>(), d.H * d.kvw, d.kvw,
                            d.dn, n, d.H, d.dv, s_);
    cuda::sum_heads<T>(sc.mla_dk_p.data<T>(), W, n, d.H, d.P, d.dn, d.dr, dk_pe.data<T>(), d.dr,
                       s_);
  }

  // ---- backward ----
  void begin_backward() {
    std::vector<kernels::DenseSeq> dense;
    max_n_ = 0;
    for (const auto& q : st_.attn_seqs) {
      dense.push_back({q.row_begin, q.n_new});
      max_n_ = std::max(max_n_, q.n_new);
    }
    n_dense_ = int32_t(dense.size());
    upload_table(dense, train_->scratch.dense_seqs, s_);
  }
  TrainScratch& scratch() { return train_->scratch; }

  void project_backward(int64_t l, engine::LoraTarget target, const DeviceTensor& x,
                        const DeviceTensor& W, const DeviceTensor& dy, DeviceTensor& dx,
                        float beta_dx, DeviceTensor* dW) {
    SPINDLE_CHECK(dW == nullptr, internal, "the CUDA engine trains adapters only");
    internal::project_backward<T>(*train_, l, target, x.data<T>(), x.cols(), st_.T, W, dy.data<T>(),
                                  W.rows(), segs_, adapted_, dx.data<T>(), W.cols(), beta_dx);
  }
  void rmsnorm_backward(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& inv,
                        const DeviceTensor& dy, DeviceTensor& dx, float beta_dx, DeviceTensor* dw) {
    const int64_t rows = x.rows(), n = x.cols();
    cuda::rmsnorm_backward<T>(x.data<T>(), n, w.data<float>(), inv.data<float>(), dy.data<T>(), n,
                              dx.data<T>(), n, rows, n, beta_dx, s_);
  }
  void rmsnorm_heads_backward(const DeviceTensor& x_pre, int64_t heads, const DeviceTensor& w,
                              const DeviceTensor& inv, const DeviceTensor& dy, DeviceTensor& dx,
                              DeviceTensor* dw) {
    const int64_t hd = c_.head_dim;
    cuda::rmsnorm_backward<T>(x_pre.data<T>(), hd, w.data<float>(), inv.data<float>(), dy.data<T>(),
                              hd, dx.data<T>(), hd, x_pre.rows() * heads, hd, 0.0f, s_);
  }
  void swiglu_backward(const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& d_act,
                       DeviceTensor& d_gate, DeviceTensor& d_up) {
    cuda::swiglu_backward<T>(gate.data<T>(), up.data<T>(), d_act.data<T>(), d_gate.data<T>(),
                             d_up.data<T>(), gate.rows() * gate.cols(), s_);
  }
  void attention_backward(const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                          const DeviceTensor& d_out, DeviceTensor& dq, DeviceTensor& dk,
                          DeviceTensor& dv) {
    auto& scratch = train_->scratch.kernel_scratch;
    const size_t bytes = cuda::attention_backward_scratch_bytes(n_dense_, max_n_, c_.n_heads);
    ensure_capacity(scratch, bytes);
    cuda::attention_backward<T>(q.data<T>(), k.data<T>(), v.data<T>(), d_out.data<T>(),
                                dq.data<T>(), dk.data<T>(), dv.data<T>(), c_.n_heads, c_.n_kv_heads,
                                c_.head_dim, train_->scratch.dense_seqs.data(), n_dense_, max_n_,
                                attn_scale_, scratch.data(), bytes, s_);
  }
  void embedding_backward(const DeviceTensor&) {}  // the base is frozen on the GPU

 private:
  // The one-token-block tables of dense_attention for this forward's sequences: block b is
  // row b, each sequence from position 0. The same for every layer: uploaded once per forward,
  // into the state (grow-only; a DeviceOps buffer would be freed, a device-wide sync, at the
  // end of every forward).
  void upload_dense_tables() {
    std::vector<int32_t> rows(static_cast<size_t>(st_.T));
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<cuda::DeviceAttnSeq> seqs;
    for (const auto& q : st_.attn_seqs) {
      seqs.push_back({q.row_begin, q.n_new, 0, int32_t(q.row_begin)});
    }
    upload_table(rows, st_.mla_dense_rows, s_);
    upload_table(seqs, st_.mla_dense_seqs, s_);
  }
  // out = causal attention of q over (k, v), the batch's new rows (upload_dense_tables), heads
  // × head_dim each, through the paged prefill kernels.
  void dense_attention(const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                       DeviceTensor& out, int64_t heads, int64_t head_dim) {
    const cuda::DevicePagedKv<T> kv{
        const_cast<T*>(k.data<T>()), const_cast<T*>(v.data<T>()), st_.T, 1, heads, head_dim};
    cuda::attention_prefill<T>(q.data<T>(), heads * head_dim, out.data<T>(), heads * head_dim,
                               heads, kv, st_.mla_dense_seqs.data(), int32_t(st_.attn_seqs.size()),
                               st_.mla_dense_rows.data(), st_.attn_max_new, st_.attn_max_new,
                               attn_scale_, s_);
  }

  // Expert e's LoRA of `target` with its gradient blocks, when the rows are adapted and a
  // backward accumulates gradients.
  std::optional<LoraGradTarget> expert_grad_target(int64_t l, engine::LoraTarget target, int64_t e,
                                                   const cuda::DeviceSegments& segs) const {
    if (segs.count == 0 || train_ == nullptr || train_->grads == nullptr) return std::nullopt;
    const auto view = lora_->expert_view(l, target, e);
    if (!view) return std::nullopt;
    return LoraGradTarget{*view, train_->grads->expert_dA(l, target, e),
                          train_->grads->expert_dB(l, target, e)};
  }
  // fn(e, o, n) for every expert e with rows: its n sorted rows start at row o.
  template <class F>
  static void for_each_expert(const DeviceMoeActivations& m, F&& fn) {
    const auto& offsets = m.routing.offsets;
    for (size_t e = 0; e + 1 < offsets.size(); ++e) {
      const int64_t o = offsets[e], n = offsets[e + 1] - o;
      if (n > 0) fn(int64_t(e), o, n);
    }
  }
  // Expert e's LoRA segments (rows from the expert's first sorted row, n rows) on the device;
  // count 0 when no row of the expert is adapted.
  cuda::DeviceSegments expert_segments(const DeviceMoeActivations& m, int64_t e, int64_t n) const {
    if (!adapted_) return {};
    const auto& r = m.routing;
    const int64_t b = r.lora_seg_offsets[size_t(e)], en = r.lora_seg_offsets[size_t(e + 1)];
    bool any = false;
    for (int64_t i = b; i < en; ++i) any |= r.lora_segs[size_t(i)].slot >= 0;
    if (!any) return {};
    return {m.d_lora_segs.data() + b, int32_t(en - b), n, r.lora_segs.data() + b};
  }

  const DeviceWeights& w_;
  kernels::cuda::Blas& blas_;
  cudaStream_t s_;
  const engine::ModelConfig& c_;
  const DeviceLoraPool* lora_;
  DeviceForwardState& st_;
  DeviceKvCache* cache_ = nullptr;
  ForwardContext* fwd_ = nullptr;
  TrainContext* train_ = nullptr;
  static constexpr Precision P_ = precision_of<T>();
  // The CPU engine's softmax scale (1/√head_dim, times YaRN's attention factor squared; MLA's
  // own rule) and YaRN's factor on MLA's rope columns.
  const float attn_scale_ = engine::attention_softmax_scale(c_);
  const float rope_factor_ = engine::rope_attention_factor(c_);

  bool adapted_ = false;
  cuda::DeviceSegments segs_;
  int32_t max_n_ = 0, n_dense_ = 0;
};

}  // namespace spindle::engine_cuda::internal
