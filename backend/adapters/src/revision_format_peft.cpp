// read_peft_dir: a PEFT adapter directory without a base model to check it against.

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

#include "spindle/adapters/revision_format.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {
namespace {

using engine::LoraTarget;

// Largest "layers.<n>." index among the tensor names, or -1.
int64_t max_layer_index(const engine::SafetensorsFile& file) {
  int64_t best = -1;
  for (const auto& e : file.entries()) {
    const size_t at = e.name.find(".layers.");
    if (at == std::string::npos) continue;
    size_t i = at + 8;
    int64_t v = 0;
    size_t digits = 0;
    while (i < e.name.size() && e.name[i] >= '0' && e.name[i] <= '9' && digits < 7) {
      v = v * 10 + (e.name[i] - '0');
      ++i;
      ++digits;
    }
    if (digits > 0) best = std::max(best, v);
  }
  return best;
}

// "base_model.model.model.layers.<l>.mlp.experts.<e>.<proj>.lora_<A|B>[.default].weight" →
// (l, e, target, 'A'|'B'); nullopt for any other name.
struct ExpertKey {
  int64_t layer = 0, expert = 0;
  LoraTarget target = LoraTarget::gate;
  char which = 'A';
};
std::optional<ExpertKey> parse_expert_key(std::string_view name) {
  auto eat = [&](std::string_view lit) {
    if (!name.starts_with(lit)) return false;
    name.remove_prefix(lit.size());
    return true;
  };
  auto number = [&](int64_t& v) {
    size_t n = 0;
    v = 0;
    while (n < name.size() && n < 7 && name[n] >= '0' && name[n] <= '9')
      v = v * 10 + (name[n++] - '0');
    name.remove_prefix(n);
    return n > 0;
  };
  ExpertKey k;
  if (!eat("base_model.model.model.layers.") || !number(k.layer) || !eat(".mlp.experts.") ||
      !number(k.expert) || !eat(".")) {
    return std::nullopt;
  }
  bool proj = false;
  for (LoraTarget t : engine::kExpertProjTargets) {
    if (eat(engine::lora_target_name(t))) {
      k.target = t;
      proj = true;
      break;
    }
  }
  if (!proj || !eat(".lora_") || name.empty()) return std::nullopt;
  k.which = name[0];
  name.remove_prefix(1);
  if (k.which != 'A' && k.which != 'B') return std::nullopt;
  eat(".default");
  if (name != ".weight") return std::nullopt;
  return k;
}

}  // namespace

