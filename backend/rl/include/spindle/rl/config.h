#pragma once
// The configuration of a GRPO run (JSON), parsed and validated before anything starts.
//
// {
//   "seed": 0, "steps": 40, "group_size": 8, "prompts_per_step": 8, "max_tokens": 8,
//   "temperature": 1.0, "eval_every": 10, "save_every": 10, "eval_prompts": 200,
//   "tenant": "local",
//   "policies": [{
//     "name": "arith-grpo", "rank": 8, "alpha": 16, "targets": ["q", "k", "v", "o", ...],
//     "learning_rate": 1e-3, "loss": "ppo",
//     "loss_config": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28, "beta": 0.05},
//     "kl_coef": 0.0, "advantage": "grpo" | "dr_grpo", "drop_uniform_groups": true,
//     "dataset": {"name": "arith"} | {"name": "gsm8k"} | {"name": "countdown"}
//              | {"name": "jsonl", "path": "...", "prompt_template": "Q: {question}\nA:",
//                 "reference_field": "answer", "heldout_size": 100}
//              | {"name": "inline", "prompts": ["Once upon a time", ...]},
//     "reward": {"terms": [{"name": "correct", "plugin": "numeric_match", "weight": 1}]},
//     "eval_metric_term": "correct"
//   }]
// }
// Unknown keys are refused (typos). Every error is invalid_argument naming the field path
// ("policies[1].learning_rate: must be > 0, got -1").

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spindle/engine/loss.h"
#include "spindle/engine/lora.h"
#include "spindle/rewards/rewards.h"

namespace spindle::rl {

enum class AdvantageMode : uint8_t {
  grpo,     // (r − mean) / (std + 1e-6)
  dr_grpo,  // r − mean (Dr. GRPO: no std normalisation)
};
const char* advantage_mode_name(AdvantageMode mode);

struct DatasetConfig {
  std::string name = "arith";  // arith | gsm8k | countdown | jsonl | inline
  std::string path;            // jsonl: the file (relative paths: to the data root)
  std::string prompt_template; // "{field}" placeholders; "" = the dataset's default
  std::string reference_field; // jsonl: the field holding the reference answer
  int64_t heldout_size = -1;   // -1 = the dataset's default
  std::vector<std::string> prompts;  // inline
};

struct PolicyConfig {
  std::string name;
  int64_t rank = 8;
  float alpha = 16.0f;
  std::vector<engine::LoraTarget> targets;  // default: q, k, v, o, gate, up, down
  float learning_rate = 1e-4f;
  engine::LossFn loss = engine::LossFn::ppo;
  engine::LossConfig loss_config;
  float kl_coef = 0.0f;
  AdvantageMode advantage = AdvantageMode::grpo;
  bool drop_uniform_groups = true;
  DatasetConfig dataset;
  rewards::RewardSpec reward;
  std::string eval_metric_term;  // "" = accuracy means total >= the spec's maximum
};

struct RunConfig {
  uint64_t seed = 0;
  int64_t steps = 20;
  int32_t group_size = 8;
  int32_t prompts_per_step = 8;
  int32_t max_tokens = 16;
  float temperature = 1.0f;
  int64_t eval_every = 10;  // 0 = only before the first and after the last step
  int64_t save_every = 10;  // 0 = only after the last step
  int32_t eval_prompts = 100;
  std::string tenant = "local";
  std::vector<PolicyConfig> policies;

  std::string to_json() const;
};

// Parses and validates; `source` names the file in errors.
RunConfig parse_run_config(const std::string& json_text, const std::string& source);
// Field-level checks of an already built config (parse_run_config calls it).
void validate_run_config(const RunConfig& config);

// The embedded default: dataset "arith" on the arithmetic base, numeric_match reward,
// a recipe that raises held-out exact match within minutes on two cores.
RunConfig default_arith_config();

}  // namespace spindle::rl
