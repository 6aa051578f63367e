// Backward through the decoder on the device for LoRA gradients: the twin of
// engine::Model::backward (backend/engine/src/backward.cpp), same order of operations. Reads
// the activations a keep_activations forward left in DeviceForwardState; the base is read only.

#include <cmath>

#include "backward.h"
#include "spindle/core/error.h"
#include "spindle/kernels/cuda/activation.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::gpu::internal {

namespace cuda = kernels::cuda;
using engine::LoraTarget;
using kernels::Trans;

template <class T>
void project_backward(TrainContext& ctx, int64_t layer, LoraTarget target, const T* x, int64_t ld_x,
                      int64_t rows, const DeviceTensor& W, const T* dy, int64_t ld_dy,
                      const cuda::DeviceSegments& segs, bool adapted, T* dx, int64_t ld_dx,
                      float beta_dx) {
  const cudaStream_t s = ctx.model.stream();
  const int64_t k = W.cols(), n = W.rows();
  // dx[rows, k] = dy[rows, n] · W[n, k] (+ beta·dx)
  cuda::gemm<T>(ctx.model.blas(), Trans::no, Trans::no, rows, k, n, 1.0f, dy, ld_dy, W.data<T>(), k,
                beta_dx, dx, ld_dx, s);
  if (!adapted || ctx.grads == nullptr) return;
  const auto view = ctx.pool.view(layer, target);
  if (!view) return;
  TrainScratch& sc = ctx.scratch;
  const int64_t R = view->max_rank;
  if (sc.lora_h.rows() < rows || sc.lora_h.cols() != R) {
    sc.lora_h.ensure(std::max(rows, ctx.st.T), R, Precision::fp32);
    sc.lora_dh.ensure(std::max(rows, ctx.st.T), R, Precision::fp32);
  }
  float* h = sc.lora_h.data<float>();
  float* dh = sc.lora_dh.data<float>();
  cuda::lora_shrink<T>(x, ld_x, *view, segs, h, s);
  cuda::lora_expand_backward<T>(h, dy, ld_dy, /*col_offset=*/0, *view, segs, dh,
                                ctx.grads->dB(layer, target), s);
  cuda::lora_shrink_backward<T>(x, ld_x, dh, *view, segs, ctx.grads->dA(layer, target), dx, ld_dx,
                                s);
}

