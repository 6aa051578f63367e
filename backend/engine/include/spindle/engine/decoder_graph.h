#pragma once
// The decoder's layer graph, written once for every device (CTranslate2's layers/transformer.cc
// over ops/*): the forward from the embedding to the logits and the backward from ∂loss/∂x_final
// to the embedding, as a sequence of ops. Each execution backend supplies the ops (kernels,
// memory, streams); the graph decides what runs in which order, and what is kept for the
// backward. The CPU engine (engine/src/cpu_ops.h) and the CUDA engine (engine_cuda/src/device_ops.h)
// instantiate it; MoE and MLA blocks (a later issue) are added here, once.
//
// The Ops type a backend provides (all calls act on the rows of the state's batch, T rows):
//   using Act   tensor of activations [rows, cols] in the model's dtype; base weights are Acts
//               or fp32 vectors of the same tensor type (norm weights)
//   using Stat  per-row fp32 statistics (inverse RMS)
//   State& state()                  ForwardState-shaped: T, keep_activations, layers[l]
//                                   (LayerActivations fields), x_last, x_gather, x_final,
//                                   inv_rms_final
//   const ModelConfig& config()
//   const LayerW& layer(l)          attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm,
//                                   w_gate, w_up, w_down
//   const W& final_norm()
//   LayerW* layer_grads(l)          full-parameter gradients of layer l, or null (adapters only)
//   W* final_norm_grad()            likewise for the final norm
//   shape(Act&, rows, cols), shape_stat(Stat&, rows)     (re)shape; contents undefined
//   copy(const Act& src, Act& dst)  dst = src (shaped like src)
//   embed(Act& x)                   x[r] = tok_emb[state().tokens[r]]
//   rmsnorm(x, w, y, Stat* inv)     y = x·rsqrt(mean(x²)+eps)·w per row; inv_rms kept if non-null
//   rmsnorm_heads(x, heads, w, Stat* inv)  in place, per head of head_dim (Qwen3 q/k norm)
//   rope(x, heads, inverse)         in place at state().positions
//   fuse_qk_norm_rope_kv(l, a)      a backend's fusion of (qk norm, rope, kv write) for
//                                   inference; returns false when it has none (then the graph
//                                   runs the three steps). Must equal them bitwise.
//   kv_write(l, k, v)               k, v rows into the KV cache at state().cache_slots
//   attention(l, q, out)            causal paged attention of q over layer l's cache
//   project(l, x, {Proj...})        each y = x·Wᵀ + LoRA_target(x) (y shaped here)
//   project_add(l, target, x, W, y) y += x·Wᵀ + LoRA_target(x)
//   swiglu(gate, up, act)           act = silu(gate)·up
//   gather_last_rows(x, out)        out[i] = x[last row of sequence i]
//   logits()                        state().logits from state().x_final (+ lm_head LoRA)
//   Routed experts (sparse layers; `m` is the layer activations' MoeActivations-shaped moe):
//   moe_route(l, xn, m)             router logits, softmax, top-k (+ renormalisation), and the
//                                   assignments grouped by expert; m.xg = xn's rows per
//                                   assignment
//   moe_gate_up(l, m)               m.gate / m.up = one GEMM per expert segment of m.xg
//   moe_down_combine(l, m, x)       m.out = one GEMM per segment of m.act; x[t] += Σ w·out
// Backward:
//   begin_backward()                per-call setup (tables, scratch); scratch() then returns
//                                   dx, d_xn, d_act, d_gate, d_up, d_attn, dq, dk, dv, dq_pre,
//                                   dk_pre, all shaped by the graph
//   project_backward(l, target, x, W, dy, dx, beta_dx, W* dW)
//                                   dx = dy·W + beta_dx·dx (+ LoRA part, LoRA grads accumulate);
//                                   dW += dyᵀ·x when non-null
//   rmsnorm_backward(x, w, inv, dy, dx, beta_dx, W* dw)   rows of x's width
//   rmsnorm_heads_backward(x_pre, heads, w, inv, dy, dx, W* dw)  dx = (per head), no accumulate
//   swiglu_backward(gate, up, d_act, d_gate, d_up)
//   attention_backward(q, k, v, d_out, dq, dk, dv)        dense causal, sequences from 0
//   moe_down_combine_backward(l, m, dy, d_act, d_weight)   d_act = (w·dy)·W_down per segment,
//                                   d_weight[j] = dy[t]·out[j] (expert grads when full-param)
//   moe_gate_up_backward(l, m, d_gate, d_up, d_xn)   d_xn = Σ_assignments (d_gate·W_g + d_up·W_u)
//                                   (overwrites d_xn)
//   moe_route_backward(l, xn, m, d_weight, d_xn)     through renormalisation and softmax (or
//                                   sigmoid) to the router logits; d_xn += d_logits·W_router
// Multi-head Latent Attention (an Ops with `static constexpr bool kMla = true`; the graph
// instantiates these calls only then; `a` is LayerActivations-shaped with an `mla` member):
//   copy_cols(src, c0, n, dst)      dst = src[:, c0 : c0+n]
//   put_cols(src, dst, c0)          dst[:, c0 : c0+src.cols] = src
//   mla_rope(x, heads, inverse)     RoPE on the last qk_rope_head_dim columns of each of the
//                                   row's `heads` equal parts (rope_interleave pairs), times
//                                   YaRN's attention factor
//   mla_kv_write(l, ckv, k_pe)      the rows [ckv, k_pe] into layer l's latent cache
//   mla_attention(l, a)             a.attn from a.q over the latent cache, in the absorbed form:
//                                   q_nope·W_UK per head, scores over [ckv, k_pe], W_UV on the
//                                   attended latent (LoRA on kv_b_proj included)
//   mla_attention_dense(l, a)       a.attn from a.q, a.mla.kv, a.mla.k_pe, uncompressed (new
//                                   rows only, sequences from position 0); keeps q_p/k_p/v_p
//   mla_attention_dense_backward(a, d_attn, dq, dkv, dk_pe)   through the uncompressed
//                                   attention: dq [T, q_dim], dkv [T, H·(dn+dv)], dk_pe [T, dr]
//   embedding_backward(dx)          scatter-add into the embedding's gradient (full-parameter
//                                   mode; a no-op when layer_grads is always null)

