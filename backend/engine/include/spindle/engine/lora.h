#pragma once
// LoRA adapters over a resident base: y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ, s = alpha/r (rsLoRA: alpha/√r).
//
// LoraWeights is one adapter in host memory, as PEFT files hold it. LoraSlotPool is the fixed
// pool of adapter slots the forward pass reads through the SGMV kernels (kernels/lora.h):
// sized once by max_slots × max_rank, so memory is known up front (and on a GPU, preallocated).
// Loading an adapter into a slot copies its tensors into the pool; the base is never touched.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/core/tensor.h"
#include "spindle/engine/device.h"
#include "spindle/engine/model_config.h"
#include "spindle/kernels/lora.h"

namespace spindle::engine {

// Adaptable projections. Order is part of the slot pool's layout, not of any file format.
// q_a, q_b, kv_a, kv_b are MLA's (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj); an MLA
// model has no k / v, and q only without a query latent. gate / up / down of a DeepSeek sparse
// layer adapt its shared experts.
enum class LoraTarget : uint8_t { q, k, v, o, gate, up, down, lm_head, q_a, q_b, kv_a, kv_b };
inline constexpr int kLoraTargetCount = 12;
inline constexpr std::array<LoraTarget, kLoraTargetCount> kAllLoraTargets = {
    LoraTarget::q,    LoraTarget::k,   LoraTarget::v,    LoraTarget::o,
    LoraTarget::gate, LoraTarget::up,  LoraTarget::down, LoraTarget::lm_head,
    LoraTarget::q_a,  LoraTarget::q_b, LoraTarget::kv_a, LoraTarget::kv_b};

// PEFT module name: "q_proj", ..., "down_proj", "lm_head", "kv_a_proj_with_mqa".
const char* lora_target_name(LoraTarget target);
// Accepts PEFT names ("q_proj") and short names ("q", "gate", "lm_head", "kv_a").
std::optional<LoraTarget> lora_target_from_name(std::string_view name);
// (d_in, d_out) of a target's base projection at `layer` (the MLP's width differs between
// dense layers and a sparse layer's shared experts).
std::pair<int64_t, int64_t> lora_target_dims(const ModelConfig& config, int64_t layer,
                                             LoraTarget target);
bool lora_target_per_layer(LoraTarget target);  // false only for lm_head
// Whether layer `layer` has a dense `target` module to adapt: lm_head only at layer 0; MLA's
// projections on MLA models only (and q only without a query latent, k / v never); gate / up /
// down on a dense layer or on a sparse layer's shared experts (routed experts are adapted
// through lora_experts_exist).
bool lora_module_exists(const ModelConfig& config, int64_t layer, LoraTarget target);

// LoRA on routed experts: gate / up / down of a sparse layer (ModelConfig::sparse_layer).
inline constexpr int kExpertProjCount = 3;
// 0, 1, 2 for gate, up, down; −1 for every other target.
int expert_proj(LoraTarget target);
inline constexpr LoraTarget kExpertProjTargets[kExpertProjCount] = {
    LoraTarget::gate, LoraTarget::up, LoraTarget::down};
bool lora_experts_exist(const ModelConfig& config, int64_t layer, LoraTarget target);
// (d_in, d_out) of one expert's projection: (dim, expert_dim) for gate/up, (expert_dim, dim)
// for down.
std::pair<int64_t, int64_t> lora_expert_dims(const ModelConfig& config, LoraTarget target);
// Spindle's packed tensor name of every expert's A or B of one projection (adapters/
// moe_packed.h): "base_model.model.model.layers.3.mlp.experts.up_proj.lora_A.packed".
std::string lora_expert_param_name(int64_t layer, LoraTarget target, int which);
// The AdamW parameter name of one adapted dense tensor: "<lora_module_key>.lora_A.weight"
// (which 0) or ".lora_B.weight" (which 1).
std::string lora_param_name(int64_t layer, LoraTarget target, int which);
// PEFT module key: "base_model.model.model.layers.3.mlp.up_proj", "base_model.model.lm_head".
// Tensor names append ".lora_A.weight" / ".lora_B.weight".
std::string lora_module_key(int64_t layer, LoraTarget target);

struct LoraPair {
  Tensor A;  // [r, d_in]
  Tensor B;  // [d_out, r]
  bool empty() const { return A.empty(); }
};

// Every expert's LoRA of one projection of a routed-experts layer, packed (the layout of
// adapters/moe_packed.h): expert e's A is A[e] [r, d_in], its B is B[e] [d_out, r].
struct ExpertLoraPair {
  Tensor A;  // [n_experts, r, d_in]
  Tensor B;  // [n_experts, d_out, r]
  bool empty() const { return A.empty(); }
};

// One adapter. modules[layer][target] (lm_head lives at layer 0); empty pairs = not adapted.
// experts[layer][expert_proj(target)]: the routed experts' LoRA of a sparse layer (empty when
// no expert is adapted, else n_layers entries with empty pairs on the dense layers).
struct LoraWeights {
  int64_t rank = 0;
  float alpha = 0.0f;
  bool use_rslora = false;
  std::vector<std::array<LoraPair, kLoraTargetCount>> modules;  // [n_layers]
  std::vector<std::array<ExpertLoraPair, kExpertProjCount>> experts;  // [n_layers] or empty
  bool has_experts() const { return !experts.empty(); }

