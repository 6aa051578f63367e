#include "spindle/engine/lora.h"

#include <cmath>
#include <cstring>
#include <random>

#include "spindle/core/error.h"

namespace spindle::engine {

const char* lora_target_name(LoraTarget target) {
  switch (target) {
    case LoraTarget::q: return "q_proj";
    case LoraTarget::k: return "k_proj";
    case LoraTarget::v: return "v_proj";
    case LoraTarget::o: return "o_proj";
    case LoraTarget::gate: return "gate_proj";
    case LoraTarget::up: return "up_proj";
    case LoraTarget::down: return "down_proj";
    case LoraTarget::lm_head: return "lm_head";
  }
  return "?";
}

std::optional<LoraTarget> lora_target_from_name(std::string_view name) {
  for (LoraTarget t : kAllLoraTargets) {
    std::string_view full = lora_target_name(t);
    if (name == full) return t;
    if (full.ends_with("_proj") && name == full.substr(0, full.size() - 5)) return t;
  }
  return std::nullopt;
}

std::pair<int64_t, int64_t> lora_target_dims(const ModelConfig& c, LoraTarget target) {
  switch (target) {
    case LoraTarget::q: return {c.dim, c.q_dim()};
    case LoraTarget::k:
    case LoraTarget::v: return {c.dim, c.kv_dim()};
    case LoraTarget::o: return {c.q_dim(), c.dim};
    case LoraTarget::gate:
    case LoraTarget::up: return {c.dim, c.hidden_dim};
    case LoraTarget::down: return {c.hidden_dim, c.dim};
    case LoraTarget::lm_head: return {c.dim, c.vocab_size};
  }
  return {0, 0};
}

bool lora_target_per_layer(LoraTarget target) { return target != LoraTarget::lm_head; }

std::string lora_module_key(int64_t layer, LoraTarget target) {
  if (target == LoraTarget::lm_head) return "base_model.model.lm_head";
  const bool attn = target == LoraTarget::q || target == LoraTarget::k ||
                    target == LoraTarget::v || target == LoraTarget::o;
  return fmt::format("base_model.model.model.layers.{}.{}.{}", layer, attn ? "self_attn" : "mlp",
                     lora_target_name(target));
}

float LoraWeights::scale() const {
  return use_rslora ? alpha / std::sqrt(float(rank)) : alpha / float(rank);
}

LoraWeights LoraWeights::clone() const {
  LoraWeights w;
  w.rank = rank;
  w.alpha = alpha;
  w.use_rslora = use_rslora;
  w.modules.resize(modules.size());
  for (size_t l = 0; l < modules.size(); ++l)
    for (size_t t = 0; t < modules[l].size(); ++t)
      w.modules[l][t] = {modules[l][t].A.clone(), modules[l][t].B.clone()};
  return w;
}

LoraWeights LoraWeights::random(const ModelConfig& config, int64_t rank, float alpha,
                                std::span<const LoraTarget> targets, uint64_t seed, float a_range,
                                float b_range) {
  LoraWeights w;
  w.rank = rank;
  w.alpha = alpha;
  w.modules.resize(size_t(config.n_layers));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> ua(-a_range, a_range), ub(-b_range, b_range);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (LoraTarget t : targets) {
      if (!lora_module_exists(config, l, t)) continue;
      auto [d_in, d_out] = lora_target_dims(config, t);
      LoraPair& p = w.modules[size_t(l)][size_t(t)];
      p.A = Tensor({rank, d_in});
      p.B = Tensor({d_out, rank});
      for (float& x : p.A.span()) x = ua(rng);
      for (float& x : p.B.span()) x = ub(rng);
    }
  }
  return w;
}

bool lora_module_exists(const ModelConfig& config, int64_t layer, LoraTarget t) {
  if (!lora_target_per_layer(t)) return layer == 0;
  const bool mlp = t == LoraTarget::gate || t == LoraTarget::up || t == LoraTarget::down;
  return !mlp || !config.sparse_layer(layer);
}

static std::string module_label(int64_t layer, LoraTarget t) {
  if (!lora_target_per_layer(t)) return "lm_head";
  return fmt::format("layers.{}.{}", layer, lora_target_name(t));
}