#include <cstdint>

#include "spindle/engine/lora.h"
#include "spindle/engine/model_config.h"

namespace spindle::engine {

// One output of a projection group: y = x·Wᵀ + LoRA_target(x).
template <class W, class A>
struct Projection {
  LoraTarget target;
  const W* w;
  A* y;
};

template <class Ops>
class DecoderGraph {
 public:
  using Act = typename Ops::Act;
  using Proj = Projection<Act, Act>;

  explicit DecoderGraph(Ops& ops) : ops_(ops), c_(ops.config()) {}

  // Whether the backend has latent attention's ops (the CPU engine's); others refuse MLA bases
  // at load, so the branches are not instantiated for them.
  static constexpr bool kMla = requires { Ops::kMla; };

  // The forward of the batch laid out in ops.state() (tokens, positions, cache slots, segments):
  // every layer, the final norm over the logits rows (each sequence's last row when
  // `last_token`), then the logits unless `hidden_only`. With keep_activations every layer's
  // intermediates stay in state().layers[l]; else one LayerActivations is reused.
  void forward(bool keep_activations, bool last_token, bool hidden_only) {
    auto& st = ops_.state();
    st.keep_activations = keep_activations;
    Act& x = st.x_last;  // the residual stream; after the loop, the last layer's output
    ops_.shape(x, st.T, c_.dim);
    ops_.embed(x);
    st.layers.resize(keep_activations ? size_t(c_.n_layers) : 1);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      auto& a = st.layers[keep_activations ? size_t(l) : 0];
      if (keep_activations) ops_.copy(x, a.x_in);
      attention_block(l, a, x);
      if (keep_activations) ops_.copy(x, a.x_mid);
      mlp_block(l, a, x);
    }
    const Act* src = &x;
    if (last_token) {
      ops_.gather_last_rows(x, st.x_gather);
      src = &st.x_gather;
    }
    ops_.rmsnorm(*src, ops_.final_norm(), st.x_final, &st.inv_rms_final);
    if (!hidden_only) ops_.logits();
  }

