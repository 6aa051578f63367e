#pragma once
// PEFT LoRA adapter directories, both directions:
//   adapter_config.json        r, lora_alpha, target_modules, use_rslora, base_model_name_or_path
//   adapter_model.safetensors  base_model.model.model.layers.<i>.self_attn.q_proj.lora_A.weight
//                              [r, in] and ...lora_B.weight [out, r]; mlp.{gate,up,down}_proj;
//                              base_model.model.lm_head.lora_{A,B}.weight
// Loading validates every tensor against the base before returning; unsupported PEFT features
// (DoRA, rank_pattern, fan_in_fan_out, bias, modules_to_save) are refused by name.

#include <filesystem>
#include <string>
#include <vector>

#include "spindle/core/dtype.h"
#include "spindle/engine/lora.h"
#include "spindle/engine/model_config.h"

namespace spindle::adapters {

struct PeftConfig {
  int64_t r = 0;
  float lora_alpha = 0.0f;
  bool use_rslora = false;
  std::vector<engine::LoraTarget> target_modules;
  std::string base_model_name_or_path;
};

PeftConfig parse_peft_config(const std::string& json_text, const std::string& source);

engine::LoraWeights load_peft(const std::filesystem::path& dir, const engine::ModelConfig& base);

struct PeftSaveOptions {
  std::string base_model_name_or_path;
  DType dtype = DType::f32;
  // The base's config, when known: a DeepSeek sparse layer's gate/up/down are then named as
  // its shared experts (mlp.shared_experts.gate_proj), the module PEFT adapts there. Without it
  // they keep the dense names (mlp.gate_proj), which Spindle reads back either way.
  const engine::ModelConfig* base = nullptr;
};

// Writes adapter_config.json and adapter_model.safetensors (each atomically).
void save_peft(const engine::LoraWeights& adapter, const std::filesystem::path& dir,
               const PeftSaveOptions& options = {});

// Targets with at least one non-empty module, in kAllLoraTargets order.
std::vector<engine::LoraTarget> adapted_targets(const engine::LoraWeights& adapter);

// PEFT tensor key of one module ("base_model.model.model.layers.3.mlp.up_proj"), without
// the ".lora_A.weight" suffix. With a base whose layer is sparse, gate/up/down are its shared
// experts ("...layers.3.mlp.shared_experts.up_proj").
std::string peft_module_key(int64_t layer, engine::LoraTarget target,
                            const engine::ModelConfig* base = nullptr);
// The shared-experts key of an MLP target ("...layers.3.mlp.shared_experts.up_proj").
std::string peft_shared_expert_key(int64_t layer, engine::LoraTarget target);
// PEFT key of one routed expert's projection ("base_model.model.model.layers.3.mlp.experts.7.
// up_proj"), as PEFT names them for Qwen3-MoE.
std::string peft_expert_key(int64_t layer, int64_t expert, engine::LoraTarget target);

}  // namespace spindle::adapters