void LoraWeights::validate(const ModelConfig& config, const std::string& source) const {
  SPINDLE_CHECK(rank >= 1, invalid_argument, "{}: LoRA rank must be >= 1, got {}", source, rank);
  SPINDLE_CHECK(std::isfinite(alpha), invalid_argument, "{}: lora_alpha is not finite", source);
  SPINDLE_CHECK(int64_t(modules.size()) == config.n_layers, invalid_argument,
                "{}: adapter has {} layers, base has {} (hint: maybe wrong base model?)", source,
                modules.size(), config.n_layers);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      const LoraPair& p = modules[size_t(l)][size_t(t)];
      if (p.empty() && p.B.empty()) continue;
      SPINDLE_CHECK(lora_target_per_layer(t) || l == 0, invalid_argument,
                    "{}: lm_head adapter stored at layer {} (must be layer 0)", source, l);
      const bool mlp = t == LoraTarget::gate || t == LoraTarget::up || t == LoraTarget::down;
      SPINDLE_CHECK(!mlp || !config.sparse_layer(l), unsupported,
                    "{}: {} adapts the MLP of a routed-experts layer; LoRA on experts is not "
                    "supported yet (adapt the attention projections q, k, v, o or lm_head)",
                    source, module_label(l, t));
      auto [d_in, d_out] = lora_target_dims(config, t);
      const Shape want_a{rank, d_in}, want_b{d_out, rank};
      SPINDLE_CHECK(p.A.shape() == want_a, invalid_argument,
                    "{}: {} lora_A has shape {}, expected {} (hint: maybe wrong base model?)",
                    source, module_label(l, t), shape_str(p.A.shape()), shape_str(want_a));
      SPINDLE_CHECK(p.B.shape() == want_b, invalid_argument,
                    "{}: {} lora_B has shape {}, expected {} (hint: maybe wrong base model?)",
                    source, module_label(l, t), shape_str(p.B.shape()), shape_str(want_b));
    }
  }
}

void validate_lora_pool_options(const LoraPoolOptions& options) {
  SPINDLE_CHECK(options.max_slots >= 1 && options.max_slots <= 4096, invalid_argument,
                "LoRA pool: max_slots must be in [1, 4096], got {}", options.max_slots);
  SPINDLE_CHECK(options.max_rank >= 1 && options.max_rank <= 128, invalid_argument,
                "LoRA pool: max_rank must be in [1, 128], got {}", options.max_rank);
}

void validate_lora_load(const LoraWeights& adapter, int32_t slot, const ModelConfig& config,
                        int64_t max_rank,
                        const std::function<bool(int64_t, LoraTarget)>& has_storage) {
  adapter.validate(config, fmt::format("adapter for slot {}", slot));
  SPINDLE_CHECK(adapter.rank <= max_rank, invalid_argument,
                "adapter rank {} exceeds the slot pool's max_rank {}", adapter.rank, max_rank);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      if (!adapter.modules[size_t(l)][size_t(t)].empty()) {
        SPINDLE_CHECK(has_storage(l, t), unsupported,
                      "adapter targets {} but the slot pool has no storage for it (pool targets "
                      "are fixed at start-up)",
                      lora_target_name(t));
      }
    }
  }
}

void pack_lora_slot(const LoraPair& pair, int64_t max_rank, float* a, float* b) {
  const int64_t r = pair.A.shape()[0], d_in = pair.A.shape()[1], d_out = pair.B.shape()[0];
  const int64_t R = max_rank;
  std::memcpy(a, pair.A.data(), pair.A.bytes());
  std::memset(a + r * d_in, 0, size_t((R - r) * d_in) * sizeof(float));
  for (int64_t j = 0; j < d_out; ++j) {
    std::memcpy(b + j * R, pair.B.data() + j * r, size_t(r) * sizeof(float));
    std::memset(b + j * R + r, 0, size_t(R - r) * sizeof(float));
  }
}