  // Backward of a keep_activations, all-token forward over sequences starting at position 0,
  // from d_hidden = ∂loss/∂x_final [T, dim] through every layer (LoRA gradients, and base
  // gradients where ops.layer_grads is non-null) to the embedding.
  void backward(const Act& d_hidden) {
    auto& st = ops_.state();
    ops_.begin_backward();
    auto& sc = ops_.scratch();
    const int64_t T = st.T;
    ops_.shape(sc.dx, T, c_.dim);
    ops_.shape(sc.d_xn, T, c_.dim);
    ops_.shape(sc.d_attn, T, c_.attn_out_dim());
    ops_.shape(sc.dq, T, c_.q_dim());
    if (!c_.mla_attention()) {
      ops_.shape(sc.dk, T, c_.kv_dim());
      ops_.shape(sc.dv, T, c_.kv_dim());
    }
    Act& dx = sc.dx;
    ops_.rmsnorm_backward(st.x_last, ops_.final_norm(), st.inv_rms_final, d_hidden, dx, 0.0f,
                          ops_.final_norm_grad());
    for (int64_t l = c_.n_layers - 1; l >= 0; --l) {
      const auto& w = ops_.layer(l);
      auto& a = st.layers[size_t(l)];
      auto* g = ops_.layer_grads(l);

      if (c_.sparse_layer(l)) {
        // Routed experts: x_out = x_mid + Σ_k w_k(xn)·expert_k(xn) (+ shared(xn)),
        // xn = ffn_norm(x_mid); the top-k choice is a constant, the weights are differentiable.
        const int64_t rows = T * c_.moe.top_k, ed = c_.moe.expert_dim;
        ops_.shape(sc.moe_d_act, rows, ed);
        ops_.shape(sc.moe_d_gate, rows, ed);
        ops_.shape(sc.moe_d_up, rows, ed);
        ops_.shape_stat(sc.moe_d_weight, rows);
        ops_.moe_down_combine_backward(l, a.moe, dx, sc.moe_d_act, sc.moe_d_weight);
        ops_.swiglu_backward(a.moe.gate, a.moe.up, sc.moe_d_act, sc.moe_d_gate, sc.moe_d_up);
        ops_.moe_gate_up_backward(l, a.moe, sc.moe_d_gate, sc.moe_d_up, sc.d_xn);
        ops_.moe_route_backward(l, a.xn_mlp, a.moe, sc.moe_d_weight, sc.d_xn);
        if (c_.dense_mlp_dim(l) > 0) dense_mlp_backward(l, a, g, /*beta_dxn=*/1.0f);
      } else {
        dense_mlp_backward(l, a, g, /*beta_dxn=*/0.0f);
      }
      ops_.rmsnorm_backward(a.x_mid, w.ffn_norm, a.inv_rms_mlp, sc.d_xn, dx, 1.0f,
                            g ? &g->ffn_norm : nullptr);

      if constexpr (kMla) {
        if (c_.mla_attention()) {
          mla_attention_backward(l, a, g);
          ops_.rmsnorm_backward(a.x_in, w.attn_norm, a.inv_rms_attn, sc.d_xn, dx, 1.0f,
                                g ? &g->attn_norm : nullptr);
          continue;
        }
      }
      // Attention: x_mid = x_in + o(attn(rope(norm(q(xn))), rope(norm(k(xn))), v(xn))).
      ops_.project_backward(l, LoraTarget::o, a.attn, w.wo, dx, sc.d_attn, 0.0f,
                            g ? &g->wo : nullptr);
      ops_.attention_backward(a.q, a.k, a.v, sc.d_attn, sc.dq, sc.dk, sc.dv);
      ops_.rope(sc.dq, c_.n_heads, /*inverse=*/true);
      ops_.rope(sc.dk, c_.n_kv_heads, /*inverse=*/true);
      const Act* dq = &sc.dq;
      const Act* dk = &sc.dk;
      if (c_.qk_norm()) {
        // dx may not alias dy: the per-head norms' backward goes through the *_pre buffers.
        ops_.shape(sc.dq_pre, T, c_.q_dim());
        ops_.shape(sc.dk_pre, T, c_.kv_dim());
        ops_.rmsnorm_heads_backward(a.q_pre, c_.n_heads, w.q_norm, a.inv_rms_q, sc.dq, sc.dq_pre,
                                    g ? &g->q_norm : nullptr);
        ops_.rmsnorm_heads_backward(a.k_pre, c_.n_kv_heads, w.k_norm, a.inv_rms_k, sc.dk, sc.dk_pre,
                                    g ? &g->k_norm : nullptr);
        dq = &sc.dq_pre;
        dk = &sc.dk_pre;
      }
      ops_.project_backward(l, LoraTarget::q, a.xn_attn, w.wq, *dq, sc.d_xn, 0.0f,
                            g ? &g->wq : nullptr);
      ops_.project_backward(l, LoraTarget::k, a.xn_attn, w.wk, *dk, sc.d_xn, 1.0f,
                            g ? &g->wk : nullptr);
      ops_.project_backward(l, LoraTarget::v, a.xn_attn, w.wv, sc.dv, sc.d_xn, 1.0f,
                            g ? &g->wv : nullptr);
      ops_.rmsnorm_backward(a.x_in, w.attn_norm, a.inv_rms_attn, sc.d_xn, dx, 1.0f,
                            g ? &g->attn_norm : nullptr);
    }
    ops_.embedding_backward(dx);
  }

