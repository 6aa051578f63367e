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
    case LoraTarget::q_a:
      return "q_a_proj";
    case LoraTarget::q_b:
      return "q_b_proj";
    case LoraTarget::kv_a:
      return "kv_a_proj_with_mqa";
    case LoraTarget::kv_b:
      return "kv_b_proj";
  }
  return "?";
}

std::optional<LoraTarget> lora_target_from_name(std::string_view name) {
  for (LoraTarget t : kAllLoraTargets) {
    std::string_view full = lora_target_name(t);
    if (name == full) return t;
    if (full.ends_with("_proj") && name == full.substr(0, full.size() - 5)) return t;
  }
  if (name == "kv_a" || name == "kv_a_proj") return LoraTarget::kv_a;
  return std::nullopt;
}

std::pair<int64_t, int64_t> lora_target_dims(const ModelConfig& c, int64_t layer,
                                             LoraTarget target) {
  const MlaConfig& a = c.mla;
  switch (target) {
    case LoraTarget::q: return {c.dim, c.q_dim()};
    case LoraTarget::k:
    case LoraTarget::v: return {c.dim, c.kv_dim()};
    case LoraTarget::o:
      return {c.attn_out_dim(), c.dim};
    case LoraTarget::gate:
    case LoraTarget::up:
      return {c.dim, c.dense_mlp_dim(layer)};
    case LoraTarget::down:
      return {c.dense_mlp_dim(layer), c.dim};
    case LoraTarget::lm_head: return {c.dim, c.vocab_size};
    case LoraTarget::q_a:
      return {c.dim, a.q_lora_rank};
    case LoraTarget::q_b:
      return {a.q_lora_rank, c.q_dim()};
    case LoraTarget::kv_a:
      return {c.dim, a.kv_lora_rank + a.qk_rope_head_dim};
    case LoraTarget::kv_b:
      return {a.kv_lora_rank, c.n_heads * (a.qk_nope_head_dim + a.v_head_dim)};
  }
  return {0, 0};
}

bool lora_target_per_layer(LoraTarget target) { return target != LoraTarget::lm_head; }

std::string lora_module_key(int64_t layer, LoraTarget target) {
  if (target == LoraTarget::lm_head) return "base_model.model.lm_head";
  const bool mlp = expert_proj(target) >= 0;  // gate, up, down
  return fmt::format("base_model.model.model.layers.{}.{}.{}", layer, mlp ? "mlp" : "self_attn",
                     lora_target_name(target));
}

std::string lora_param_name(int64_t layer, LoraTarget target, int which) {
  return lora_module_key(layer, target) + (which == 0 ? ".lora_A.weight" : ".lora_B.weight");
}

int expert_proj(LoraTarget t) {
  switch (t) {
    case LoraTarget::gate:
      return 0;
    case LoraTarget::up:
      return 1;
    case LoraTarget::down:
      return 2;
    default:
      return -1;
  }
}

bool lora_experts_exist(const ModelConfig& config, int64_t layer, LoraTarget t) {
  return expert_proj(t) >= 0 && config.sparse_layer(layer);
}

std::pair<int64_t, int64_t> lora_expert_dims(const ModelConfig& c, LoraTarget t) {
  return t == LoraTarget::down ? std::pair{c.moe.expert_dim, c.dim}
                               : std::pair{c.dim, c.moe.expert_dim};
}

std::string lora_expert_param_name(int64_t layer, LoraTarget t, int which) {
  return fmt::format("base_model.model.model.layers.{}.mlp.experts.{}.lora_{}.packed", layer,
                     lora_target_name(t), which == 0 ? "A" : "B");
}

float LoraWeights::scale() const {
  return use_rslora ? alpha / std::sqrt(float(rank)) : alpha / float(rank);
}