PeftImport read_peft_dir(const std::filesystem::path& dir) {
  const auto config_path = dir / "adapter_config.json";
  const auto model_path = dir / "adapter_model.safetensors";
  SPINDLE_CHECK(std::filesystem::is_directory(dir), not_found,
                "adapter directory {} does not exist", dir.string());
  SPINDLE_CHECK(std::filesystem::exists(config_path), not_found, "{} is missing",
                config_path.string());
  SPINDLE_CHECK(std::filesystem::exists(model_path), not_found,
                "{} is missing (only the safetensors format is read)", model_path.string());
  PeftImport out;
  out.config = parse_peft_config(read_file_to_string(config_path), config_path.string());
  const engine::SafetensorsFile file(model_path);
  const std::string src = model_path.string();

  const int64_t n_layers = std::max<int64_t>(max_layer_index(file) + 1, 1);
  std::map<std::string, std::tuple<int64_t, LoraTarget, char>> keys;
  for (LoraTarget t : engine::kAllLoraTargets) {
    const int64_t layers = engine::lora_target_per_layer(t) ? n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      // A DeepSeek sparse layer's shared experts (mlp.shared_experts.*) are the layer's dense
      // MLP targets; a file holding both names for one layer is refused as a duplicate.
      std::vector<std::string> names = {peft_module_key(l, t)};
      if (engine::expert_proj(t) >= 0) names.push_back(peft_shared_expert_key(l, t));
      for (const std::string& k : names) {
        for (const char* suffix : {"", ".default"}) {
          keys[k + ".lora_A" + suffix + ".weight"] = {l, t, 'A'};
          keys[k + ".lora_B" + suffix + ".weight"] = {l, t, 'B'};
        }
      }
    }
  }
  engine::LoraWeights& w = out.weights;
  w.rank = out.config.r;
  w.alpha = out.config.lora_alpha;
  w.use_rslora = out.config.use_rslora;
  w.modules.resize(size_t(n_layers));
  const auto& configured = out.config.target_modules;
  // Routed experts' tensors, [layer][proj] → expert → (A, B), packed after the loop.
  std::map<std::pair<int64_t, int>, std::map<int64_t, engine::LoraPair>> experts;
  for (const auto& e : file.entries()) {
    if (const auto k = parse_expert_key(e.name)) {
      SPINDLE_CHECK(std::find(configured.begin(), configured.end(), k->target) != configured.end(),
                    format, "{}: tensor '{}' adapts {}, which target_modules does not list", src,
                    e.name, engine::lora_target_name(k->target));
      SPINDLE_CHECK(e.shape.size() == 2 && (k->which == 'A' ? e.shape[0] : e.shape[1]) == w.rank,
                    format, "{}: tensor '{}' has shape {}, expected rank r = {} on its {} axis",
                    src, e.name, shape_str(e.shape), w.rank, k->which == 'A' ? "first" : "second");
      engine::LoraPair& p = experts[{k->layer, engine::expert_proj(k->target)}][k->expert];
      Tensor& dst = k->which == 'A' ? p.A : p.B;
      SPINDLE_CHECK(dst.empty(), format, "{}: tensor '{}' appears twice", src, e.name);
      dst = file.read_f32(e);
      continue;
    }
    const auto it = keys.find(e.name);
    SPINDLE_CHECK(it != keys.end(), unsupported,
                  "{}: tensor '{}' is not a LoRA A/B weight of a module Spindle adapts", src,
                  e.name);
    const auto [layer, target, which] = it->second;
    SPINDLE_CHECK(std::find(configured.begin(), configured.end(), target) != configured.end(),
                  format, "{}: tensor '{}' adapts {}, which target_modules does not list", src,
                  e.name, engine::lora_target_name(target));
    SPINDLE_CHECK(e.shape.size() == 2 && (which == 'A' ? e.shape[0] : e.shape[1]) == w.rank, format,
                  "{}: tensor '{}' has shape {}, expected rank r = {} on its {} axis", src, e.name,
                  shape_str(e.shape), w.rank, which == 'A' ? "first" : "second");
    engine::LoraPair& p = w.modules[size_t(layer)][size_t(target)];
    Tensor& dst = which == 'A' ? p.A : p.B;
    SPINDLE_CHECK(dst.empty(), format, "{}: tensor '{}' appears twice", src, e.name);
    dst = file.read_f32(e);
  }
  bool any = false;
  for (int64_t l = 0; l < n_layers; ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      const engine::LoraPair& p = w.modules[size_t(l)][size_t(t)];
      SPINDLE_CHECK(p.A.empty() == p.B.empty(), format, "{}: {} has lora_{} but no lora_{}", src,
                    peft_module_key(l, t), p.A.empty() ? "B" : "A", p.A.empty() ? "A" : "B");
      any = any || !p.A.empty();
    }
  }
  // Pack each (layer, projection)'s experts 0..E−1 (every one present, one shape) as
  // engine::ExpertLoraPair.
  for (const auto& [where, by_expert] : experts) {
    const auto [l, proj] = where;
    const LoraTarget t = engine::kExpertProjTargets[proj];
    const int64_t E = by_expert.rbegin()->first + 1;
    const engine::LoraPair& first = by_expert.begin()->second;
    for (int64_t e = 0; e < E; ++e) {
      const auto it = by_expert.find(e);
      SPINDLE_CHECK(it != by_expert.end() && !it->second.A.empty() && !it->second.B.empty(), format,
                    "{}: {} lacks lora_{} ({} experts are adapted in that layer)", src,
                    peft_expert_key(l, e, t),
                    it == by_expert.end() || it->second.A.empty() ? "A" : "B", E);
      SPINDLE_CHECK(
          it->second.A.shape() == first.A.shape() && it->second.B.shape() == first.B.shape(),
          format, "{}: {} is shaped {} / {}, other experts of its layer {} / {}", src,
          peft_expert_key(l, e, t), shape_str(it->second.A.shape()),
          shape_str(it->second.B.shape()), shape_str(first.A.shape()), shape_str(first.B.shape()));
    }
    if (w.experts.empty()) w.experts.resize(size_t(n_layers));
    const int64_t r = first.A.dim(0), d_in = first.A.dim(1), d_out = first.B.dim(0);
    engine::ExpertLoraPair& dst = w.experts[size_t(l)][size_t(proj)];
    dst.A = Tensor({E, r, d_in});
    dst.B = Tensor({E, d_out, r});
    for (int64_t e = 0; e < E; ++e) {
      const engine::LoraPair& p = by_expert.at(e);
      std::memcpy(dst.A.data() + e * r * d_in, p.A.data(), size_t(r * d_in) * sizeof(float));
      std::memcpy(dst.B.data() + e * d_out * r, p.B.data(), size_t(d_out * r) * sizeof(float));
    }
    any = true;
  }
  SPINDLE_CHECK(any, format, "{}: the adapter holds no LoRA tensors", src);
  return out;
}

}  // namespace spindle::adapters
