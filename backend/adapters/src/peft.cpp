#include "spindle/adapters/peft.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>

#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {

using engine::LoraTarget;
using json = nlohmann::json;

std::string peft_module_key(int64_t layer, LoraTarget target, const engine::ModelConfig* base) {
  if (base != nullptr && engine::expert_proj(target) >= 0 && base->sparse_layer(layer)) {
    return peft_shared_expert_key(layer, target);
  }
  return engine::lora_module_key(layer, target);
}

std::string peft_shared_expert_key(int64_t layer, LoraTarget target) {
  return fmt::format("base_model.model.model.layers.{}.mlp.shared_experts.{}", layer,
                     engine::lora_target_name(target));
}

std::string peft_expert_key(int64_t layer, int64_t expert, LoraTarget target) {
  return fmt::format("base_model.model.model.layers.{}.mlp.experts.{}.{}", layer, expert,
                     engine::lora_target_name(target));
}

PeftConfig parse_peft_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    SPINDLE_THROW(format, "{}: not valid JSON: {}", source, e.what());
  }
  SPINDLE_CHECK(j.is_object(), format, "{}: expected a JSON object", source);
  PeftConfig c;
  auto number = [&](const char* field) -> double {
    SPINDLE_CHECK(j.contains(field) && j[field].is_number(), format,
                  "{}: field '{}' missing or not a number", source, field);
    return j[field].get<double>();
  };
  const double r = number("r");
  SPINDLE_CHECK(r >= 1 && r <= 4096 && r == std::floor(r), invalid_argument,
                "{}: r must be a positive integer, got {}", source, r);
  c.r = int64_t(r);
  c.lora_alpha = float(number("lora_alpha"));
  if (j.contains("use_rslora") && !j["use_rslora"].is_null()) {
    SPINDLE_CHECK(j["use_rslora"].is_boolean(), format, "{}: use_rslora must be a boolean",
                  source);
    c.use_rslora = j["use_rslora"].get<bool>();
  }
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()) {
    c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  }
  auto refuse_if = [&](const char* field, bool bad, const char* why) {
    SPINDLE_CHECK(!bad, unsupported, "{}: {} is not supported ({})", source, field, why);
  };
  auto truthy = [&](const char* f) { return j.contains(f) && j[f].is_boolean() && j[f].get<bool>(); };
  auto non_empty = [&](const char* f) {
    return j.contains(f) && !j[f].is_null() && !(j[f].is_object() && j[f].empty()) &&
           !(j[f].is_array() && j[f].empty());
  };
  refuse_if("use_dora", truthy("use_dora"), "DoRA adapters");
  refuse_if("fan_in_fan_out", truthy("fan_in_fan_out"), "Conv1D-style transposed weights");
  refuse_if("rank_pattern", non_empty("rank_pattern"), "per-module ranks");
  refuse_if("alpha_pattern", non_empty("alpha_pattern"), "per-module alphas");
  refuse_if("modules_to_save", non_empty("modules_to_save"), "full copies of base modules");
  refuse_if("bias", j.contains("bias") && j["bias"].is_string() && j["bias"] != "none",
            "trained biases");

  SPINDLE_CHECK(j.contains("target_modules"), format, "{}: field 'target_modules' missing", source);
  const json& tm = j["target_modules"];
  if (tm.is_string()) {
    const std::string s = tm.get<std::string>();
    if (s == "all-linear") {
      for (LoraTarget t : engine::kAllLoraTargets) {
        if (t != LoraTarget::lm_head) c.target_modules.push_back(t);
      }
    } else {
      // PEFT: a string is a regex fully matched against module names.
      std::regex re;
      try {
        re = std::regex(s);
      } catch (const std::regex_error& e) {
        SPINDLE_THROW(format, "{}: target_modules regex '{}' is invalid: {}", source, s, e.what());
      }
      for (LoraTarget t : engine::kAllLoraTargets) {
        const std::string key = peft_module_key(0, t).substr(std::string("base_model.model.").size());
        if (std::regex_match(key, re)) {
          c.target_modules.push_back(t);
        }
      }
    }
  } else {
    SPINDLE_CHECK(tm.is_array(), format, "{}: target_modules must be a list or a string", source);
    for (const auto& m : tm) {
      SPINDLE_CHECK(m.is_string(), format, "{}: target_modules entries must be strings", source);
      const auto t = engine::lora_target_from_name(m.get<std::string>());
      SPINDLE_CHECK(t.has_value(), unsupported,
                    "{}: target module '{}' is not one Spindle adapts (q_proj, k_proj, v_proj, "
                    "o_proj, gate_proj, up_proj, down_proj, lm_head; MLA: q_a_proj, q_b_proj, "
                    "kv_a_proj_with_mqa, kv_b_proj)",
                    source, m.get<std::string>());
      c.target_modules.push_back(*t);
    }
  }
  SPINDLE_CHECK(!c.target_modules.empty(), invalid_argument, "{}: target_modules is empty",
                source);
  return c;
}

