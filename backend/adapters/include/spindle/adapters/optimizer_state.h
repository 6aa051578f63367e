#pragma once
// The AdamW state of a trained adapter, kept beside its PEFT files:
//   <dir>/optimizer_state.safetensors   <peft key>.exp_avg, <peft key>.exp_avg_sq (F32) and
//                                       metadata {"step", "format": "spindle-adamw-v1"}
// Parameter names are the adapter's PEFT tensor keys, e.g.
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" — the trainer names its
// AdamW parameters peft_module_key(layer, target) + ".lora_A.weight" / ".lora_B.weight", so the
// file is exactly AdamW::save at that path. The state is separate from the adapter: a PEFT
// consumer ignores the extra file, and an adapter saved for sampling only has none.

#include <filesystem>

#include "spindle/engine/optimizer.h"

namespace spindle::adapters {

inline constexpr const char* kOptimizerStateFileName = "optimizer_state.safetensors";

// <dir>/optimizer_state.safetensors
std::filesystem::path optimizer_state_path(const std::filesystem::path& dir);

// True when dir holds an optimizer state file (regular file).
bool has_optimizer_state(const std::filesystem::path& dir);

// Writes the state atomically, creating dir if needed.
void save_optimizer_state(const engine::AdamW& optimizer, const std::filesystem::path& dir);

// Reads the state back exactly (bit-exact resume). Throws not_found naming the file when it is
// absent, format naming the file (and tensor) when it is not a valid AdamW state file.
engine::AdamW load_optimizer_state(const std::filesystem::path& dir);

}  // namespace spindle::adapters