  float scale() const;
  LoraWeights clone() const;
  // Random adapter for tests and benches: A ~ U(-a, a), B ~ U(-b, b) from a seed.
  static LoraWeights random(const ModelConfig& config, int64_t rank, float alpha,
                            std::span<const LoraTarget> targets, uint64_t seed, float a_range,
                            float b_range);
  // Checks layer count, ranks and every tensor's shape against the base; throws naming the
  // module ("layers.3.q_proj lora_B: shape [..] expected [..] (hint: maybe wrong base model?)").
  void validate(const ModelConfig& config, const std::string& source) const;
};

// fn(name, A-or-B tensor) for every adapted tensor: the dense modules by PEFT name
// (lora_param_name, trainer.h) and then the experts by packed name (lora_expert_param_name).
// W is LoraWeights or const LoraWeights.
template <class W, class F>
void for_each_lora_tensor(W& w, F&& fn);

struct LoraPoolOptions {
  int32_t max_slots = 8;
  int32_t max_rank = 16;
  // Targets the pool allocates storage for; loading an adapter touching others fails.
  std::vector<LoraTarget> targets = {kAllLoraTargets.begin(), kAllLoraTargets.end()};
};

// Slot-pool helpers shared by LoraSlotPool and engine_cuda::DeviceLoraPool (same checks, same
// messages, same packing).
// max_slots in [1, 4096] and max_rank in [1, 128]; invalid_argument otherwise.
void validate_lora_pool_options(const LoraPoolOptions& options);
// Checks that `adapter` may be loaded into slot `slot` of a pool: the adapter against the base
// (LoraWeights::validate), its rank <= max_rank (invalid_argument), and storage for every module
// it adapts, `has_storage(layer, target)` (unsupported otherwise).
void validate_lora_load(const LoraWeights& adapter, int32_t slot, const ModelConfig& config,
                        int64_t max_rank,
                        const std::function<bool(int64_t, LoraTarget)>& has_storage);
// Writes one module of rank r into a slot's region in the CUDA pools' layout (DeviceLoraPool,
// whose kernels read max_rank-wide B rows; the CPU pool packs B at the adapter's rank instead):
// A [r, d_in] into rows [0, r) of a [max_rank, d_in], B [d_out, r] into columns [0, r) of
// b [d_out, max_rank]; the rest zero.
void pack_lora_slot(const LoraPair& pair, int64_t max_rank, float* a, float* b);
// The same from raw A [r, d_in] and B [d_out, r] (one expert of an ExpertLoraPair).
void pack_lora_slot(const float* A, const float* B, int64_t r, int64_t d_in, int64_t d_out,
                    int64_t max_rank, float* a, float* b);

// Thread-safety: load/clear must not run concurrently with a forward pass that reads the slot
// (the residency layer serialises them; eviction never takes a slot an in-flight batch uses).
// The CPU implementation of the SlotPool interface (backend.h).
class LoraSlotPool final : public SlotPool {
 public:
  LoraSlotPool(const ModelConfig& config, LoraPoolOptions options);

