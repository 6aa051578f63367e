#include "spindle/adapters/peft.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {

using engine::LoraTarget;
using json = nlohmann::json;

std::string peft_module_key(int64_t layer, LoraTarget target) {
  return engine::lora_module_key(layer, target);
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
                    "o_proj, gate_proj, up_proj, down_proj, lm_head)",
                    source, m.get<std::string>());
      c.target_modules.push_back(*t);
    }
  }
  SPINDLE_CHECK(!c.target_modules.empty(), invalid_argument, "{}: target_modules is empty",
                source);
  return c;
}

namespace {

// Splits "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight" into (3, q, 'A').
struct ParsedKey {
  int64_t layer = 0;
  LoraTarget target = LoraTarget::q;
  char which = 'A';
};

std::optional<ParsedKey> parse_key(const std::string& key) {
  static const std::regex layer_re(
      R"(^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight$)");
  static const std::regex head_re(
      R"(^base_model\.model\.lm_head\.lora_([AB])(?:\.default)?\.weight$)");
  std::smatch m;
  if (std::regex_match(key, m, layer_re)) {
    const auto t = engine::lora_target_from_name(m[3].str());
    if (!t || *t == LoraTarget::lm_head || m[1].str().size() > 6) return std::nullopt;
    return ParsedKey{std::stoll(m[1].str()), *t, m[4].str()[0]};
  }
  if (std::regex_match(key, m, head_re)) return ParsedKey{0, LoraTarget::lm_head, m[1].str()[0]};
  return std::nullopt;
}

}  // namespace

engine::LoraWeights load_peft(const std::filesystem::path& dir, const engine::ModelConfig& base) {
  const auto config_path = dir / "adapter_config.json";
  const auto model_path = dir / "adapter_model.safetensors";
  SPINDLE_CHECK(std::filesystem::is_directory(dir), not_found,
                "adapter directory {} does not exist", dir.string());
  SPINDLE_CHECK(std::filesystem::exists(config_path), not_found, "{} is missing",
                config_path.string());
  SPINDLE_CHECK(std::filesystem::exists(model_path), not_found,
                "{} is missing (only the safetensors format is read)", model_path.string());
  const PeftConfig cfg = parse_peft_config(read_file_to_string(config_path), config_path.string());

  engine::LoraWeights w;
  w.rank = cfg.r;
  w.alpha = cfg.lora_alpha;
  w.use_rslora = cfg.use_rslora;
  w.modules.resize(size_t(base.n_layers));
  const engine::SafetensorsFile file(model_path);
  const std::string src = model_path.string();
  for (const auto& e : file.entries()) {
    const auto key = parse_key(e.name);
    SPINDLE_CHECK(key.has_value(), unsupported,
                  "{}: tensor '{}' is not a LoRA A/B weight of a module Spindle adapts", src,
                  e.name);
    SPINDLE_CHECK(key->layer < base.n_layers, invalid_argument,
                  "{}: tensor '{}' is for layer {}, the base has {} layers (hint: maybe wrong "
                  "base model?)",
                  src, e.name, key->layer, base.n_layers);
    engine::LoraPair& p = w.modules[size_t(key->layer)][size_t(key->target)];
    Tensor& dst = key->which == 'A' ? p.A : p.B;
    SPINDLE_CHECK(dst.empty(), format, "{}: tensor '{}' appears twice", src, e.name);
    dst = file.read_f32(e);
  }
  for (int64_t l = 0; l < base.n_layers; ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      const engine::LoraPair& p = w.modules[size_t(l)][size_t(t)];
      SPINDLE_CHECK(p.A.empty() == p.B.empty(), format, "{}: {} has lora_{} but no lora_{}", src,
                    peft_module_key(l, t), p.A.empty() ? "B" : "A", p.A.empty() ? "A" : "B");
    }
  }
  w.validate(base, src);
  return w;
}

void save_peft(const engine::LoraWeights& adapter, const std::filesystem::path& dir,
               const PeftSaveOptions& options) {
  std::filesystem::create_directories(dir);
  std::vector<engine::SafetensorsTensorIn> tensors;
  for (size_t l = 0; l < adapter.modules.size(); ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      const engine::LoraPair& p = adapter.modules[l][size_t(t)];
      if (p.empty()) continue;
      const std::string key = peft_module_key(int64_t(l), t);
      tensors.push_back({key + ".lora_A.weight", options.dtype, p.A.shape(), p.A.data()});
      tensors.push_back({key + ".lora_B.weight", options.dtype, p.B.shape(), p.B.data()});
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
    for (const auto& layer : adapter.modules) {
      if (!layer[size_t(t)].empty()) {
        out.push_back(t);
        break;
      }
    }
  }
  return out;
}

}  // namespace spindle::adapters
