#include "device_forward.h"

#include <algorithm>

#include "device_ops.h"
#include "spindle/engine/decoder_graph.h"
#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/cuda/lora.h"

namespace spindle::engine_cuda::internal {

using engine::LoraTarget;

template <class T>
void run_forward(ForwardContext& ctx, DeviceKvCache& cache, const DeviceForwardOptions& o) {
  DeviceOps<T> ops(ctx, cache);
  engine::DecoderGraph<DeviceOps<T>>(ops).forward(o.keep_activations,
                                                  o.logits == engine::LogitsFor::last_token,
                                                  o.logits == engine::LogitsFor::hidden_only);
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

}  // namespace spindle::engine_cuda::internal
