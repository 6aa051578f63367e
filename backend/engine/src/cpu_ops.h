#pragma once
// The CPU engine's ops for the decoder graph (engine/decoder_graph.h): fp32 tensors in host
// memory, the kernels of spindle::kernels (OpenBLAS GEMMs, SGMV LoRA, paged attention). The
// caller (model.cpp / backward.cpp) validated the batch and laid out the state's tables.
// No fusions: fuse_qk_norm_rope_kv is always false. Routed experts: cpu_moe.cpp; latent
// attention: cpu_mla.cpp.

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "model_internal.h"
#include "spindle/core/error.h"
#include "spindle/engine/decoder_graph.h"
#include "spindle/engine/model.h"
#include "spindle/kernels/activation.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/lora.h"
#include "spindle/kernels/matmul.h"
#include "spindle/kernels/norm.h"
#include "spindle/kernels/rope.h"

namespace spindle::engine::internal {

class CpuOps {
 public:
  using Act = Tensor;
  using Stat = Tensor;
  static constexpr bool kMla = true;  // latent attention's ops (cpu_mla.cpp)

  // `cache` may be null for calls that touch no KV (unembed, backward); `lora` may be null when
  // every slot is −1; `options` only for the backward.
  CpuOps(const Model& model, KvCache* cache, const LoraSlotPool* lora, ForwardState& st,
         const BackwardOptions* options = nullptr)
      : w_(model.weights()),
        c_(model.config()),
        inv_freq_(model.inv_freq()),
        attn_scale_(attention_softmax_scale(model.config())),
        rope_factor_(rope_attention_factor(model.config())),
        cache_(cache),
        lora_(lora),
        st_(st),
        opt_(options) {}

  ForwardState& state() { return st_; }
  const ModelConfig& config() const { return c_; }
  const LayerWeights& layer(int64_t l) const { return w_.layers[size_t(l)]; }
  const Tensor& final_norm() const { return w_.final_norm; }
  LayerWeights* layer_grads(int64_t l) const {
    ModelWeights* G = opt_ ? opt_->base_grads : nullptr;
    return G ? &G->layers[size_t(l)] : nullptr;
  }
  Tensor* final_norm_grad() const {
    ModelWeights* G = opt_ ? opt_->base_grads : nullptr;
    return G ? &G->final_norm : nullptr;
  }

  void shape(Tensor& t, int64_t rows, int64_t cols) { ensure(t, {rows, cols}); }
  void shape_stat(Tensor& t, int64_t rows) { ensure(t, {rows}); }
  void copy(const Tensor& src, Tensor& dst) {
    ensure(dst, src.shape());
    std::memcpy(dst.data(), src.data(), size_t(src.numel()) * sizeof(float));
  }

  void embed(Tensor& x) {
    for (int64_t r = 0; r < st_.T; ++r) {
      std::memcpy(x.row(r), w_.tok_emb.row(st_.tokens[size_t(r)]), size_t(c_.dim) * sizeof(float));
    }
  }