// One block for all tensors (Tensor::in_one_block): a snapshot of a Qwen3-0.6B rank-8 adapter
// is ~400 tensors of 30–100 KB, and copying them into separately allocated fresh memory cost
// 12–17 ms of small-page faults on the save path; one huge-page block costs a few ms.
LoraWeights LoraWeights::clone() const {
  LoraWeights w;
  w.rank = rank;
  w.alpha = alpha;
  w.use_rslora = use_rslora;
  w.modules.resize(modules.size());
  w.experts.resize(experts.size());
  std::vector<std::pair<const Tensor*, Tensor*>> copies;  // (source, destination)
  auto add = [&](const Tensor& from, Tensor& to) {
    if (from.data()) copies.emplace_back(&from, &to);
  };
  for (size_t l = 0; l < modules.size(); ++l)
    for (size_t t = 0; t < modules[l].size(); ++t) {
      add(modules[l][t].A, w.modules[l][t].A);
      add(modules[l][t].B, w.modules[l][t].B);
    }
  for (size_t l = 0; l < experts.size(); ++l)
    for (size_t p = 0; p < experts[l].size(); ++p) {
      add(experts[l][p].A, w.experts[l][p].A);
      add(experts[l][p].B, w.experts[l][p].B);
    }
  std::vector<Shape> shapes;
  shapes.reserve(copies.size());
  for (const auto& c : copies) shapes.push_back(c.first->shape());
  std::vector<Tensor> block = Tensor::in_one_block(shapes);
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].first->numel()) std::memcpy(block[i].data(), copies[i].first->data(), copies[i].first->bytes());
    *copies[i].second = std::move(block[i]);
  }
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
      if (lora_experts_exist(config, l, t)) {
        if (w.experts.empty()) w.experts.resize(size_t(config.n_layers));
        auto [d_in, d_out] = lora_expert_dims(config, t);
        ExpertLoraPair& p = w.experts[size_t(l)][size_t(expert_proj(t))];
        p.A = Tensor({config.moe.n_experts, rank, d_in});
        p.B = Tensor({config.moe.n_experts, d_out, rank});
        for (float& x : p.A.span()) x = ua(rng);
        for (float& x : p.B.span()) x = ub(rng);
      }
      // A sparse layer's shared experts (DeepSeek) take the dense module of the same target.
      if (!lora_module_exists(config, l, t)) continue;
      auto [d_in, d_out] = lora_target_dims(config, l, t);
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
  const bool mla = config.mla_attention(), q_latent = config.mla.q_lora_rank > 0;
  switch (t) {
    case LoraTarget::lm_head:
      return layer == 0;
    case LoraTarget::q:
      return !mla || !q_latent;
    case LoraTarget::k:
    case LoraTarget::v:
      return !mla;
    case LoraTarget::o:
      return true;
    case LoraTarget::gate:
    case LoraTarget::up:
    case LoraTarget::down:
      return config.dense_mlp_dim(layer) > 0;
    case LoraTarget::q_a:
    case LoraTarget::q_b:
      return mla && q_latent;
    case LoraTarget::kv_a:
    case LoraTarget::kv_b:
      return mla;
  }
  return false;
}

static std::string module_label(int64_t layer, LoraTarget t) {
  if (!lora_target_per_layer(t)) return "lm_head";
  return fmt::format("layers.{}.{}", layer, lora_target_name(t));
}

static void validate_lora_experts(const LoraWeights& w, const ModelConfig& config,
                                  const std::string& source);

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
      SPINDLE_CHECK(expert_proj(t) < 0 || lora_module_exists(config, l, t), invalid_argument,
                    "{}: {} is a dense MLP module, but layer {} of the base is routed experts "
                    "(their LoRA is mlp.experts.{}; hint: maybe wrong base model?)",
                    source, module_label(l, t), l, lora_target_name(t));
      SPINDLE_CHECK(lora_module_exists(config, l, t), invalid_argument,
                    "{}: {} does not exist in a {} base{} (hint: maybe wrong base model?)", source,
                    module_label(l, t), arch_name(config.arch),
                    config.mla_attention() ? " (latent attention)" : "");
      auto [d_in, d_out] = lora_target_dims(config, l, t);
      const Shape want_a{rank, d_in}, want_b{d_out, rank};
      SPINDLE_CHECK(p.A.shape() == want_a, invalid_argument,
                    "{}: {} lora_A has shape {}, expected {} (hint: maybe wrong base model?)",
                    source, module_label(l, t), shape_str(p.A.shape()), shape_str(want_a));
      SPINDLE_CHECK(p.B.shape() == want_b, invalid_argument,
                    "{}: {} lora_B has shape {}, expected {} (hint: maybe wrong base model?)",
                    source, module_label(l, t), shape_str(p.B.shape()), shape_str(want_b));
    }
  }
  validate_lora_experts(*this, config, source);
}

