#pragma once
// Shared pieces of the GPU training tests: the tiny random models of the CPU tests on a device,
// the CPU engine's trainer as the reference, training batches like the CPU gradient test's,
// and element-wise comparisons that say where they mismatched.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "../../unit/model/model_fixtures.h"
#include "../gpu_test_util.h"
#include "spindle/engine/trainer.h"
#include "spindle/engine_cuda/trainer.h"

namespace spindle::engine_cuda::testing {

using engine::Arch;
using engine::LoraTarget;
using engine::LoraWeights;
using engine::LossFn;
using engine::TrainDatum;

inline constexpr auto kAllTargets = engine::kAllLoraTargets;

// The CPU tests' tiny configs (odd sizes: dim 48, hidden 80, vocab 97, GQA 6/2). Qwen3's
// head_dim 12 becomes 16: the CUDA attention kernels take head_dim multiples of 8.
using spindle::testing::gpu_tiny_config;

// One random base on the CPU (reference) and on the device, with a slot pool on each side.
struct Rig {
  engine::ModelWeights weights;
  std::unique_ptr<engine::Model> cpu_model;
  std::unique_ptr<engine::LoraSlotPool> cpu_pool;
  std::unique_ptr<engine::LoraTrainer> cpu_trainer;
  std::unique_ptr<DeviceWeights> dev_weights;
  std::unique_ptr<DeviceModel> dev_model;
  std::unique_ptr<DeviceLoraPool> dev_pool;
  std::unique_ptr<DeviceTrainer> dev_trainer;

  Rig(Arch arch, uint64_t seed, Precision precision, engine::LoraPoolOptions pool_options,
      DeviceTrainerOptions trainer_options = {})
      : Rig(gpu_tiny_config(arch), seed, precision, pool_options, trainer_options) {}
  Rig(const engine::ModelConfig& config, uint64_t seed, Precision precision,
      engine::LoraPoolOptions pool_options, DeviceTrainerOptions trainer_options = {})
      : weights(spindle::testing::random_weights(config, seed)) {
    cpu_model = std::make_unique<engine::Model>(weights);
    cpu_pool = std::make_unique<engine::LoraSlotPool>(weights.config, pool_options);
    cpu_trainer = std::make_unique<engine::LoraTrainer>(*cpu_model, *cpu_pool);
    dev_weights = std::make_unique<DeviceWeights>(weights, precision);
    dev_model = std::make_unique<DeviceModel>(*dev_weights);
    dev_pool = std::make_unique<DeviceLoraPool>(weights.config, pool_options);
    dev_trainer = std::make_unique<DeviceTrainer>(*dev_model, *dev_pool, trainer_options);
  }
  const engine::ModelConfig& config() const { return weights.config; }
};

// Data of the given lengths and slots, first token of each masked (weight 0), advantages
// spread over [-1.4, 1.4]. For the RL losses the sampler's logprobs are the CPU model's own
// plus offsets that put ρ well inside or well outside the clip range (never near a kink).
inline std::vector<TrainDatum> make_batch(const engine::ModelConfig& c,
                                          const std::vector<size_t>& lens,
                                          const std::vector<int32_t>& slots, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::vector<TrainDatum> batch(lens.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    TrainDatum& d = batch[i];
    d.slot = slots[i];
    for (size_t t = 0; t < lens[i]; ++t) {
      d.input_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      d.target_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      d.weights.push_back(t == 0 ? 0.0f : 0.5f + float(t % 3));
      d.advantages.push_back(float(int(rng() % 5) - 2) * 0.7f);
    }
  }
  return batch;
}

// Fills the sampler logprobs from a forward of `trainer` (whose slots hold the adapters).
inline void add_sampler_logprobs(engine::LoraTrainer& trainer, std::vector<TrainDatum>& batch) {
  const auto out = trainer.forward(batch, LossFn::cross_entropy);
  const float offsets[4] = {-0.3f, -0.05f, 0.05f, 0.4f};
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].logprobs.clear();
    for (size_t t = 0; t < batch[i].target_tokens.size(); ++t)
      batch[i].logprobs.push_back(out.logprobs[i][t] + offsets[(i + t) % 4]);
  }
}

// got ≈ want element-wise: |got − want| <= atol + rtol·max|want| (the tensor's scale, so tiny
// entries of a large gradient are not held to a relative bound). Reports the mismatch count,
// the first index, both values and the tolerance.
inline ::testing::AssertionResult tensors_close(const Tensor& got, const Tensor& want, double rtol,
                                                double atol) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  }
  double scale = 0.0;
  for (float x : want.span()) scale = std::max(scale, double(std::abs(x)));
  const double tol = atol + rtol * scale;
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = std::abs(double(got.data()[i]) - double(want.data()[i]));
    if (!(d <= tol)) {
      if (first < 0) first = i;
      ++bad;
    }
    worst = std::max(worst, d);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << want.numel() << " elements differ; first at index " << first
         << ": got " << got.data()[first] << ", want " << want.data()[first] << ", tolerance "
         << tol << " (max |diff| " << worst << ", scale " << scale << ")";
}

// The adapted tensor named `name` (engine::for_each_lora_tensor's names) of `w`.
template <class W>
auto& lora_tensor(W& w, const std::string& name) {
  decltype(&w.modules[0][0].A) found = nullptr;
  engine::for_each_lora_tensor(w, [&](const std::string& n, auto& t) {
    if (n == name) found = &t;
  });
  if (found == nullptr) throw std::runtime_error("no adapted tensor named " + name);
  return *found;
}

// Every adapted tensor of two adapter-shaped LoraWeights (same layout: dense modules, then
// routed experts' packed tensors) compared as above.
inline void expect_lora_close(const LoraWeights& got, const LoraWeights& want, double rtol,
                              double atol, const std::string& what) {
  std::vector<std::pair<std::string, const Tensor*>> g, w;
  engine::for_each_lora_tensor(got, [&](const std::string& n, const Tensor& t) {
    g.emplace_back(n, &t);
  });
  engine::for_each_lora_tensor(want, [&](const std::string& n, const Tensor& t) {
    w.emplace_back(n, &t);
  });
  ASSERT_EQ(g.size(), w.size()) << what << ": adapted tensor count";
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(g[i].first, w[i].first) << what;
    EXPECT_TRUE(tensors_close(*g[i].second, *w[i].second, rtol, atol)) << what << " " << w[i].first;
  }
}

}  // namespace spindle::engine_cuda::testing