LoraSlotPool::LoraSlotPool(const ModelConfig& config, LoraPoolOptions options)
    : config_(config), options_(std::move(options)) {
  validate_lora_pool_options(options_);
  modules_.resize(size_t(config_.n_layers));
  occupied_.assign(size_t(options_.max_slots), false);
  const int64_t S = options_.max_slots, R = options_.max_rank;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (LoraTarget t : options_.targets) {
      if (!lora_module_exists(config_, l, t)) continue;
      auto [d_in, d_out] = lora_target_dims(config_, t);
      Module m;
      m.A = Tensor::zeros({S, R, d_in});
      m.B = Tensor::zeros({S, d_out, R});
      m.rank.assign(size_t(S), 0);
      m.scale.assign(size_t(S), 0.0f);
      m.d_in = d_in;
      m.d_out = d_out;
      modules_[size_t(l)][size_t(t)] = std::move(m);
    }
  }
}

LoraSlotPool::Module* LoraSlotPool::module(int64_t layer, LoraTarget target) {
  if (!lora_target_per_layer(target)) layer = 0;
  auto& m = modules_.at(size_t(layer))[size_t(target)];
  return m ? &*m : nullptr;
}

const LoraSlotPool::Module* LoraSlotPool::module(int64_t layer, LoraTarget target) const {
  return const_cast<LoraSlotPool*>(this)->module(layer, target);
}

void LoraSlotPool::check_slot(int32_t slot) const {
  SPINDLE_CHECK(slot >= 0 && slot < options_.max_slots, invalid_argument,
                "LoRA slot {} out of range [0, {})", slot, options_.max_slots);
}

void LoraSlotPool::load(int32_t slot, const LoraWeights& adapter) {
  check_slot(slot);
  validate_lora_load(adapter, slot, config_, options_.max_rank,
                     [&](int64_t l, LoraTarget t) { return module(l, t) != nullptr; });
  clear(slot);
  const int64_t R = options_.max_rank, r = adapter.rank;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      const LoraPair& p = adapter.modules[size_t(l)][size_t(t)];
      if (p.empty()) continue;
      Module& m = *module(l, t);
      pack_lora_slot(p, R, m.A.data() + int64_t(slot) * R * m.d_in,
                     m.B.data() + int64_t(slot) * m.d_out * R);
      m.rank[size_t(slot)] = int32_t(r);
      m.scale[size_t(slot)] = adapter.scale();
    }
  }
  occupied_[size_t(slot)] = true;
}

void LoraSlotPool::clear(int32_t slot) {
  check_slot(slot);
  const int64_t R = options_.max_rank;
  for (auto& layer : modules_) {
    for (auto& m : layer) {
      if (!m || m->rank[size_t(slot)] == 0) continue;
      std::memset(m->A.data() + int64_t(slot) * R * m->d_in, 0, size_t(R * m->d_in) * 4);
      std::memset(m->B.data() + int64_t(slot) * m->d_out * R, 0, size_t(R * m->d_out) * 4);
      m->rank[size_t(slot)] = 0;
      m->scale[size_t(slot)] = 0.0f;
    }
  }
  occupied_[size_t(slot)] = false;
}

bool LoraSlotPool::occupied(int32_t slot) const {
  check_slot(slot);
  return occupied_[size_t(slot)];
}

std::optional<int32_t> LoraSlotPool::first_free() const {
  for (int32_t s = 0; s < options_.max_slots; ++s) {
    if (!occupied_[size_t(s)]) return s;
  }
  return std::nullopt;
}

std::optional<kernels::LoraSlots> LoraSlotPool::view(int64_t layer, LoraTarget target) const {
  const Module* m = module(layer, target);
  if (!m) return std::nullopt;
  kernels::LoraSlots v;
  v.A = m->A.data();
  v.B = m->B.data();
  v.rank = m->rank.data();
  v.scale = m->scale.data();
  v.max_slots = options_.max_slots;
  v.max_rank = options_.max_rank;
  v.d_in = m->d_in;
  v.d_out = m->d_out;
  return v;
}

size_t LoraSlotPool::bytes() const {
  size_t total = 0;
  for (const auto& layer : modules_) {
    for (const auto& m : layer) {
      if (m) total += m->A.bytes() + m->B.bytes();
    }
  }
  return total;
}

}  // namespace spindle::engine
