#include "spindle/engine_cuda/trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "backward.h"
#include "spindle/core/error.h"

namespace spindle::engine_cuda {
namespace {

namespace cuda = kernels::cuda;
using engine::ForwardBackwardOutput;
using engine::LoraTarget;
using engine::LossFn;
using engine::TrainDatum;

constexpr int64_t kTrainBlock = 16;

// AdamW moments of one adapted module into its slot's padded device layout, the pool's own
// ([max_rank, d_in] for A, [d_out, max_rank] for B, zero beyond the rank), packed by
// engine::pack_lora_slot as the pool packs the weights. `a` and `b` are the (m, v) moments of A
// and B as engine::AdamW holds them, `blocks` of them stacked (1 for a dense module, A [r, d_in];
// n_experts for a routed-experts module, A [E, r, d_in]); mv = {m_A, v_A, m_B, v_B}, each
// `blocks` padded blocks. Waits for the copies (attach is rare, and the staging vectors die
// here).
using MomentPair = std::pair<Tensor, Tensor>;
void upload_moments(const MomentPair& a, const MomentPair& b, int64_t blocks, int64_t max_rank,
                    int64_t d_in, int64_t d_out, cuda::DeviceBuffer<float>* mv,
                    cudaStream_t stream) {
  const int64_t r = a.first.numel() / (blocks * d_in);
  std::vector<float> packed_a(size_t(blocks * max_rank * d_in));
  std::vector<float> packed_b(size_t(blocks * d_out * max_rank));
  for (int k = 0; k < 2; ++k) {  // m, then v
    const Tensor& A = k == 0 ? a.first : a.second;
    const Tensor& B = k == 0 ? b.first : b.second;
    for (int64_t e = 0; e < blocks; ++e) {
      engine::pack_lora_slot(A.data() + e * r * d_in, B.data() + e * d_out * r, r, d_in, d_out,
                             max_rank, packed_a.data() + e * max_rank * d_in,
                             packed_b.data() + e * d_out * max_rank);
    }
    cuda::check(cudaMemcpyAsync(mv[k].data(), packed_a.data(), packed_a.size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync H2D (AdamW moments of A)");
    cuda::check(cudaMemcpyAsync(mv[2 + k].data(), packed_b.data(), packed_b.size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync H2D (AdamW moments of B)");
    // The staging vectors are reused for v: the copies of m must have left them.
    cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (AdamW moments)");
  }
}

// Every expert's slot block of a routed-experts module (expert e's A block at A(e)) into an
// adapter-shaped ExpertLoraPair of rank r: A [E, r, d_in], B [E, d_out, r].
template <class APtr, class BPtr>
engine::ExpertLoraPair download_expert_pair(APtr A, BPtr B, int64_t E, int32_t slot,
                                            int64_t max_rank, int64_t r, int64_t d_in,
                                            int64_t d_out, cudaStream_t stream) {
  engine::ExpertLoraPair p{Tensor({E, r, d_in}), Tensor({E, d_out, r})};
  for (int64_t e = 0; e < E; ++e) {
    const engine::LoraPair one =
        download_slot_pair(A(e), B(e), slot, max_rank, r, d_in, d_out, stream);
    std::copy(one.A.data(), one.A.data() + one.A.numel(), p.A.data() + e * r * d_in);
    std::copy(one.B.data(), one.B.data() + one.B.numel(), p.B.data() + e * d_out * r);
  }
  return p;
}

template <class T>
void download_into(const cuda::DeviceBuffer<T>& src, std::vector<T>& dst, int64_t n,
                   cudaStream_t stream) {
  dst.resize(size_t(n));
  if (n > 0) {
    cuda::check(cudaMemcpyAsync(dst.data(), src.data(), size_t(n) * sizeof(T),
                                cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync D2H (training outputs)");
  }
}

}  // namespace

// One trained slot: the adapter's shape (its tensors live in the pool) and its AdamW state.
struct DeviceTrainer::State {
  int64_t rank = 0;
  float alpha = 0.0f;
  bool use_rslora = false;
  std::vector<std::pair<int64_t, LoraTarget>> modules;  // adapted (layer, target)
  // Adapted routed experts' (layer, gate / up / down); their moments follow the dense ones in
  // `moments`, 4 per module (m_A, v_A, m_B, v_B), each [n_experts, max_rank, d_in] (or
  // [n_experts, d_out, max_rank]), one AdamW tensor per expert block.
  std::vector<std::pair<int64_t, LoraTarget>> expert_modules;
  std::vector<cuda::DeviceBuffer<float>> moments;  // m, v per tensor
  std::vector<cuda::AdamWTensor> tensors;          // A, B per module (slot regions)
  cuda::DeviceBuffer<cuda::AdamWTensor> d_tensors;
  cuda::DeviceBuffer<unsigned char> adam_scratch;
  cuda::DeviceBuffer<float> grad_norm;
  int64_t max_count = 0;
  int64_t step = 0;
};

DeviceTrainer::DeviceTrainer(DeviceModel& model, DeviceLoraPool& pool, DeviceTrainerOptions options)
    : model_(model),
      pool_(pool),
      options_(options),
      grads_(pool),
      scratch_(std::make_unique<internal::TrainScratch>()) {
  SPINDLE_CHECK(options_.unembed_chunk_rows >= 0, invalid_argument,
                "DeviceTrainer: unembed_chunk_rows must be >= 0, got {}",
                options_.unembed_chunk_rows);
}

DeviceTrainer::~DeviceTrainer() = default;

DeviceTrainer::State& DeviceTrainer::state(int32_t slot) {
  const auto it = states_.find(slot);
  SPINDLE_CHECK(it != states_.end(), invalid_argument, "slot {} has no adapter being trained",
                slot);
  return *it->second;
}

const DeviceTrainer::State& DeviceTrainer::state(int32_t slot) const {
  return const_cast<DeviceTrainer*>(this)->state(slot);
}

void DeviceTrainer::attach(int32_t slot, const engine::LoraWeights& weights,
                           const engine::AdamW& optimizer) {
  const cudaStream_t s = model_.stream();
  const engine::ModelConfig& c = model_.weights().config();
  // As engine::moe_aux_loss: only a softmax router has the auxiliary loss (DeepSeek's sigmoid
  // router balances with its bias instead and trains here).
  SPINDLE_CHECK(!c.moe.router_aux_loss || c.moe.aux_loss_coef == 0.0f ||
                    c.moe.scoring != engine::RouterScoring::softmax,
                unsupported,
                "{}: the router's auxiliary loss (output_router_logits, router_aux_loss_coef {}) "
                "is not trained on the CUDA engine yet; train with --device cpu",
                c.name, c.moe.aux_loss_coef);
  engine::validate_lora_optimizer(optimizer, weights, "attach");
  pool_.load(slot, weights);  // validates shapes, rank and targets; queued on the loader stream
  pool_.wait_loaded(slot, s);
  grads_.zero_slot(slot, s);  // drop stale sums a previous occupant left
  auto st = std::make_unique<State>();
  st->rank = weights.rank;
  st->alpha = weights.alpha;
  st->use_rslora = weights.use_rslora;
  const int64_t R = pool_.max_rank();
  for (size_t l = 0; l < weights.modules.size(); ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      if (weights.modules[l][size_t(t)].empty()) continue;
      const auto view = pool_.view(int64_t(l), t);
      SPINDLE_ASSERT(view.has_value());  // pool_.load checked the targets
      st->modules.push_back({int64_t(l), t});
      // The slot's whole [max_rank, d_in] / [d_out, max_rank] blocks: entries beyond the rank
      // have zero gradient and zero moments, so AdamW leaves them unchanged.
      const int64_t a = R * view->d_in, b = view->d_out * R;
      for (int which = 0; which < 2; ++which) {
        const int64_t n = which == 0 ? a : b;
        float* param = const_cast<float*>(which == 0 ? view->A : view->B) + int64_t(slot) * n;
        const float* grad =
            (which == 0 ? grads_.dA(int64_t(l), t) : grads_.dB(int64_t(l), t)) + int64_t(slot) * n;
        st->moments.emplace_back(size_t(n));
        st->moments.back().zero(s);
        float* m = st->moments.back().data();
        st->moments.emplace_back(size_t(n));
        st->moments.back().zero(s);
        float* v = st->moments.back().data();
        st->tensors.push_back({param, grad, m, v, n});
        st->max_count = std::max(st->max_count, n);
      }
      if (!optimizer.moments().empty()) {  // resume: the four buffers just made
        upload_moments(optimizer.moments().at(engine::lora_param_name(int64_t(l), t, 0)),
                       optimizer.moments().at(engine::lora_param_name(int64_t(l), t, 1)), 1, R,
                       view->d_in, view->d_out, &st->moments[st->moments.size() - 4], s);
      }
    }
  }
  const int64_t E = c.moe.n_experts;
  for (size_t l = 0; l < weights.experts.size(); ++l) {
    for (LoraTarget t : engine::kExpertProjTargets) {
      if (weights.experts[l][size_t(engine::expert_proj(t))].empty()) continue;
      st->expert_modules.push_back({int64_t(l), t});
      const auto [d_in, d_out] = engine::lora_expert_dims(c, t);
      const int64_t a = R * d_in, b = d_out * R;
      for (int which = 0; which < 2; ++which) {
        const int64_t n = which == 0 ? a : b;
        float* mv[2];
        for (float*& p : mv) {
          st->moments.emplace_back(size_t(E * n));
          st->moments.back().zero(s);
          p = st->moments.back().data();
        }
        for (int64_t e = 0; e < E; ++e) {
          const auto view = pool_.expert_view(int64_t(l), t, e);
          SPINDLE_ASSERT(view.has_value());  // pool_.load checked the targets
          float* param = const_cast<float*>(which == 0 ? view->A : view->B) + int64_t(slot) * n;
          const float* grad = (which == 0 ? grads_.expert_dA(int64_t(l), t, e)
                                          : grads_.expert_dB(int64_t(l), t, e)) +
                              int64_t(slot) * n;
          st->tensors.push_back({param, grad, mv[0] + e * n, mv[1] + e * n, n});
        }
        st->max_count = std::max(st->max_count, n);
      }
      if (!optimizer.moments().empty()) {
        upload_moments(optimizer.moments().at(engine::lora_expert_param_name(int64_t(l), t, 0)),
                       optimizer.moments().at(engine::lora_expert_param_name(int64_t(l), t, 1)), E,
                       R, d_in, d_out, &st->moments[st->moments.size() - 4], s);
      }
    }
  }
  st->step = optimizer.step_count();
  upload_table(st->tensors, st->d_tensors, s);
  st->adam_scratch =
      cuda::DeviceBuffer<unsigned char>(cuda::adamw_scratch_bytes(int64_t(st->tensors.size())));
  st->grad_norm = cuda::DeviceBuffer<float>(1);
  states_[slot] = std::move(st);
}

void DeviceTrainer::detach(int32_t slot) {
  states_.erase(slot);
}

int64_t DeviceTrainer::step_count(int32_t slot) const {
  return state(slot).step;
}

std::vector<int64_t> DeviceTrainer::forward_batch(std::span<const TrainDatum> batch) {
  std::vector<size_t> order(batch.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return batch[a].slot < batch[b].slot; });
  int64_t blocks = 0;
  for (const auto& d : batch) {
    blocks += (int64_t(d.input_tokens.size()) + kTrainBlock - 1) / kTrainBlock;
  }
  if (!cache_ || cache_->n_blocks() < blocks) {
    cache_.reset();
    cache_ = std::make_unique<DeviceKvCache>(
        model_.config(), engine::KvCacheOptions{.block_size = kTrainBlock, .n_blocks = blocks},
        model_.precision());
  }
  std::vector<engine::BatchSequence> seqs;
  std::vector<int64_t> first_row(batch.size());
  int64_t row = 0;
  for (size_t o : order) {
    seqs.push_back({cache_->create(), batch[o].input_tokens, batch[o].slot});
    first_row[o] = row;
    row += int64_t(batch[o].input_tokens.size());
  }
  // The K/V written to the cache are not read again (the backward uses the dense k, v rows),
  // so the sequences go back at once; later work on the same stream overwrites them in order.
  struct Release {
    DeviceKvCache& cache;
    const std::vector<engine::BatchSequence>& seqs;
    ~Release() {
      for (const auto& q : seqs) cache.release(q.seq);
    }
  } release{*cache_, seqs};
  model_.forward(
      seqs, *cache_, &pool_, fwd_,
      {.logits = engine::LogitsFor::hidden_only, .keep_activations = true, .copy_logits = false});
  return first_row;
}

ForwardBackwardOutput DeviceTrainer::run(std::span<const TrainDatum> batch, LossFn fn,
                                         const engine::LossConfig& config, bool backward) {
  const engine::ModelConfig& c = model_.config();
  engine::validate_train_batch(batch, fn, config, c);
  for (size_t i = 0; i < batch.size(); ++i) {
    SPINDLE_CHECK(attached(batch[i].slot), invalid_argument,
                  "datum {}: slot {} has no adapter being trained", i, batch[i].slot);
  }
  const cudaStream_t s = model_.stream();
  const std::vector<int64_t> first_row = forward_batch(batch);
  const int64_t T = fwd_.T;

  // Per-row loss inputs in the forward's row order (absent fields: weight 1, q 0, A 0, as the
  // CPU trainer passes them).
  std::vector<int32_t> targets(static_cast<size_t>(T));
  std::vector<float> weight(size_t(T), 1.0f), q(size_t(T), 0.0f), adv(size_t(T), 0.0f);
  for (size_t i = 0; i < batch.size(); ++i) {
    const TrainDatum& d = batch[i];
    for (size_t t = 0; t < d.target_tokens.size(); ++t) {
      const size_t r = size_t(first_row[i]) + t;
      targets[r] = d.target_tokens[t];
      if (!d.weights.empty()) weight[r] = d.weights[t];
      if (!d.logprobs.empty()) q[r] = d.logprobs[t];
      if (!d.advantages.empty()) adv[r] = d.advantages[t];
    }
  }
  internal::TrainScratch& sc = *scratch_;
  upload_table(targets, sc.targets, s);
  upload_table(weight, sc.weight, s);
  upload_table(q, sc.q, s);
  upload_table(adv, sc.adv, s);
  for (auto* b : {&sc.logp, &sc.lse, &sc.loss, &sc.dlogp}) ensure_capacity(*b, size_t(T));
  ensure_capacity(sc.clipped, size_t(T));

  // Row chunks of the unembedding and their LoRA segments, renumbered per chunk.
  int64_t chunk = options_.unembed_chunk_rows;
  if (chunk == 0) {
    chunk =
        std::max<int64_t>(1, int64_t(options_.unembed_chunk_bytes /
                                     (size_t(c.vocab_size) * precision_bytes(model_.precision()))));
  }
  std::vector<internal::ScoreChunk> chunks;
  std::vector<kernels::LoraSegment>& chunk_segs = sc.host_chunk_segs;
  chunk_segs.clear();
  for (int64_t r0 = 0; r0 < T; r0 += chunk) {
    const int64_t r1 = std::min(T, r0 + chunk);
    internal::ScoreChunk ch{r0, r1, int32_t(chunk_segs.size()), 0};
    for (const auto& g : fwd_.out_segments) {
      const int64_t b = std::max(g.row_begin, r0), e = std::min(g.row_end, r1);
      if (b < e) chunk_segs.push_back({b - r0, e - r0, g.slot});
    }
    ch.seg_count = int32_t(chunk_segs.size()) - ch.seg_offset;
    chunks.push_back(ch);
  }
  upload_table(chunk_segs, sc.chunk_segs, s);

  const engine::LossConfig& lc = config;
  const cuda::LossParams loss{.kind = cuda::LossKind(uint8_t(fn)),
                              .clip_low = lc.clip_low_threshold,
                              .clip_high = lc.clip_high_threshold,
                              .beta = lc.beta};
  internal::TrainContext ctx{model_, pool_, fwd_, sc, backward ? &grads_ : nullptr};
  if (model_.precision() == Precision::fp32) {
    internal::score_chunks<float>(ctx, chunks, loss);
    if (backward) internal::backward_layers<float>(ctx);
  } else {
    internal::score_chunks<cuda::bf16>(ctx, chunks, loss);
    if (backward) internal::backward_layers<cuda::bf16>(ctx);
  }

  std::vector<float> logp, loss_terms;
  std::vector<uint8_t> clipped;
  download_into(sc.logp, logp, T, s);
  download_into(sc.loss, loss_terms, T, s);
  download_into(sc.clipped, clipped, T, s);
  model_.synchronize();

  ForwardBackwardOutput out;
  out.logprobs.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const size_t n = batch[i].target_tokens.size();
    out.logprobs[i].assign(logp.begin() + first_row[i], logp.begin() + first_row[i] + int64_t(n));
    for (size_t t = 0; t < n; ++t) {
      const size_t r = size_t(first_row[i]) + t;
      if (weight[r] == 0.0f) continue;
      out.metrics.loss += loss_terms[r];
      out.metrics.n_tokens += 1;
      out.metrics.n_clipped += clipped[r] ? 1 : 0;
    }
  }
  return out;
}

ForwardBackwardOutput DeviceTrainer::forward_backward(std::span<const TrainDatum> batch, LossFn fn,
                                                      const engine::LossConfig& config) {
  return run(batch, fn, config, /*backward=*/true);
}

ForwardBackwardOutput DeviceTrainer::forward(std::span<const TrainDatum> batch, LossFn fn,
                                             const engine::LossConfig& config) {
  return run(batch, fn, config, /*backward=*/false);
}

engine::OptimStepResult DeviceTrainer::optim_step(int32_t slot, const engine::AdamParams& params) {
  params.validate();
  State& st = state(slot);
  const cudaStream_t s = model_.stream();
  const cuda::AdamWHyper hyper{.learning_rate = params.learning_rate,
                               .beta1 = params.beta1,
                               .beta2 = params.beta2,
                               .eps = params.eps,
                               .weight_decay = params.weight_decay,
                               .grad_clip_norm = params.grad_clip_norm,
                               .step = st.step + 1};
  // A non-finite gradient norm makes the kernel update nothing (cuda/adamw.h); then, as the CPU
  // AdamW, the step is refused and the gradients stay.
  cuda::adamw_step(st.d_tensors.data(), int64_t(st.tensors.size()), st.max_count, hyper,
                   st.grad_norm.data(), st.adam_scratch.data(), s);
  float norm = 0.0f;
  cuda::check(cudaMemcpyAsync(&norm, st.grad_norm.data(), sizeof(float), cudaMemcpyDeviceToHost, s),
              "cudaMemcpyAsync D2H (grad norm)");
  model_.synchronize();
  SPINDLE_CHECK(std::isfinite(norm), invalid_argument,
                "optim_step: slot {} has a non-finite gradient (norm {}); nothing was updated",
                slot, norm);
  grads_.zero_slot(slot, s);
  st.step += 1;
  engine::OptimStepResult r;
  r.grad_norm = double(norm);
  r.clipped = params.grad_clip_norm > 0.0f && r.grad_norm > double(params.grad_clip_norm);
  r.step = st.step;
  return r;
}

void DeviceTrainer::reduce_gradients(int32_t slot, AllReduce& group) {
  State& st = state(slot);
  const cudaStream_t s = model_.stream();
  std::vector<std::span<float>> device;  // the slot's gradient regions, one per A and B
  for (const cuda::AdamWTensor& t : st.tensors) {
    device.emplace_back(const_cast<float*>(t.grad), size_t(t.count));
  }
  if (group.memory() == AllReduce::Memory::cuda) {
    group.sum(device, s);
    model_.synchronize();
    return;
  }
  std::vector<std::vector<float>> host(device.size());
  for (size_t i = 0; i < device.size(); ++i) {
    host[i].resize(device[i].size());
    cuda::check(cudaMemcpyAsync(host[i].data(), device[i].data(), device[i].size_bytes(),
                                cudaMemcpyDeviceToHost, s),
                "cudaMemcpyAsync D2H (gradients for a data-parallel sum)");
  }
  model_.synchronize();
  std::vector<std::span<float>> spans(host.begin(), host.end());
  group.sum(spans);
  for (size_t i = 0; i < device.size(); ++i) {
    cuda::check(cudaMemcpyAsync(device[i].data(), host[i].data(), device[i].size_bytes(),
                                cudaMemcpyHostToDevice, s),
                "cudaMemcpyAsync H2D (summed gradients)");
  }
  model_.synchronize();
}

engine::LoraWeights DeviceTrainer::download(int32_t slot, bool gradients) const {
  const State& st = state(slot);
  engine::LoraWeights w;
  w.rank = st.rank;
  w.alpha = st.alpha;
  w.use_rslora = st.use_rslora;
  w.modules.resize(size_t(model_.config().n_layers));
  for (const auto& [l, t] : st.modules) {
    const auto view = pool_.view(l, t);
    const float* A = gradients ? grads_.dA(l, t) : view->A;
    const float* B = gradients ? grads_.dB(l, t) : view->B;
    w.modules[size_t(l)][size_t(t)] = download_slot_pair(A, B, slot, view->max_rank, st.rank,
                                                         view->d_in, view->d_out, model_.stream());
  }
  const engine::ModelConfig& c = model_.config();
  if (!st.expert_modules.empty()) w.experts.resize(size_t(c.n_layers));
  for (const auto& [l, t] : st.expert_modules) {
    const auto [d_in, d_out] = engine::lora_expert_dims(c, t);
    const auto A = [&, l = l, t = t](int64_t e) -> const float* {
      return gradients ? grads_.expert_dA(l, t, e) : pool_.expert_view(l, t, e)->A;
    };
    const auto B = [&, l = l, t = t](int64_t e) -> const float* {
      return gradients ? grads_.expert_dB(l, t, e) : pool_.expert_view(l, t, e)->B;
    };
    w.experts[size_t(l)][size_t(engine::expert_proj(t))] = download_expert_pair(
        A, B, c.moe.n_experts, slot, pool_.max_rank(), st.rank, d_in, d_out, model_.stream());
  }
  return w;
}

engine::AdamW DeviceTrainer::optimizer(int32_t slot) const {
  const State& st = state(slot);
  if (st.step == 0) return engine::AdamW();  // AdamW's moments exist from the first step on
  std::map<std::string, std::pair<Tensor, Tensor>> moments;
  const int64_t R = pool_.max_rank();
  for (size_t k = 0; k < st.modules.size(); ++k) {
    const auto [l, t] = st.modules[k];
    const auto view = pool_.view(l, t);
    // moments[4k .. 4k+3] = m_A, v_A, m_B, v_B, each one slot's padded block (slot 0 layout).
    engine::LoraPair m =
        download_slot_pair(st.moments[4 * k].data(), st.moments[4 * k + 2].data(), 0, R, st.rank,
                           view->d_in, view->d_out, model_.stream());
    engine::LoraPair v =
        download_slot_pair(st.moments[4 * k + 1].data(), st.moments[4 * k + 3].data(), 0, R,
                           st.rank, view->d_in, view->d_out, model_.stream());
    moments.emplace(engine::lora_param_name(l, t, 0), std::pair{std::move(m.A), std::move(v.A)});
    moments.emplace(engine::lora_param_name(l, t, 1), std::pair{std::move(m.B), std::move(v.B)});
  }
  const engine::ModelConfig& c = model_.config();
  const int64_t E = c.moe.n_experts;
  for (size_t k = 0; k < st.expert_modules.size(); ++k) {
    const auto [l, t] = st.expert_modules[k];
    const auto [d_in, d_out] = engine::lora_expert_dims(c, t);
    // After the dense modules' 4 buffers each: m_A, v_A, m_B, v_B of this module, [E, ...]
    // blocks of one slot each (slot 0 layout).
    const size_t at = 4 * st.modules.size() + 4 * k;
    const auto block = [&](size_t i, int64_t per) {
      return [&st, i, per](int64_t e) -> const float* { return st.moments[i].data() + e * per; };
    };
    engine::ExpertLoraPair m = download_expert_pair(block(at, R * d_in), block(at + 2, d_out * R),
                                                    E, 0, R, st.rank, d_in, d_out, model_.stream());
    engine::ExpertLoraPair v =
        download_expert_pair(block(at + 1, R * d_in), block(at + 3, d_out * R), E, 0, R, st.rank,
                             d_in, d_out, model_.stream());
    moments.emplace(engine::lora_expert_param_name(l, t, 0),
                    std::pair{std::move(m.A), std::move(v.A)});
    moments.emplace(engine::lora_expert_param_name(l, t, 1),
                    std::pair{std::move(m.B), std::move(v.B)});
  }
  return engine::AdamW::restore(st.step, std::move(moments));
}

engine::LoraWeights DeviceTrainer::weights(int32_t slot) const {
  return download(slot, /*gradients=*/false);
}

engine::LoraWeights DeviceTrainer::grads(int32_t slot) const {
  return download(slot, /*gradients=*/true);
}

}  // namespace spindle::engine_cuda