engine::LoraWeights load_peft(const std::filesystem::path& dir, const engine::ModelConfig& base) {
  // read_peft_dir checks the files on their own (config, keys, ranks, pairs); what is left is
  // whether they fit this base.
  PeftImport imported = read_peft_dir(dir);
  engine::LoraWeights& w = imported.weights;
  const std::string src = (dir / "adapter_model.safetensors").string();
  SPINDLE_CHECK(int64_t(w.modules.size()) <= base.n_layers, invalid_argument,
                "{}: the adapter has tensors for layer {}, the base has {} layers (hint: maybe "
                "wrong base model?)",
                src, w.modules.size() - 1, base.n_layers);
  w.modules.resize(size_t(base.n_layers));
  if (w.has_experts()) w.experts.resize(size_t(base.n_layers));
  w.validate(base, src);
  return std::move(w);
}

void save_peft(const engine::LoraWeights& adapter, const std::filesystem::path& dir,
               const PeftSaveOptions& options) {
  std::filesystem::create_directories(dir);
  std::vector<engine::SafetensorsTensorIn> tensors;
  for (size_t l = 0; l < adapter.modules.size(); ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      const engine::LoraPair& p = adapter.modules[l][size_t(t)];
      if (p.empty()) continue;
      const std::string key = peft_module_key(int64_t(l), t, options.base);
      tensors.push_back({key + ".lora_A.weight", options.dtype, p.A.shape(), p.A.data()});
      tensors.push_back({key + ".lora_B.weight", options.dtype, p.B.shape(), p.B.data()});
    }
  }
  // Routed experts as PEFT writes them for Qwen3-MoE: one [r, d_in] / [d_out, r] pair per expert
  // (slices of the packed tensors).
  for (size_t l = 0; l < adapter.experts.size(); ++l) {
    for (LoraTarget t : engine::kExpertProjTargets) {
      const engine::ExpertLoraPair& p = adapter.experts[l][size_t(engine::expert_proj(t))];
      if (p.empty()) continue;
      const int64_t E = p.A.dim(0), r = p.A.dim(1), d_in = p.A.dim(2), d_out = p.B.dim(1);
      for (int64_t e = 0; e < E; ++e) {
        const std::string key = peft_expert_key(int64_t(l), e, t);
        tensors.push_back(
            {key + ".lora_A.weight", options.dtype, {r, d_in}, p.A.data() + e * r * d_in});
        tensors.push_back(
            {key + ".lora_B.weight", options.dtype, {d_out, r}, p.B.data() + e * d_out * r});
      }
    }
  }
  engine::write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  json cfg = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", adapter.rank},
      {"lora_alpha", adapter.alpha},
      {"use_rslora", adapter.use_rslora},
      {"lora_dropout", 0.0},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"base_model_name_or_path", options.base_model_name_or_path},
      {"target_modules", json::array()},
  };
  for (LoraTarget t : adapted_targets(adapter)) {
    cfg["target_modules"].push_back(engine::lora_target_name(t));
  }
  write_file_atomic(dir / "adapter_config.json", cfg.dump(2) + "\n");
}

std::vector<LoraTarget> adapted_targets(const engine::LoraWeights& adapter) {
  std::vector<LoraTarget> out;
  for (LoraTarget t : engine::kAllLoraTargets) {
    bool any = false;
    for (const auto& layer : adapter.modules) any = any || !layer[size_t(t)].empty();
    const int p = engine::expert_proj(t);
    for (const auto& layer : adapter.experts) any = any || (p >= 0 && !layer[size_t(p)].empty());
    if (any) out.push_back(t);
  }
  return out;
}

}  // namespace spindle::adapters