 private:
  // The dense SwiGLU's backward (a dense layer's MLP, a sparse layer's shared experts):
  // d_xn = beta·d_xn + ∂/∂xn, from dx = ∂loss/∂x_out.
  template <class A, class G>
  void dense_mlp_backward(int64_t l, A& a, G* g, float beta_dxn) {
    const auto& w = ops_.layer(l);
    auto& sc = ops_.scratch();
    const int64_t T = ops_.state().T, F = c_.dense_mlp_dim(l);
    ops_.shape(sc.d_act, T, F);
    ops_.shape(sc.d_gate, T, F);
    ops_.shape(sc.d_up, T, F);
    // MLP: x_out = x_mid + down(silu(gate(xn))·up(xn)), xn = ffn_norm(x_mid).
    ops_.project_backward(l, LoraTarget::down, a.act, w.w_down, sc.dx, sc.d_act, 0.0f,
                          g ? &g->w_down : nullptr);
    ops_.swiglu_backward(a.gate, a.up, sc.d_act, sc.d_gate, sc.d_up);
    ops_.project_backward(l, LoraTarget::gate, a.xn_mlp, w.w_gate, sc.d_gate, sc.d_xn, beta_dxn,
                          g ? &g->w_gate : nullptr);
    ops_.project_backward(l, LoraTarget::up, a.xn_mlp, w.w_up, sc.d_up, sc.d_xn, 1.0f,
                          g ? &g->w_up : nullptr);
  }

