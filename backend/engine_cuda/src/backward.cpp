// Backward through the decoder on the device for LoRA gradients: engine::DecoderGraph's
// backward over DeviceOps (device_ops.h), and the projection backward it and the unembedding's
// chunks use. Reads the activations a keep_activations forward left in DeviceForwardState; the
// base is read only.

#include <cmath>
#include <optional>

#include "backward.h"
#include "device_ops.h"
#include "spindle/core/error.h"
#include "spindle/kernels/cuda/activation.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::engine_cuda::internal {

namespace cuda = kernels::cuda;
using engine::LoraTarget;
using kernels::Trans;

template <class T>
void linear_backward(TrainContext& ctx, const T* W, int64_t n, int64_t k,
                     const LoraGradTarget* lora, const T* x, int64_t ld_x, int64_t rows,
                     const T* dy, int64_t ld_dy, const cuda::DeviceSegments& segs, T* dx,
                     int64_t ld_dx, float beta_dx) {
  const cudaStream_t s = ctx.model.stream();
  // dx[rows, k] = dy[rows, n] · W[n, k] (+ beta·dx)
  cuda::gemm<T>(ctx.model.blas(), Trans::no, Trans::no, rows, k, n, 1.0f, dy, ld_dy, W, k, beta_dx,
                dx, ld_dx, s);
  if (lora == nullptr) return;
  const cuda::DeviceLoraSlots& view = lora->view;
  TrainScratch& sc = ctx.scratch;
  const int64_t R = view.max_rank;
  if (sc.lora_h.rows() < rows || sc.lora_h.cols() != R) {
    sc.lora_h.ensure(std::max(rows, ctx.st.T), R, Precision::fp32);
    sc.lora_dh.ensure(std::max(rows, ctx.st.T), R, Precision::fp32);
  }
  float* h = sc.lora_h.data<float>();
  float* dh = sc.lora_dh.data<float>();
  const size_t scratch_bytes = cuda::lora_backward_scratch_bytes<T>(view, segs, /*with_blas=*/true);
  ensure_capacity(sc.kernel_scratch, scratch_bytes);
  void* scratch = sc.kernel_scratch.data();
  cuda::lora_shrink<T>(x, ld_x, view, segs, h, s);
  cuda::Blas* blas = &ctx.model.blas();  // tall calls with host mirrors: cuBLAS GEMMs
  cuda::lora_expand_backward<T>(h, dy, ld_dy, /*col_offset=*/0, view, segs, dh, lora->dB, scratch,
                                scratch_bytes, s, blas);
  cuda::lora_shrink_backward<T>(x, ld_x, dh, view, segs, lora->dA, dx, ld_dx, scratch,
                                scratch_bytes, s, blas);
}

template <class T>
void project_backward(TrainContext& ctx, int64_t layer, LoraTarget target, const T* x, int64_t ld_x,
                      int64_t rows, const DeviceTensor& W, const T* dy, int64_t ld_dy,
                      const cuda::DeviceSegments& segs, bool adapted, T* dx, int64_t ld_dx,
                      float beta_dx) {
  std::optional<LoraGradTarget> lora;
  if (adapted && ctx.grads != nullptr) {
    if (const auto view = ctx.pool.view(layer, target)) {
      lora = LoraGradTarget{*view, ctx.grads->dA(layer, target), ctx.grads->dB(layer, target)};
    }
  }
  linear_backward<T>(ctx, W.data<T>(), W.rows(), W.cols(), lora ? &*lora : nullptr, x, ld_x, rows,
                     dy, ld_dy, segs, dx, ld_dx, beta_dx);
}

template <class T>
void backward_layers(TrainContext& ctx) {
  DeviceForwardState& st = ctx.st;
  const engine::ModelConfig& c = ctx.model.weights().config();
  SPINDLE_CHECK(st.keep_activations && st.all_tokens && int64_t(st.layers.size()) == c.n_layers,
                invalid_argument,
                "backward needs a forward with keep_activations and all-token rows");
  const DeviceTensor& d_hidden = ctx.scratch.d_hidden;
  SPINDLE_CHECK(d_hidden.rows() == st.T && d_hidden.cols() == c.dim, internal,
                "backward: d_hidden is [{}, {}], expected [{}, {}]", d_hidden.rows(),
                d_hidden.cols(), st.T, c.dim);
  for (const auto& q : st.attn_seqs) {
    SPINDLE_CHECK(q.n_past == 0, invalid_argument,
                  "backward: training sequences must start at position 0 (one had {} cached)",
                  q.n_past);
  }
  DeviceOps<T> ops(ctx);
  engine::DecoderGraph<DeviceOps<T>>(ops).backward(d_hidden);
}

#define SPINDLE_GPU_BACKWARD_INSTANTIATE(T)                                                 \
  template void linear_backward<T>(TrainContext&, const T*, int64_t, int64_t,               \
                                   const LoraGradTarget*, const T*, int64_t, int64_t,       \
                                   const T*, int64_t, const cuda::DeviceSegments&, T*,      \
                                   int64_t, float);                                         \
  template void project_backward<T>(TrainContext&, int64_t, LoraTarget, const T*, int64_t,  \
                                    int64_t, const DeviceTensor&, const T*, int64_t,        \
                                    const cuda::DeviceSegments&, bool, T*, int64_t, float); \
  template void backward_layers<T>(TrainContext&);

SPINDLE_GPU_BACKWARD_INSTANTIATE(float)
SPINDLE_GPU_BACKWARD_INSTANTIATE(cuda::bf16)
#undef SPINDLE_GPU_BACKWARD_INSTANTIATE

}  // namespace spindle::engine_cuda::internal
