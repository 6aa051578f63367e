#include "spindle/engine/trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include <fmt/ranges.h>

#include "spindle/core/error.h"

namespace spindle::engine {
namespace {

constexpr int64_t kTrainBlock = 16;

void zero(LoraWeights& w) {
  for_each_lora_tensor(w, [](const std::string&, Tensor& t) { t.fill(0.0f); });
}

// An adapter-shaped LoraWeights of zeros (gradient sums).
LoraWeights zeros_like(const LoraWeights& w) {
  LoraWeights z = w.clone();
  zero(z);
  return z;
}

// Forward over the batch (fresh sequences, all tokens, activations kept); rows are grouped by
// slot so SGMV segments are long. Returns each datum's first row.
std::vector<int64_t> forward_batch(const Model& model, std::span<const TrainDatum> batch,
                                   const LoraSlotPool* pool, bool use_slots, ForwardState& st) {
  std::vector<size_t> order(batch.size());
  std::iota(order.begin(), order.end(), 0);
  if (use_slots) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return batch[a].slot < batch[b].slot; });
  }
  int64_t blocks = 0;
  for (const auto& d : batch) blocks += (int64_t(d.input_tokens.size()) + kTrainBlock - 1) / kTrainBlock;
  KvCache cache(model.config(), {.block_size = kTrainBlock, .n_blocks = blocks, .max_seqs = 1});
  std::vector<BatchSequence> seqs;
  std::vector<int64_t> first_row(batch.size());
  int64_t row = 0;
  for (size_t o : order) {
    seqs.push_back({cache.create(), batch[o].input_tokens, use_slots ? batch[o].slot : -1});
    first_row[o] = row;
    row += int64_t(batch[o].input_tokens.size());
  }
  model.forward(seqs, cache, pool, st,
                {.logits = LogitsFor::hidden_only, .keep_activations = true});
  return first_row;
}

// Rows of the logits are scored in chunks of this many (the [T, vocab] logits and their
// gradient never exist at once: 64 rows of a 151936-token vocabulary are 39 MB).
constexpr int64_t kUnembedChunk = 64;

// Loss, per-token logprobs and (if dlogits) ∂loss/∂logits = g·(onehot(y) − softmax) for the
// logits rows [r0, r0 + logits.dim(0)), with g = ∂loss/∂log p (∂log p_y/∂z_j = [j = y] − p_j).
// where[r] = (datum, position) of row r.
void score_rows(const Tensor& logits, int64_t r0,
                const std::vector<std::pair<int32_t, int32_t>>& where,
                std::span<const TrainDatum> batch, LossFn fn, const LossConfig& config,
                ForwardBackwardOutput& out, Tensor* dlogits) {
  const int64_t V = logits.dim(1);
  for (int64_t k = 0; k < logits.dim(0); ++k) {
    const auto [i, t] = where[size_t(r0 + k)];
    const TrainDatum& d = batch[size_t(i)];
    const float* z = logits.row(k);
    const float m = *std::max_element(z, z + V);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(z[j] - m));
    const double lse = double(m) + std::log(sum);
    const int32_t y = d.target_tokens[size_t(t)];
    const float logp = float(double(z[y]) - lse);
    out.logprobs[size_t(i)][size_t(t)] = logp;
    const float w = d.weights.empty() ? 1.0f : d.weights[size_t(t)];
    const float q = d.logprobs.empty() ? 0.0f : d.logprobs[size_t(t)];
    const float a = d.advantages.empty() ? 0.0f : d.advantages[size_t(t)];
    const TokenLoss tl = token_loss(fn, config, logp, w, q, a);
    if (w != 0.0f) {
      out.metrics.loss += tl.loss;
      out.metrics.n_tokens += 1;
      out.metrics.n_clipped += tl.clipped ? 1 : 0;
    }
    if (dlogits) {
      float* g = dlogits->row(k);
      if (tl.dloss_dlogp == 0.0f) {
        std::fill(g, g + V, 0.0f);
        continue;
      }
      for (int64_t j = 0; j < V; ++j) g[j] = float(-tl.dloss_dlogp * std::exp(double(z[j]) - lse));
      g[y] += tl.dloss_dlogp;
    }
  }
}