  void rmsnorm(const Tensor& x, const Tensor& w, Tensor& y, Tensor* inv_rms) {
    const int64_t rows = x.dim(0), n = x.dim(1);
    ensure(y, {rows, n});
    if (inv_rms) ensure(*inv_rms, {rows});
    kernels::rmsnorm(x.data(), n, w.data(), y.data(), n, rows, n, c_.rms_eps,
                     inv_rms ? inv_rms->data() : nullptr);
  }
  void rmsnorm_heads(Tensor& x, int64_t heads, const Tensor& w, Tensor* inv_rms) {
    const int64_t hd = c_.head_dim;
    kernels::rmsnorm(x.data(), hd, w.data(), x.data(), hd, x.dim(0) * heads, hd, c_.rms_eps,
                     inv_rms ? inv_rms->data() : nullptr);
  }
  void rope(Tensor& x, int64_t heads, bool inverse) {
    kernels::rope(x.data(), x.dim(1), x.dim(0), heads, c_.head_dim, st_.positions.data(),
                  inv_freq_.data(), kernels::RopeStyle::half, inverse);
  }
  template <class A>
  bool fuse_qk_norm_rope_kv(int64_t, A&) {
    return false;
  }
  void kv_write(int64_t l, const Tensor& k, const Tensor& v) {
    kernels::kv_cache_write(cache_->layer(l), k.data(), v.data(), c_.kv_dim(), st_.T,
                            st_.cache_slots.data());
  }
  void attention(int64_t l, const Tensor& q, Tensor& out) {
    ensure(out, {st_.T, c_.q_dim()});
    kernels::attention_paged(q.data(), c_.q_dim(), out.data(), c_.q_dim(), c_.n_heads,
                             cache_->layer(l), st_.attn_seqs, attn_scale_);
  }
  void project(int64_t l, const Tensor& x, std::initializer_list<Projection<Tensor, Tensor>> ps) {
    for (const auto& p : ps) project_one(l, p.target, x, *p.w, st_.segments, *p.y);
  }
  void project_add(int64_t l, LoraTarget target, const Tensor& x, const Tensor& W, Tensor& y) {
    kernels::linear(x.data(), x.dim(1), x.dim(0), x.dim(1), W.data(), W.dim(0), y.data(), y.dim(1),
                    /*beta=*/1.0f);
    lora_add(l, target, x.data(), x.dim(1), st_.segments, y.data(), y.dim(1));
  }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& act) {
    ensure(act, gate.shape());
    kernels::swiglu(gate.data(), up.data(), act.data(), gate.numel());
  }
  void gather_last_rows(const Tensor& x, Tensor& out) {
    ensure(out, {int64_t(st_.attn_seqs.size()), c_.dim});
    for (size_t i = 0; i < st_.attn_seqs.size(); ++i) {
      const auto& s = st_.attn_seqs[i];
      std::memcpy(out.row(int64_t(i)), x.row(s.row_begin + s.n_new - 1),
                  size_t(c_.dim) * sizeof(float));
    }
  }
  void logits() {
    project_one(0, LoraTarget::lm_head, st_.x_final, w_.unembedding(), st_.out_segments,
                st_.logits);
  }

  // y = x·Wᵀ + LoRA(x) over `segments`.
  void project_one(int64_t l, LoraTarget target, const Tensor& x, const Tensor& W,
                   std::span<const kernels::LoraSegment> segments, Tensor& y) {
    const int64_t rows = x.dim(0), k = x.dim(1), n = W.dim(0);
    ensure(y, {rows, n});
    kernels::linear(x.data(), k, rows, k, W.data(), n, y.data(), n, /*beta=*/0.0f);
    lora_add(l, target, x.data(), k, segments, y.data(), n);
  }
  // y[:, :] += LoRA(x) for one (layer, target) over `segments`.
  void lora_add(int64_t l, LoraTarget target, const float* x, int64_t ld_x,
                std::span<const kernels::LoraSegment> segments, float* y, int64_t ld_y) {
    if (lora_ == nullptr || !any_adapted(segments)) return;
    const auto view = lora_->view(l, target);
    if (!view) return;
    lora_apply(*view, x, ld_x, segments, y, ld_y);
  }
  // y += LoRA(x) through `view` over `segments` (SGMV shrink then expand).
  void lora_apply(const kernels::LoraSlots& view, const float* x, int64_t ld_x,
                  std::span<const kernels::LoraSegment> segments, float* y, int64_t ld_y) {
    float* h = lora_scratch(st_.lora_h, segments.back().row_end, view.max_rank);
    kernels::lora_shrink(x, ld_x, view, segments, h);
    kernels::lora_expand(h, view, segments, y, ld_y, /*col_offset=*/0);
  }
  // The backward of lora_apply: dA / dB accumulate, dx += the LoRA part of dy's gradient.
  void lora_apply_backward(const kernels::LoraSlots& view, const float* x, int64_t ld_x,
                           const float* dy, int64_t ld_dy,
                           std::span<const kernels::LoraSegment> segments, float* dA, float* dB,
                           float* dx, int64_t ld_dx) {
    const int64_t rows = segments.back().row_end;
    float* h = lora_scratch(st_.lora_h, rows, view.max_rank);
    float* dh = lora_scratch(st_.lora_dh, rows, view.max_rank);
    kernels::lora_shrink(x, ld_x, view, segments, h);
    kernels::lora_expand_backward(h, dy, ld_dy, /*col_offset=*/0, view, segments, dh, dB);
    kernels::lora_shrink_backward(x, ld_x, dh, view, segments, dA, dx, ld_dx);
  }