  // Latent attention's backward through the uncompressed form, from dx = ∂loss/∂x_mid to
  // sc.d_xn = ∂loss/∂xn_attn (overwritten).
  template <class A, class G>
  void mla_attention_backward(int64_t l, A& a, G* g) {
    const auto& w = ops_.layer(l);
    auto& sc = ops_.scratch();
    auto& m = a.mla;
    const MlaConfig& mc = c_.mla;
    const int64_t T = ops_.state().T, R = mc.kv_lora_rank, dr = mc.qk_rope_head_dim;
    ops_.project_backward(l, LoraTarget::o, a.attn, w.wo, sc.dx, sc.d_attn, 0.0f,
                          g ? &g->wo : nullptr);
    ops_.shape(sc.mla_dkv, T, c_.n_heads * (mc.qk_nope_head_dim + mc.v_head_dim));
    ops_.shape(sc.mla_dk_pe, T, dr);
    ops_.mla_attention_dense_backward(a, sc.d_attn, sc.dq, sc.mla_dkv, sc.mla_dk_pe);
    ops_.mla_rope(sc.dq, c_.n_heads, /*inverse=*/true);
    ops_.mla_rope(sc.mla_dk_pe, 1, /*inverse=*/true);
    // kv_lat = [c_raw, k_pe_raw]; ckv = kv_a_layernorm(c_raw); kv = kv_b(ckv).
    ops_.shape(sc.mla_dc, T, R);
    ops_.shape(sc.mla_dc_raw, T, R);
    ops_.shape(sc.mla_dkv_lat, T, R + dr);
    ops_.project_backward(l, LoraTarget::kv_b, m.ckv, w.wkv_b, sc.mla_dkv, sc.mla_dc, 0.0f,
                          g ? &g->wkv_b : nullptr);
    ops_.rmsnorm_backward(m.c_raw, w.kv_a_norm, m.inv_rms_kv, sc.mla_dc, sc.mla_dc_raw, 0.0f,
                          g ? &g->kv_a_norm : nullptr);
    ops_.put_cols(sc.mla_dc_raw, sc.mla_dkv_lat, 0);
    ops_.put_cols(sc.mla_dk_pe, sc.mla_dkv_lat, R);
    ops_.project_backward(l, LoraTarget::kv_a, a.xn_attn, w.wkv_a, sc.mla_dkv_lat, sc.d_xn, 0.0f,
                          g ? &g->wkv_a : nullptr);
    if (mc.q_lora_rank > 0) {
      ops_.shape(sc.mla_dq_lat, T, mc.q_lora_rank);
      ops_.shape(sc.mla_dq_lat_raw, T, mc.q_lora_rank);
      ops_.project_backward(l, LoraTarget::q_b, m.q_latn, w.wq_b, sc.dq, sc.mla_dq_lat, 0.0f,
                            g ? &g->wq_b : nullptr);
      ops_.rmsnorm_backward(m.q_lat, w.q_a_norm, m.inv_rms_q, sc.mla_dq_lat, sc.mla_dq_lat_raw,
                            0.0f, g ? &g->q_a_norm : nullptr);
      ops_.project_backward(l, LoraTarget::q_a, a.xn_attn, w.wq_a, sc.mla_dq_lat_raw, sc.d_xn, 1.0f,
                            g ? &g->wq_a : nullptr);
    } else {
      ops_.project_backward(l, LoraTarget::q, a.xn_attn, w.wq, sc.dq, sc.d_xn, 1.0f,
                            g ? &g->wq : nullptr);
    }
  }

  // Latent attention's forward: the query (through its latent when q_lora_rank > 0), the
  // shared KV latent and rope key (cached), then attention in the absorbed form over the cache
  // (inference) or the uncompressed form over the new rows (keep_activations, for the
  // backward). Both compute HF DeepseekV3Attention.
  template <class A>
  void mla_attention_block(int64_t l, A& a, Act& x) {
    const auto& w = ops_.layer(l);
    auto& st = ops_.state();
    auto& m = a.mla;
    const MlaConfig& mc = c_.mla;
    const int64_t R = mc.kv_lora_rank, dr = mc.qk_rope_head_dim;
    if (mc.q_lora_rank > 0) {
      ops_.project(l, a.xn_attn, {Proj{LoraTarget::q_a, &w.wq_a, &m.q_lat}});
      ops_.rmsnorm(m.q_lat, w.q_a_norm, m.q_latn, &m.inv_rms_q);
      ops_.project(l, m.q_latn, {Proj{LoraTarget::q_b, &w.wq_b, &a.q}});
    } else {
      ops_.project(l, a.xn_attn, {Proj{LoraTarget::q, &w.wq, &a.q}});
    }
    ops_.project(l, a.xn_attn, {Proj{LoraTarget::kv_a, &w.wkv_a, &m.kv_lat}});
    ops_.copy_cols(m.kv_lat, 0, R, m.c_raw);
    ops_.copy_cols(m.kv_lat, R, dr, m.k_pe);
    ops_.rmsnorm(m.c_raw, w.kv_a_norm, m.ckv, &m.inv_rms_kv);
    ops_.mla_rope(a.q, c_.n_heads, /*inverse=*/false);
    ops_.mla_rope(m.k_pe, 1, /*inverse=*/false);
    ops_.mla_kv_write(l, m.ckv, m.k_pe);
    if (st.keep_activations) {
      ops_.project(l, m.ckv, {Proj{LoraTarget::kv_b, &w.wkv_b, &m.kv}});
      ops_.mla_attention_dense(l, a);
    } else {
      ops_.mla_attention(l, a);
    }
    ops_.project_add(l, LoraTarget::o, a.attn, w.wo, x);
  }