static void validate_lora_experts(const LoraWeights& w, const ModelConfig& config,
                                  const std::string& source) {
  if (w.experts.empty()) return;
  SPINDLE_CHECK(int64_t(w.experts.size()) == config.n_layers, invalid_argument,
                "{}: adapter has expert LoRA for {} layers, base has {}", source, w.experts.size(),
                config.n_layers);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (LoraTarget t : kExpertProjTargets) {
      const ExpertLoraPair& p = w.experts[size_t(l)][size_t(expert_proj(t))];
      if (p.empty() && p.B.empty()) continue;
      const std::string name = lora_expert_param_name(l, t, 0);
      SPINDLE_CHECK(config.sparse_layer(l), invalid_argument,
                    "{}: {} adapts experts, but layer {} of the base is dense", source, name, l);
      auto [d_in, d_out] = lora_expert_dims(config, t);
      const int64_t E = config.moe.n_experts, r = w.rank;
      const Shape want_a{E, r, d_in}, want_b{E, d_out, r};
      SPINDLE_CHECK(p.A.shape() == want_a && p.B.shape() == want_b, invalid_argument,
                    "{}: {} / lora_B shapes are {} / {}, expected {} / {} (hint: maybe wrong base "
                    "model?)",
                    source, name, shape_str(p.A.shape()), shape_str(p.B.shape()), shape_str(want_a),
                    shape_str(want_b));
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
      const bool experts = expert_proj(t) >= 0 && adapter.has_experts() &&
                           !adapter.experts[size_t(l)][size_t(expert_proj(t))].empty();
      if (experts || !adapter.modules[size_t(l)][size_t(t)].empty()) {
        SPINDLE_CHECK(has_storage(l, t), unsupported,
                      "adapter targets {}{} but the slot pool has no storage for it (pool targets "
                      "are fixed at start-up)",
                      experts ? "mlp.experts." : "", lora_target_name(t));
      }
    }
  }
}

namespace {

// Rows [0, r) of a [max_rank, d_in] and columns [0, r) of b [d_out, max_rank] are what a module
// of rank r occupies in a slot: copy_lora_rank writes A [r, d_in] and B [d_out, r] there and
// touches nothing else.
void copy_lora_rank(const float* A, const float* B, int64_t r, int64_t d_in, int64_t d_out,
                    int64_t max_rank, float* a, float* b) {
  std::memcpy(a, A, size_t(r * d_in) * sizeof(float));
  if (r == max_rank) {  // B's rows are already max_rank wide: one copy
    std::memcpy(b, B, size_t(d_out * r) * sizeof(float));
    return;
  }
  // r floats per row, a few tens of bytes: an inline loop, not a memcpy call per row.
  for (int64_t j = 0; j < d_out; ++j) {
    const float* src = B + j * r;
    float* dst = b + j * max_rank;
    for (int64_t k = 0; k < r; ++k) dst[k] = src[k];
  }
}

// Zeroes rows [from, to) of a [max_rank, d_in] and columns [from, to) of b [d_out, max_rank].
void zero_lora_ranks(int64_t from, int64_t to, int64_t d_in, int64_t d_out, int64_t max_rank,
                     float* a, float* b) {
  if (to <= from) return;
  std::memset(a + from * d_in, 0, size_t((to - from) * d_in) * sizeof(float));
  if (from == 0 && to == max_rank) {
    std::memset(b, 0, size_t(d_out * max_rank) * sizeof(float));
    return;
  }
  for (int64_t j = 0; j < d_out; ++j) {
    std::memset(b + j * max_rank + from, 0, size_t(to - from) * sizeof(float));
  }
}

}  // namespace

void pack_lora_slot(const float* A, const float* B, int64_t r, int64_t d_in, int64_t d_out,
                    int64_t max_rank, float* a, float* b) {
  copy_lora_rank(A, B, r, d_in, d_out, max_rank, a, b);
  zero_lora_ranks(r, max_rank, d_in, d_out, max_rank, a, b);
}

