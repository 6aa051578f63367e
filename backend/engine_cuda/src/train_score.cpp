// Scoring a hidden_only forward in row chunks on the device (the twin of the CPU trainer's
// score_chunked): per chunk, logits = x_final·Uᵀ (+ lm_head LoRA), log p of the targets, the
// per-token loss terms and, when training, ∂loss/∂logits in place of the logits followed by the
// unembedding's backward into d_hidden.

#include "backward.h"
#include "spindle/kernels/cuda/loss.h"

namespace spindle::engine_cuda::internal {

namespace cuda = kernels::cuda;

template <class T>
void score_chunks(TrainContext& ctx, const std::vector<ScoreChunk>& chunks,
                  const cuda::LossParams& loss) {
  DeviceForwardState& st = ctx.st;
  TrainScratch& sc = ctx.scratch;
  const engine::ModelConfig& c = ctx.model.config();
  const cudaStream_t s = ctx.model.stream();
  const int64_t V = c.vocab_size;
  const bool backward = ctx.grads != nullptr;
  if (backward) sc.d_hidden.ensure(st.T, c.dim, precision_of<T>());

  for (const ScoreChunk& ch : chunks) {
    const int64_t r0 = ch.r0, n = ch.r1 - ch.r0;
    ctx.model.unembed(st, &ctx.pool, r0, ch.r1, sc.logits);
    T* logits = sc.logits.data<T>();
    cuda::target_logprobs<T>(logits, V, n, V, sc.targets.data() + r0, sc.logp.data() + r0,
                             sc.lse.data() + r0, /*entropy=*/nullptr, s);
    cuda::token_losses(loss, sc.logp.data() + r0, sc.weight.data() + r0, sc.q.data() + r0,
                       sc.adv.data() + r0, n, sc.loss.data() + r0, sc.dlogp.data() + r0,
                       sc.clipped.data() + r0, s);
    if (!backward) continue;
    // dlogits = g·(onehot(y) − softmax), in place over the logits.
    cuda::target_logprobs_backward<T>(logits, V, n, V, sc.targets.data() + r0, sc.lse.data() + r0,
                                      sc.dlogp.data() + r0, logits, V, s);
    bool adapted = false;
    for (const auto& g : st.out_segments) {
      adapted |= g.slot >= 0 && g.row_begin < ch.r1 && g.row_end > r0;
    }
    const cuda::DeviceSegments segs{sc.chunk_segs.data() + ch.seg_offset, ch.seg_count, n,
                                    sc.host_chunk_segs.data() + ch.seg_offset};
    const T* x = st.x_final.data<T>() + r0 * c.dim;
    project_backward<T>(ctx, 0, engine::LoraTarget::lm_head, x, c.dim, n,
                        ctx.model.weights().unembedding(), logits, V, segs, adapted,
                        sc.d_hidden.data<T>() + r0 * c.dim, c.dim, /*beta_dx=*/0.0f);
  }
}

template void score_chunks<float>(TrainContext&, const std::vector<ScoreChunk>&,
                                  const cuda::LossParams&);
template void score_chunks<cuda::bf16>(TrainContext&, const std::vector<ScoreChunk>&,
                                       const cuda::LossParams&);

}  // namespace spindle::engine_cuda::internal