  Device device() const override { return {}; }
  int32_t max_slots() const override { return options_.max_slots; }
  int32_t max_rank() const override { return options_.max_rank; }
  const ModelConfig& config() const { return config_; }

  // Copies `adapter` into `slot` (validated first; nothing changes on error): per module, A into
  // the slot's first r rows and B as [d_out, r] packed at the slot's start (kernels/lora.h), two
  // contiguous copies of the adapter's own bytes. What lies past them (an earlier adapter's
  // rows) is never read: the kernels read a slot's first `rank` rows of A and d_out·rank floats
  // of B, none of a cleared one, so clear() touches no memory either.
  void load(int32_t slot, const LoraWeights& adapter) override;
  void clear(int32_t slot) override;
  bool occupied(int32_t slot) const override;
  std::optional<int32_t> first_free() const override;
  void synchronize() const override {}  // loads are synchronous on the CPU

  // The SGMV view of one (layer, target); nullopt if the pool has no storage for the target.
  std::optional<kernels::LoraSlots> view(int64_t layer, LoraTarget target) const;
  // The SGMV view of expert `expert`'s gate / up / down LoRA on a routed-experts layer (every
  // slot); nullopt if the layer is dense or the pool has no storage for the target.
  std::optional<kernels::LoraSlots> expert_view(int64_t layer, LoraTarget target,
                                                int64_t expert) const;
  size_t bytes() const override;

 private:
  struct Module {
    Tensor A;                    // [max_slots, max_rank, d_in]
    Tensor B;                    // [max_slots, d_out·max_rank]: [d_out, r] packed per slot
    std::vector<int32_t> rank;   // [max_slots]
    std::vector<float> scale;    // [max_slots]
    int64_t d_in = 0, d_out = 0;
  };
  // Every expert's slots of one projection of a sparse layer, expert-major so that expert e's
  // [max_slots, ...] block is an ordinary SGMV view.
  struct ExpertModule {
    Tensor A;                   // [n_experts, max_slots, max_rank, d_in]
    Tensor B;                   // [n_experts, max_slots, d_out·max_rank], packed as above
    std::vector<int32_t> rank;   // [max_slots]
    std::vector<float> scale;    // [max_slots]
    int64_t d_in = 0, d_out = 0;
  };
  Module* module(int64_t layer, LoraTarget target);
  const Module* module(int64_t layer, LoraTarget target) const;
  const ExpertModule* expert_module(int64_t layer, LoraTarget target) const;
  void check_slot(int32_t slot) const;

  ModelConfig config_;
  LoraPoolOptions options_;
  std::vector<std::array<std::optional<Module>, kLoraTargetCount>> modules_;  // [n_layers]
  std::vector<std::array<std::optional<ExpertModule>, kExpertProjCount>> expert_modules_;
  std::vector<bool> occupied_;
};

template <class W, class F>
void for_each_lora_tensor(W& w, F&& fn) {
  for (size_t l = 0; l < w.modules.size(); ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      auto& p = w.modules[l][size_t(t)];
      if (p.empty()) continue;
      fn(lora_param_name(int64_t(l), t, 0), p.A);
      fn(lora_param_name(int64_t(l), t, 1), p.B);
    }
  }
  for (size_t l = 0; l < w.experts.size(); ++l) {
    for (LoraTarget t : kExpertProjTargets) {
      auto& p = w.experts[l][size_t(expert_proj(t))];
      if (p.empty()) continue;
      fn(lora_expert_param_name(int64_t(l), t, 0), p.A);
      fn(lora_expert_param_name(int64_t(l), t, 1), p.B);
    }
  }
}

}  // namespace spindle::engine