// Scores a hidden_only forward in row chunks; with `backward`, also fills d_hidden
// (∂loss/∂x_final) through the unembedding's backward, chunk by chunk.
ForwardBackwardOutput score_chunked(const Model& model, ForwardState& st, const LoraSlotPool* pool,
                                    std::span<const TrainDatum> batch,
                                    const std::vector<int64_t>& first_row, LossFn fn,
                                    const LossConfig& config, const BackwardOptions* backward,
                                    Tensor& d_hidden) {
  std::vector<std::pair<int32_t, int32_t>> where(size_t(st.T));
  ForwardBackwardOutput out;
  out.logprobs.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    out.logprobs[i].assign(batch[i].target_tokens.size(), 0.0f);
    for (size_t t = 0; t < batch[i].target_tokens.size(); ++t)
      where[size_t(first_row[i]) + t] = {int32_t(i), int32_t(t)};
  }
  if (backward) d_hidden = Tensor({st.T, model.config().dim});
  Tensor logits, dlogits;
  for (int64_t r0 = 0; r0 < st.T; r0 += kUnembedChunk) {
    const int64_t r1 = std::min(st.T, r0 + kUnembedChunk);
    model.unembed(st, pool, r0, r1, logits);
    if (backward && dlogits.shape() != logits.shape()) dlogits = Tensor(logits.shape());
    score_rows(logits, r0, where, batch, fn, config, out, backward ? &dlogits : nullptr);
    if (backward) model.unembed_backward(st, pool, *backward, r0, r1, dlogits, d_hidden);
  }
  return out;
}

}  // namespace

void validate_lora_optimizer(const AdamW& optimizer, const LoraWeights& adapter,
                             const std::string& source) {
  const auto& moments = optimizer.moments();
  if (moments.empty()) return;
  std::set<std::string> names;
  for_each_lora_tensor(adapter, [&](const std::string& name, const Tensor& param) {
    const auto it = moments.find(name);
    SPINDLE_CHECK(it != moments.end(), invalid_argument,
                  "{}: the optimizer state has no moments for '{}' (it belongs to another "
                  "adapter)",
                  source, name);
    SPINDLE_CHECK(it->second.first.shape() == param.shape(), invalid_argument,
                  "{}: optimizer moments of '{}' are shaped [{}], the adapter's tensor [{}]",
                  source, name, fmt::join(it->second.first.shape(), ", "),
                  fmt::join(param.shape(), ", "));
    names.insert(name);
  });
  for (const auto& [name, mv] : moments) {
    SPINDLE_CHECK(names.count(name) != 0, invalid_argument,
                  "{}: the optimizer state has moments for '{}', which the adapter does not adapt",
                  source, name);
  }
}

void validate_train_batch(std::span<const TrainDatum> batch, LossFn fn, const LossConfig& config,
                          const ModelConfig& mc) {
  SPINDLE_CHECK(!batch.empty(), invalid_argument, "training batch is empty");
  config.validate();
  for (size_t i = 0; i < batch.size(); ++i) {
    const TrainDatum& d = batch[i];
    SPINDLE_CHECK(!d.input_tokens.empty(), invalid_argument, "datum {}: no input tokens", i);
    SPINDLE_CHECK(d.target_tokens.size() == d.input_tokens.size(), invalid_argument,
                  "datum {}: {} target tokens for {} input tokens (must be equal)", i,
                  d.target_tokens.size(), d.input_tokens.size());
    for (int32_t t : d.target_tokens) {
      SPINDLE_CHECK(t >= 0 && t < mc.vocab_size, invalid_argument,
                    "datum {}: target token {} outside vocab [0, {})", i, t, mc.vocab_size);
    }
    validate_loss_inputs(fn, {d.target_tokens, d.weights, d.logprobs, d.advantages}, i);
  }
}