  template <class A>
  void attention_block(int64_t l, A& a, Act& x) {
    const auto& w = ops_.layer(l);
    auto& st = ops_.state();
    ops_.rmsnorm(x, w.attn_norm, a.xn_attn, &a.inv_rms_attn);
    if constexpr (kMla) {
      if (c_.mla_attention()) return mla_attention_block(l, a, x);
    }
    ops_.project(l, a.xn_attn,
                 {Proj{LoraTarget::q, &w.wq, &a.q}, Proj{LoraTarget::k, &w.wk, &a.k},
                  Proj{LoraTarget::v, &w.wv, &a.v}});
    if (st.keep_activations || !ops_.fuse_qk_norm_rope_kv(l, a)) {
      if (c_.qk_norm()) {
        if (st.keep_activations) {
          ops_.copy(a.q, a.q_pre);
          ops_.copy(a.k, a.k_pre);
          ops_.shape_stat(a.inv_rms_q, st.T * c_.n_heads);
          ops_.shape_stat(a.inv_rms_k, st.T * c_.n_kv_heads);
        }
        ops_.rmsnorm_heads(a.q, c_.n_heads, w.q_norm, st.keep_activations ? &a.inv_rms_q : nullptr);
        ops_.rmsnorm_heads(a.k, c_.n_kv_heads, w.k_norm,
                           st.keep_activations ? &a.inv_rms_k : nullptr);
      }
      ops_.rope(a.q, c_.n_heads, /*inverse=*/false);
      ops_.rope(a.k, c_.n_kv_heads, /*inverse=*/false);
      ops_.kv_write(l, a.k, a.v);
    }
    ops_.attention(l, a.q, a.attn);
    // x += attn·Woᵀ + LoRA_o(attn)
    ops_.project_add(l, LoraTarget::o, a.attn, w.wo, x);
  }

  template <class A>
  void mlp_block(int64_t l, A& a, Act& x) {
    const auto& w = ops_.layer(l);
    ops_.rmsnorm(x, w.ffn_norm, a.xn_mlp, &a.inv_rms_mlp);
    if (c_.sparse_layer(l)) {
      ops_.moe_route(l, a.xn_mlp, a.moe);
      ops_.moe_gate_up(l, a.moe);
      ops_.swiglu(a.moe.gate, a.moe.up, a.moe.act);
      ops_.moe_down_combine(l, a.moe, x);
      if (c_.dense_mlp_dim(l) == 0) return;  // no shared experts: done
    }
    ops_.project(
        l, a.xn_mlp,
        {Proj{LoraTarget::gate, &w.w_gate, &a.gate}, Proj{LoraTarget::up, &w.w_up, &a.up}});
    ops_.swiglu(a.gate, a.up, a.act);
    ops_.project_add(l, LoraTarget::down, a.act, w.w_down, x);
  }

  Ops& ops_;
  const ModelConfig& c_;
};

}  // namespace spindle::engine
