// read_peft_dir: a PEFT adapter directory without a base model to check it against.

#include <algorithm>
#include <map>
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
      const std::string k = peft_module_key(l, t);
      for (const char* suffix : {"", ".default"}) {
        keys[k + ".lora_A" + suffix + ".weight"] = {l, t, 'A'};
        keys[k + ".lora_B" + suffix + ".weight"] = {l, t, 'B'};
      }
    }
  }
  engine::LoraWeights& w = out.weights;
  w.rank = out.config.r;
  w.alpha = out.config.lora_alpha;
  w.use_rslora = out.config.use_rslora;
  w.modules.resize(size_t(n_layers));
  const auto& configured = out.config.target_modules;
  for (const auto& e : file.entries()) {
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
  SPINDLE_CHECK(any, format, "{}: the adapter holds no LoRA tensors", src);
  return out;
}

}  // namespace spindle::adapters