void pack_lora_slot(const LoraPair& pair, int64_t max_rank, float* a, float* b) {
  pack_lora_slot(pair.A.data(), pair.B.data(), pair.A.shape()[0], pair.A.shape()[1],
                 pair.B.shape()[0], max_rank, a, b);
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
      auto [d_in, d_out] = lora_target_dims(config_, l, t);
      Module m;
      m.A = Tensor::zeros({S, R, d_in});
      m.B = Tensor::zeros({S, d_out * R});
      m.rank.assign(size_t(S), 0);
      m.scale.assign(size_t(S), 0.0f);
      m.d_in = d_in;
      m.d_out = d_out;
      modules_[size_t(l)][size_t(t)] = std::move(m);
    }
  }
  expert_modules_.resize(size_t(config_.n_layers));
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (LoraTarget t : options_.targets) {
      if (!lora_experts_exist(config_, l, t)) continue;
      auto& slot = expert_modules_[size_t(l)][size_t(expert_proj(t))];
      if (slot) continue;  // a target listed twice
      auto [d_in, d_out] = lora_expert_dims(config_, t);
      const int64_t E = config_.moe.n_experts;
      ExpertModule m;
      m.A = Tensor::zeros({E, S, R, d_in});
      m.B = Tensor::zeros({E, S, d_out * R});
      m.rank.assign(size_t(S), 0);
      m.scale.assign(size_t(S), 0.0f);
      m.d_in = d_in;
      m.d_out = d_out;
      slot = std::move(m);
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

const LoraSlotPool::ExpertModule* LoraSlotPool::expert_module(int64_t layer,
                                                              LoraTarget target) const {
  if (expert_proj(target) < 0 || layer < 0 || layer >= int64_t(expert_modules_.size())) {
    return nullptr;
  }
  const auto& m = expert_modules_[size_t(layer)][size_t(expert_proj(target))];
  return m ? &*m : nullptr;
}

void LoraSlotPool::check_slot(int32_t slot) const {
  SPINDLE_CHECK(slot >= 0 && slot < options_.max_slots, invalid_argument,
                "LoRA slot {} out of range [0, {})", slot, options_.max_slots);
}

void LoraSlotPool::load(int32_t slot, const LoraWeights& adapter) {
  check_slot(slot);
  validate_lora_load(adapter, slot, config_, options_.max_rank, [&](int64_t l, LoraTarget t) {
    return module(l, t) != nullptr || expert_module(l, t) != nullptr;
  });
  clear(slot);
  const int64_t R = options_.max_rank, r = adapter.rank;
  // A_s = [r, d_in] in rows [0, r) of the slot, B_s = [d_out, r] packed at its start
  // (kernels/lora.h): two straight copies of the adapter's tensors per module.
  auto place = [&](const float* A, const float* B, int64_t d_in, int64_t d_out, float* a,
                   float* b) {
    std::memcpy(a, A, size_t(r * d_in) * sizeof(float));
    std::memcpy(b, B, size_t(d_out * r) * sizeof(float));
  };
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      const LoraPair& p = adapter.modules[size_t(l)][size_t(t)];
      if (p.empty()) continue;
      Module& m = *module(l, t);
      place(p.A.data(), p.B.data(), m.d_in, m.d_out, m.A.data() + int64_t(slot) * R * m.d_in,
            m.B.data() + int64_t(slot) * m.d_out * R);
      m.rank[size_t(slot)] = int32_t(r);
      m.scale[size_t(slot)] = adapter.scale();
    }
  }
  for (size_t l = 0; l < adapter.experts.size(); ++l) {
    for (LoraTarget t : kExpertProjTargets) {
      const ExpertLoraPair& p = adapter.experts[l][size_t(expert_proj(t))];
      if (p.empty()) continue;
      auto& m = *expert_modules_[l][size_t(expert_proj(t))];
      const int64_t S = options_.max_slots, din = m.d_in, dout = m.d_out;
      for (int64_t e = 0; e < config_.moe.n_experts; ++e) {
        place(p.A.data() + e * r * din, p.B.data() + e * dout * r, din, dout,
              m.A.data() + (e * S + slot) * R * din, m.B.data() + (e * S + slot) * dout * R);
      }
      m.rank[size_t(slot)] = int32_t(r);
      m.scale[size_t(slot)] = adapter.scale();
    }
  }
  occupied_[size_t(slot)] = true;
}

void LoraSlotPool::clear(int32_t slot) {
  check_slot(slot);
  // No memory is touched: the kernels read nothing of a slot of rank 0.
  for (auto& layer : modules_) {
    for (auto& m : layer) {
      if (!m) continue;
      m->rank[size_t(slot)] = 0;
      m->scale[size_t(slot)] = 0.0f;
    }
  }
  for (auto& layer : expert_modules_) {
    for (auto& m : layer) {
      if (!m) continue;
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

std::optional<kernels::LoraSlots> LoraSlotPool::expert_view(int64_t layer, LoraTarget target,
                                                            int64_t expert) const {
  const ExpertModule* m = expert_module(layer, target);
  if (!m) return std::nullopt;
  const int64_t S = options_.max_slots, R = options_.max_rank;
  kernels::LoraSlots v;
  v.A = m->A.data() + expert * S * R * m->d_in;
  v.B = m->B.data() + expert * S * m->d_out * R;
  v.rank = m->rank.data();
  v.scale = m->scale.data();
  v.max_slots = S;
  v.max_rank = R;
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
  for (const auto& layer : expert_modules_) {
    for (const auto& m : layer) {
      if (m) total += m->A.bytes() + m->B.bytes();
    }
  }
  return total;
}

}  // namespace spindle::engine