LoraWeights init_lora(const ModelConfig& config, int64_t rank, float alpha,
                      std::span<const LoraTarget> targets, uint64_t seed, bool use_rslora) {
  SPINDLE_CHECK(rank >= 1 && rank <= 128, invalid_argument, "LoRA rank must be in [1, 128], got {}",
                rank);
  SPINDLE_CHECK(!targets.empty(), invalid_argument, "LoRA needs at least one target module");
  LoraWeights w;
  w.rank = rank;
  w.alpha = alpha;
  w.use_rslora = use_rslora;
  w.modules.resize(size_t(config.n_layers));
  std::mt19937_64 rng(seed);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (LoraTarget t : targets) {
      if (lora_experts_exist(config, l, t)) {
        // Every expert as PEFT initialises a module: A ~ U(±1/√d_in), B = 0.
        if (w.experts.empty()) w.experts.resize(size_t(config.n_layers));
        const auto [d_in, d_out] = lora_expert_dims(config, t);
        const float bound = 1.0f / std::sqrt(float(d_in));
        std::uniform_real_distribution<float> u(-bound, bound);
        ExpertLoraPair& p = w.experts[size_t(l)][size_t(expert_proj(t))];
        p.A = Tensor({config.moe.n_experts, rank, d_in});
        for (float& x : p.A.span()) x = u(rng);
        p.B = Tensor::zeros({config.moe.n_experts, d_out, rank});
      }
      // A sparse layer's shared experts (DeepSeek) take the dense module of the same target.
      if (!lora_module_exists(config, l, t)) continue;
      const auto [d_in, d_out] = lora_target_dims(config, l, t);
      const float bound = 1.0f / std::sqrt(float(d_in));
      std::uniform_real_distribution<float> u(-bound, bound);
      LoraPair& p = w.modules[size_t(l)][size_t(t)];
      p.A = Tensor({rank, d_in});
      for (float& x : p.A.span()) x = u(rng);
      p.B = Tensor::zeros({d_out, rank});
    }
  }
  return w;
}

LoraTrainer::LoraTrainer(const Model& model, LoraSlotPool& pool)
    : model_(model), pool_(pool), lora_grads_(pool) {}

LoraTrainer::State& LoraTrainer::state(int32_t slot) {
  const auto it = states_.find(slot);
  SPINDLE_CHECK(it != states_.end(), invalid_argument, "slot {} has no adapter being trained",
                slot);
  return it->second;
}

const LoraTrainer::State& LoraTrainer::state(int32_t slot) const {
  return const_cast<LoraTrainer*>(this)->state(slot);
}

void LoraTrainer::attach(int32_t slot, LoraWeights weights, AdamW optimizer) {
  validate_lora_optimizer(optimizer, weights, "attach");
  pool_.load(slot, weights);  // validates shapes, rank and targets
  State s{std::make_shared<LoraWeights>(std::move(weights)), false, {}, std::move(optimizer)};
  s.grads = zeros_like(*s.weights);
  LoraWeights discard = zeros_like(*s.weights);
  lora_grads_.take(slot, discard);  // drop stale sums a previous occupant left
  states_[slot] = std::move(s);
}

void LoraTrainer::detach(int32_t slot) { states_.erase(slot); }

const LoraWeights& LoraTrainer::weights(int32_t slot) const { return *state(slot).weights; }

std::shared_ptr<const LoraWeights> LoraTrainer::share_weights(int32_t slot) {
  State& s = state(slot);
  s.weights_shared = true;
  return s.weights;
}
const AdamW& LoraTrainer::optimizer(int32_t slot) const { return state(slot).adam; }
const LoraWeights& LoraTrainer::grads(int32_t slot) const { return state(slot).grads; }

ForwardBackwardOutput LoraTrainer::run(std::span<const TrainDatum> batch, LossFn fn,
                                       const LossConfig& config, bool backward) {
  validate_train_batch(batch, fn, config, model_.config());
  for (size_t i = 0; i < batch.size(); ++i) {
    SPINDLE_CHECK(attached(batch[i].slot), invalid_argument,
                  "datum {}: slot {} has no adapter being trained", i, batch[i].slot);
  }
  const auto first_row = forward_batch(model_, batch, &pool_, /*use_slots=*/true, fwd_);
  const BackwardOptions opts{.lora_grads = &lora_grads_};
  auto out = score_chunked(model_, fwd_, &pool_, batch, first_row, fn, config,
                           backward ? &opts : nullptr, d_hidden_);
  const MoeAuxLoss aux = moe_aux_loss(model_.config(), fwd_);  // per policy (slot)
  out.metrics.loss += aux.value;
  if (!backward) return out;
  model_.backward(fwd_, &pool_,
                  {.d_hidden = &d_hidden_, .lora_grads = &lora_grads_, .moe_aux = &aux});
  for (const auto& d : batch) {
    State& s = state(d.slot);
    lora_grads_.take(d.slot, s.grads);  // a slot seen twice adds zeros the second time
  }
  return out;
}