  // Routed experts (cpu_moe.cpp).
  void moe_route(int64_t l, const Tensor& xn, MoeActivations& m);
  void moe_gate_up(int64_t l, MoeActivations& m);
  void moe_down_combine(int64_t l, MoeActivations& m, Tensor& x);
  // Expert e's LoRA segments (rows from offsets[e]); empty when no row of it is adapted.
  std::span<const kernels::LoraSegment> expert_segments(const MoeActivations& m, int64_t e) const;

  // Latent attention (cpu_mla.cpp; the contracts are decoder_graph.h's).
  void copy_cols(const Tensor& src, int64_t c0, int64_t n, Tensor& dst);
  void put_cols(const Tensor& src, Tensor& dst, int64_t c0);
  void mla_rope(Tensor& x, int64_t heads, bool inverse);
  void mla_kv_write(int64_t l, const Tensor& ckv, const Tensor& k_pe);
  void mla_attention(int64_t l, LayerActivations& a);
  void mla_attention_dense(int64_t l, LayerActivations& a);
  void mla_attention_dense_backward(const LayerActivations& a, const Tensor& d_attn, Tensor& dq,
                                    Tensor& dkv, Tensor& dk_pe);

  // ---- backward ----
  void begin_backward() {
    dense_.clear();
    for (const auto& s : st_.attn_seqs) dense_.push_back({s.row_begin, s.n_new});
  }
  BackwardScratch& scratch() { return st_.scratch; }

