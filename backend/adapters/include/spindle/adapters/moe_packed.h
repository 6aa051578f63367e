#pragma once
// Packed MoE LoRA (DESIGN.md core idea 5). For each layer and expert projection (gate, up,
// down) all experts' A live in one contiguous Tensor [E, r, d_in] and all B in one
// [E, d_out, r], so loading an adapter is a few large copies, not thousands of small ones.
//
// Dims (Qwen3-MoE): gate/up map hidden -> moe_intermediate, down maps moe_intermediate ->
// hidden. Expert e's A is rows [e·r, (e+1)·r) of the packed A viewed as [E·r, d_in]; its B
// is the e-th [d_out, r] block of the packed B.
//
// Per-expert PEFT naming (what PEFT writes for Qwen3-MoE):
//   base_model.model.model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.lora_{A,B}.weight
// Packed file naming (Spindle's own; one tensor per layer, projection and matrix):
//   base_model.model.model.layers.{l}.mlp.experts.{gate,up,down}_proj.lora_{A,B}.packed
// Both files carry __metadata__ {"spindle_moe_layout": "packed"|"per_expert", "rank",
// "lora_alpha", "use_rslora", "n_experts"}. Values are stored as fp32, so every round trip is
// bit-exact.

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "spindle/core/tensor.h"
#include "spindle/engine/lora.h"

namespace spindle::adapters {

enum class MoeProj : uint8_t { gate, up, down };
inline constexpr int kMoeProjCount = 3;
inline constexpr std::array<MoeProj, kMoeProjCount> kAllMoeProjs = {MoeProj::gate, MoeProj::up,
                                                                      MoeProj::down};
const char* moe_proj_name(MoeProj proj);  // "gate_proj", "up_proj", "down_proj"

enum class LoraMatrix : uint8_t { A, B };

struct MoeDims {
  int64_t n_layers = 0;
  int64_t n_experts = 0;
  int64_t hidden = 0;            // model hidden size
  int64_t moe_intermediate = 0;  // one expert's intermediate size
  // (d_in, d_out) of an expert projection.
  std::pair<int64_t, int64_t> proj_dims(MoeProj proj) const;
  // Throws invalid_argument naming the first non-positive field.
  void validate() const;
};

// PEFT tensor names.
std::string moe_expert_tensor_name(int64_t layer, int64_t expert, MoeProj proj, LoraMatrix m);
std::string moe_packed_tensor_name(int64_t layer, MoeProj proj, LoraMatrix m);

// One projection's experts, packed: A [E, r, d_in], B [E, d_out, r] — the engine's own type
// for LoRA on routed experts (engine::LoraWeights::experts), so a file's tensors are what a
// slot pool loads.
using PackedMoeProj = engine::ExpertLoraPair;

// One MoE expert adapter in the packed layout. Invariant (checked by validate): every layer
// has all three projections with the shapes above.
struct PackedMoeLora {
  MoeDims dims;
  int64_t rank = 0;
  float alpha = 0.0f;
  bool use_rslora = false;
  std::vector<std::array<PackedMoeProj, kMoeProjCount>> layers;  // [n_layers]

  size_t bytes() const;
  // Throws format naming the first tensor whose shape differs from the dims and rank.
  void validate(const std::string& source) const;
  // A ~ U(-a, a), B ~ U(-b, b) from a seed (tests and benches).
  static PackedMoeLora random(const MoeDims& dims, int64_t rank, float alpha, uint64_t seed,
                              float a_range, float b_range);
};

// Per-expert PEFT tensors keyed by moe_expert_tensor_name. Conversion is exact (copies).
using PeftTensorMap = std::map<std::string, Tensor>;

struct MoeAdapterParams {
  int64_t rank = 0;
  float alpha = 0.0f;
  bool use_rslora = false;
};

PeftTensorMap unpack_moe_to_peft(const PackedMoeLora& packed);
// Every expert tensor of every layer must be present with shape [r, d_in] / [d_out, r];
// otherwise throws (not_found / format) naming the tensor. Extra tensors are ignored.
PackedMoeLora pack_moe_from_peft(const PeftTensorMap& tensors, const MoeDims& dims,
                                 const MoeAdapterParams& params, const std::string& source);

// Safetensors files, written atomically. Loads check the layout tag and every tensor's
// shape against `dims` (errors name the file and the tensor).
void save_packed_moe(const PackedMoeLora& packed, const std::filesystem::path& path);
PackedMoeLora load_packed_moe(const std::filesystem::path& path, const MoeDims& dims);
void save_per_expert_moe(const PackedMoeLora& packed, const std::filesystem::path& path);
// Reads thousands of small tensors one by one (as a PEFT loader does) and packs them.
PackedMoeLora load_per_expert_moe(const std::filesystem::path& path, const MoeDims& dims);

}  // namespace spindle::adapters