ForwardBackwardOutput LoraTrainer::forward_backward(std::span<const TrainDatum> batch, LossFn fn,
                                                    const LossConfig& config) {
  return run(batch, fn, config, /*backward=*/true);
}

ForwardBackwardOutput LoraTrainer::forward(std::span<const TrainDatum> batch, LossFn fn,
                                           const LossConfig& config) {
  return run(batch, fn, config, /*backward=*/false);
}

OptimStepResult LoraTrainer::optim_step(int32_t slot, const AdamParams& params) {
  State& s = state(slot);
  if (s.weights_shared) {  // a snapshot may still read them: step a copy
    s.weights = std::make_shared<LoraWeights>(s.weights->clone());
    s.weights_shared = false;
  }
  std::vector<ParamRef> refs;
  for_each_lora_tensor(*s.weights, [&](const std::string& name, Tensor& t) {
    refs.push_back({name, &t, nullptr});
  });
  size_t i = 0;
  for_each_lora_tensor(s.grads, [&](const std::string&, Tensor& g) { refs.at(i++).grad = &g; });
  const OptimStepResult r = s.adam.step(refs, params);
  zero(s.grads);
  pool_.load(slot, *s.weights);
  return r;
}

void LoraTrainer::reduce_gradients(int32_t slot, AllReduce& group) {
  State& s = state(slot);
  SPINDLE_CHECK(group.memory() == AllReduce::Memory::host, unsupported,
                "data-parallel group '{}' sums device memory; the CPU engine's gradients are in "
                "host memory",
                group.group());
  std::vector<std::span<float>> buffers;
  for_each_lora_tensor(s.grads, [&](const std::string&, Tensor& g) {
    buffers.emplace_back(g.data(), size_t(g.numel()));
  });
  group.sum(buffers);
}

FullTrainer::FullTrainer(const Model& model, ModelWeights& weights)
    : model_(model), weights_(weights) {
  SPINDLE_CHECK(&model.weights() == &weights, invalid_argument,
                "FullTrainer: the model must be built on the weights being trained");
  grads_.config = weights.config;
  grads_.layers.resize(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    grads_.layers[l].experts.resize(weights.layers[l].experts.size());
  }
  // A zero gradient for every tensor of the architecture (weights.h's one list).
  for_each_hf_tensor_shape(
      grads_, [](const std::string&, Tensor& g, const Shape& shape) { g = Tensor::zeros(shape); });
}

ForwardBackwardOutput FullTrainer::forward_backward(std::span<const TrainDatum> batch, LossFn fn,
                                                    const LossConfig& config) {
  validate_train_batch(batch, fn, config, model_.config());
  const auto first_row = forward_batch(model_, batch, nullptr, /*use_slots=*/false, fwd_);
  const BackwardOptions opts{.base_grads = &grads_};
  auto out = score_chunked(model_, fwd_, nullptr, batch, first_row, fn, config, &opts, d_hidden_);
  const MoeAuxLoss aux = moe_aux_loss(model_.config(), fwd_);
  out.metrics.loss += aux.value;
  model_.backward(fwd_, nullptr, {.d_hidden = &d_hidden_, .base_grads = &grads_, .moe_aux = &aux});
  return out;
}

OptimStepResult FullTrainer::optim_step(const AdamParams& params) {
  std::vector<std::pair<std::string, Tensor*>> ps;
  std::vector<Tensor*> gs;
  for_each_hf_tensor(weights_, [&](const std::string& n, Tensor& t) { ps.push_back({n, &t}); });
  for_each_hf_tensor(grads_, [&](const std::string&, Tensor& t) { gs.push_back(&t); });
  SPINDLE_ASSERT(ps.size() == gs.size());
  std::vector<ParamRef> refs;
  for (size_t i = 0; i < ps.size(); ++i) {
    // DeepSeek's e_score_correction_bias is a buffer balanced outside the gradient (and kept
    // out of weight decay): it is not a parameter.
    if (ps[i].first.ends_with("e_score_correction_bias")) continue;
    refs.push_back({ps[i].first, ps[i].second, gs[i]});
  }
  const OptimStepResult r = adam_.step(refs, params);
  for (Tensor* g : gs) g->fill(0.0f);
  return r;
}

}  // namespace spindle::engine