  void project_backward(int64_t l, LoraTarget target, const Tensor& x, const Tensor& W,
                        const Tensor& dy, Tensor& dx, float beta_dx, Tensor* dW) {
    project_backward_rows(l, target, x.data(), x.dim(0), W, dy.data(), dy.dim(1), st_.segments,
                          dx.data(), beta_dx, dW);
  }
  // As project_backward over raw rows: x [T, W.dim(1)], dy [T, ld_dy], dx [T, W.dim(1)].
  void project_backward_rows(int64_t l, LoraTarget target, const float* x, int64_t T,
                             const Tensor& W, const float* dy, int64_t ld_dy,
                             std::span<const kernels::LoraSegment> segments, float* dx,
                             float beta_dx, Tensor* dW) {
    using kernels::Trans;
    const int64_t k = W.dim(1), n = W.dim(0);
    // dx = dy·W (+ beta·dx)
    kernels::gemm(Trans::no, Trans::no, T, k, n, 1.0f, dy, ld_dy, W.data(), k, beta_dx, dx, k);
    if (dW) {  // dW += dyᵀ·x
      kernels::gemm(Trans::yes, Trans::no, n, k, T, 1.0f, dy, ld_dy, x, k, 1.0f, dW->data(), k);
    }
    if (!training_lora() || !any_adapted(segments)) return;
    const auto view = lora_->view(l, target);
    if (!view) return;
    lora_apply_backward(*view, x, k, dy, ld_dy, segments, opt_->lora_grads->dA(l, target),
                        opt_->lora_grads->dB(l, target), dx, k);
  }
  void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& inv_rms, const Tensor& dy,
                        Tensor& dx, float beta_dx, Tensor* dw) {
    const int64_t rows = x.dim(0), n = x.dim(1);
    kernels::rmsnorm_backward(x.data(), n, w.data(), inv_rms.data(), dy.data(), n, dx.data(), n,
                              rows, n, beta_dx, dw ? dw->data() : nullptr);
  }
  void rmsnorm_heads_backward(const Tensor& x_pre, int64_t heads, const Tensor& w,
                              const Tensor& inv_rms, const Tensor& dy, Tensor& dx, Tensor* dw) {
    const int64_t hd = c_.head_dim;
    kernels::rmsnorm_backward(x_pre.data(), hd, w.data(), inv_rms.data(), dy.data(), hd, dx.data(),
                              hd, x_pre.dim(0) * heads, hd, 0.0f, dw ? dw->data() : nullptr);
  }
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& d_act, Tensor& d_gate,
                       Tensor& d_up) {
    kernels::swiglu_backward(gate.data(), up.data(), d_act.data(), d_gate.data(), d_up.data(),
                             gate.numel());
  }
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                          Tensor& dq, Tensor& dk, Tensor& dv) {
    kernels::attention_backward(q.data(), k.data(), v.data(), d_out.data(), dq.data(), dk.data(),
                                dv.data(), c_.n_heads, c_.n_kv_heads, c_.head_dim, dense_,
                                attn_scale_);
  }
  void moe_down_combine_backward(int64_t l, const MoeActivations& m, const Tensor& dy,
                                 Tensor& d_act, Tensor& d_weight);
  void moe_gate_up_backward(int64_t l, const MoeActivations& m, const Tensor& d_gate,
                            const Tensor& d_up, Tensor& d_xn);
  void moe_route_backward(int64_t l, const Tensor& xn, const MoeActivations& m,
                          const Tensor& d_weight, Tensor& d_xn);

  // Full-parameter mode: scatter-add dx into the embedding rows of the batch's tokens.
  void embedding_backward(const Tensor& dx) {
    ModelWeights* G = opt_ ? opt_->base_grads : nullptr;
    if (G == nullptr) return;
    SPINDLE_CHECK(int64_t(st_.tokens.size()) == st_.T, internal, "backward: token record missing");
    for (int64_t t = 0; t < st_.T; ++t) {
      float* row = G->tok_emb.row(st_.tokens[size_t(t)]);
      const float* d = dx.row(t);
      for (int64_t i = 0; i < c_.dim; ++i) row[i] += d[i];
    }
  }

 private:
  bool training_lora() const {
    return lora_ != nullptr && opt_ != nullptr && opt_->lora_grads != nullptr;
  }
  // A [>= rows, max_rank] SGMV buffer, grown (never shrunk) so that per-expert calls reuse it.
  float* lora_scratch(Tensor& t, int64_t rows, int64_t max_rank) {
    if (t.empty() || t.dim(0) < rows || t.dim(1) != max_rank) {
      t = Tensor({std::max(rows, st_.T), max_rank});
    }
    return t.data();
  }
  static bool any_adapted(std::span<const kernels::LoraSegment> segments) {
    for (const auto& s : segments) {
      if (s.slot >= 0) return true;
    }
    return false;
  }

  const ModelWeights& w_;
  const ModelConfig& c_;
  const std::vector<float>& inv_freq_;
  float attn_scale_;   // attention_softmax_scale
  float rope_factor_;  // rope_attention_factor: MLA's rope columns (dense: in attn_scale_)
  KvCache* cache_;
  const LoraSlotPool* lora_;
  ForwardState& st_;
  const BackwardOptions* opt_;
  std::vector<kernels::DenseSeq> dense_;
  Tensor moe_d_out_, moe_d_xg_, moe_d_logits_;  // backward scratch of the sparse layers
  std::vector<int32_t> dense_rows_;             // MLA's dense block table (row b = block b)
  Tensor mla_d_attn_p_, mla_dq_p_, mla_dk_p_, mla_dv_p_;  // MLA backward scratch [T, H·P]
};

}  // namespace spindle::engine::internal
