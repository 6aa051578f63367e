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
  for_each_hf_tensor_shape(*this, [&](const std::string& name, const Tensor& t, const Shape& want) {
    expect(name, t, want);
  });
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool sparse = c.sparse_layer(int64_t(i));
    const LayerWeights& L = layers[i];
    SPINDLE_CHECK(sparse ? int64_t(L.experts.size()) == c.moe.n_experts : L.experts.empty(), format,
                  "{}: layer {} should hold {} but holds {}", source, i,
                  sparse ? fmt::format("{} routed experts", c.moe.n_experts) : "a dense MLP",
                  L.experts.empty() ? "a dense MLP" : fmt::format("{} experts", L.experts.size()));
  }
}

}  // namespace spindle::engine
