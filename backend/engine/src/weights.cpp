#include "spindle/engine/weights.h"

#include "spindle/core/error.h"

namespace spindle::engine {

size_t ModelWeights::bytes() const {
  size_t total = 0;
  for_each_hf_tensor(*this, [&](const std::string&, const Tensor& t) { total += t.bytes(); });
  return total;
}

void ModelWeights::validate(const std::string& source) const {
  config.validate(source);
  const auto& c = config;
  SPINDLE_CHECK(int64_t(layers.size()) == c.n_layers, format, "{}: {} layers loaded, config says {}",
                source, layers.size(), c.n_layers);
  auto expect = [&](const std::string& name, const Tensor& t, Shape want) {
    SPINDLE_CHECK(t.shape() == want, format, "{}: tensor '{}' has shape {}, expected {}", source,
                  name, shape_str(t.shape()), shape_str(want));
  };
  for_each_hf_tensor(*this, [&](const std::string& name, const Tensor& t) {
    const auto ends = [&](const char* suffix) { return name.ends_with(suffix); };
    const bool expert = name.find(".mlp.experts.") != std::string::npos;
    const int64_t ed = c.moe.expert_dim;
    if (expert && (ends("gate_proj.weight") || ends("up_proj.weight")))
      expect(name, t, {ed, c.dim});
    else if (expert && ends("down_proj.weight"))
      expect(name, t, {c.dim, ed});
    else if (ends("mlp.gate.weight"))
      expect(name, t, {c.moe.n_experts, c.dim});
    else if (ends("embed_tokens.weight") || ends("lm_head.weight"))
      expect(name, t, {c.vocab_size, c.dim});
    else if (ends("layernorm.weight") || name == "model.norm.weight") expect(name, t, {c.dim});
    else if (ends("q_proj.weight")) expect(name, t, {c.q_dim(), c.dim});
    else if (ends("k_proj.weight") || ends("v_proj.weight")) expect(name, t, {c.kv_dim(), c.dim});
    else if (ends("o_proj.weight")) expect(name, t, {c.dim, c.q_dim()});
    else if (ends("q_norm.weight") || ends("k_norm.weight")) expect(name, t, {c.head_dim});
    else if (ends("gate_proj.weight") || ends("up_proj.weight")) expect(name, t, {c.hidden_dim, c.dim});
    else if (ends("down_proj.weight")) expect(name, t, {c.dim, c.hidden_dim});
  });
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool sparse = c.sparse_layer(int64_t(i));
    const LayerWeights& L = layers[i];
    SPINDLE_CHECK(sparse ? int64_t(L.experts.size()) == c.moe.n_experts && L.w_gate.empty()
                         : L.experts.empty() && !L.w_gate.empty(),
                  format, "{}: layer {} should hold {} but holds {}", source, i,
                  sparse ? fmt::format("{} routed experts", c.moe.n_experts) : "a dense MLP",
                  L.experts.empty() ? "a dense MLP" : fmt::format("{} experts", L.experts.size()));
  }
  if (c.qk_norm()) {
    for (size_t i = 0; i < layers.size(); ++i) {
      SPINDLE_CHECK(!layers[i].q_norm.empty() && !layers[i].k_norm.empty(), format,
                    "{}: qwen3 layer {} lacks self_attn.q_norm / k_norm weights", source, i);
    }
  }
}

}  // namespace spindle::engine