template <class T>
void backward_layers(TrainContext& ctx) {
  DeviceForwardState& st = ctx.st;
  TrainScratch& sc = ctx.scratch;
  const DeviceWeights& W = ctx.model.weights();
  const engine::ModelConfig& c = W.config();
  const cudaStream_t s = ctx.model.stream();
  const Precision P = precision_of<T>();
  SPINDLE_CHECK(st.keep_activations && st.all_tokens && int64_t(st.layers.size()) == c.n_layers,
                invalid_argument,
                "backward needs a forward with keep_activations and all-token rows");
  const int64_t rows = st.T, hd = c.head_dim;
  SPINDLE_CHECK(sc.d_hidden.rows() == rows && sc.d_hidden.cols() == c.dim, internal,
                "backward: d_hidden is [{}, {}], expected [{}, {}]", sc.d_hidden.rows(),
                sc.d_hidden.cols(), rows, c.dim);

  bool adapted = false;
  for (const auto& g : st.segments) adapted |= g.slot >= 0;
  const cuda::DeviceSegments segs{st.d_segments.data(), int32_t(st.segments.size()), rows};

  std::vector<kernels::DenseSeq> dense;
  int32_t max_n = 0;
  for (const auto& q : st.attn_seqs) {
    SPINDLE_CHECK(q.n_past == 0, invalid_argument,
                  "backward: training sequences must start at position 0 (one had {} cached)",
                  q.n_past);
    dense.push_back({q.row_begin, q.n_new});
    max_n = std::max(max_n, q.n_new);
  }
  upload_table(dense, sc.dense_seqs, s);

  sc.dx.ensure(rows, c.dim, P);
  sc.d_xn.ensure(rows, c.dim, P);
  sc.d_act.ensure(rows, c.hidden_dim, P);
  sc.d_gate.ensure(rows, c.hidden_dim, P);
  sc.d_up.ensure(rows, c.hidden_dim, P);
  sc.d_attn.ensure(rows, c.q_dim(), P);
  sc.dq.ensure(rows, c.q_dim(), P);
  sc.dk.ensure(rows, c.kv_dim(), P);
  sc.dv.ensure(rows, c.kv_dim(), P);
  T* dx = sc.dx.data<T>();
  T* d_xn = sc.d_xn.data<T>();
  T* d_act = sc.d_act.data<T>();
  T* d_gate = sc.d_gate.data<T>();
  T* d_up = sc.d_up.data<T>();
  T* d_attn = sc.d_attn.data<T>();

  cuda::rmsnorm_backward<T>(st.x_last.data<T>(), c.dim, W.final_norm().data<float>(),
                            st.inv_rms_final.data<float>(), sc.d_hidden.data<T>(), c.dim, dx, c.dim,
                            rows, c.dim, /*beta_dx=*/0.0f, s);

  const float* inv_freq = W.rope_inv_freq().data<float>();
  auto proj = [&](int64_t l, LoraTarget t, const DeviceTensor& x, const DeviceTensor& w,
                  const T* dy, T* d_in, float beta) {
    project_backward<T>(ctx, l, t, x.data<T>(), x.cols(), rows, w, dy, w.rows(), segs, adapted,
                        d_in, w.cols(), beta);
  };

  for (int64_t l = c.n_layers - 1; l >= 0; --l) {
    const DeviceLayerWeights& w = W.layer(l);
    DeviceLayerActivations& a = st.layers[size_t(l)];

    // MLP: x_out = x_mid + down(silu(gate(xn))·up(xn)), xn = ffn_norm(x_mid).
    proj(l, LoraTarget::down, a.act, w.w_down, dx, d_act, 0.0f);
    cuda::swiglu_backward<T>(a.gate.data<T>(), a.up.data<T>(), d_act, d_gate, d_up,
                             rows * c.hidden_dim, s);
    proj(l, LoraTarget::gate, a.xn_mlp, w.w_gate, d_gate, d_xn, 0.0f);
    proj(l, LoraTarget::up, a.xn_mlp, w.w_up, d_up, d_xn, 1.0f);
    cuda::rmsnorm_backward<T>(a.x_mid.data<T>(), c.dim, w.ffn_norm.data<float>(),
                              a.inv_rms_mlp.data<float>(), d_xn, c.dim, dx, c.dim, rows, c.dim,
                              /*beta_dx=*/1.0f, s);

    // Attention: x_mid = x_in + o(attn(rope(norm(q(xn))), rope(norm(k(xn))), v(xn))).
    proj(l, LoraTarget::o, a.attn, w.wo, dx, d_attn, 0.0f);
    cuda::attention_backward<T>(a.q.data<T>(), a.k.data<T>(), a.v.data<T>(), d_attn,
                                sc.dq.data<T>(), sc.dk.data<T>(), sc.dv.data<T>(), c.n_heads,
                                c.n_kv_heads, hd, sc.dense_seqs.data(), int32_t(dense.size()),
                                max_n, 1.0f / std::sqrt(float(hd)), s);
    cuda::rope<T>(sc.dq.data<T>(), c.q_dim(), rows, c.n_heads, hd, st.d_positions.data(), inv_freq,
                  kernels::RopeStyle::half, /*inverse=*/true, s);
    cuda::rope<T>(sc.dk.data<T>(), c.kv_dim(), rows, c.n_kv_heads, hd, st.d_positions.data(),
                  inv_freq, kernels::RopeStyle::half, /*inverse=*/true, s);
    const T* dq = sc.dq.data<T>();
    const T* dk = sc.dk.data<T>();
    if (c.arch == engine::Arch::qwen3) {
      // dx may not alias dy: the per-head norms' backward goes through the *_pre buffers.
      sc.dq_pre.ensure(rows, c.q_dim(), P);
      sc.dk_pre.ensure(rows, c.kv_dim(), P);
      cuda::rmsnorm_backward<T>(a.q_pre.data<T>(), hd, w.q_norm.data<float>(),
                                a.inv_rms_q.data<float>(), dq, hd, sc.dq_pre.data<T>(), hd,
                                rows * c.n_heads, hd, 0.0f, s);
      cuda::rmsnorm_backward<T>(a.k_pre.data<T>(), hd, w.k_norm.data<float>(),
                                a.inv_rms_k.data<float>(), dk, hd, sc.dk_pre.data<T>(), hd,
                                rows * c.n_kv_heads, hd, 0.0f, s);
      dq = sc.dq_pre.data<T>();
      dk = sc.dk_pre.data<T>();
    }
    proj(l, LoraTarget::q, a.xn_attn, w.wq, dq, d_xn, 0.0f);
    proj(l, LoraTarget::k, a.xn_attn, w.wk, dk, d_xn, 1.0f);
    proj(l, LoraTarget::v, a.xn_attn, w.wv, sc.dv.data<T>(), d_xn, 1.0f);
    cuda::rmsnorm_backward<T>(a.x_in.data<T>(), c.dim, w.attn_norm.data<float>(),
                              a.inv_rms_attn.data<float>(), d_xn, c.dim, dx, c.dim, rows, c.dim,
                              /*beta_dx=*/1.0f, s);
  }
  // No embedding backward: the GPU trains adapters only (the base is frozen).
}

#define SPINDLE_GPU_BACKWARD_INSTANTIATE(T)                                                 \
  template void project_backward<T>(TrainContext&, int64_t, LoraTarget, const T*, int64_t,  \
                                    int64_t, const DeviceTensor&, const T*, int64_t,        \
                                    const cuda::DeviceSegments&, bool, T*, int64_t, float); \
  template void backward_layers<T>(TrainContext&);

SPINDLE_GPU_BACKWARD_INSTANTIATE(float)
SPINDLE_GPU_BACKWARD_INSTANTIATE(cuda::bf16)
#undef SPINDLE_GPU_BACKWARD_INSTANTIATE

}  // namespace spindle::gpu::internal
