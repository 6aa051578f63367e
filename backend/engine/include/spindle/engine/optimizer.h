#pragma once
// AdamW with Tinker's AdamParams, bias-corrected, decoupled weight decay, optional global
// grad-norm clip. One AdamW instance holds the state (m, v, step) of one parameter set (one
// adapter, or a whole base in full-parameter mode); the state lives with the adapter.
//
// Per element, at step t (1-based), after optional clipping g ← g·min(1, clip/‖g‖₂):
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   p ← p − lr·wd·p − lr · (m/(1−β1ᵗ)) / (√(v/(1−β2ᵗ)) + ε)
// so with a huge ε the first update is lr·g/ε.

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "spindle/core/tensor.h"

namespace spindle::engine {

struct AdamParams {
  float learning_rate = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-12f;
  float weight_decay = 0.0f;
  float grad_clip_norm = 0.0f;  // 0 = off
  void validate() const;        // invalid_argument naming the field
};

// A named parameter and its gradient, same shape.
struct ParamRef {
  std::string name;
  Tensor* param = nullptr;
  const Tensor* grad = nullptr;
};

struct OptimStepResult {
  double grad_norm = 0.0;  // before clipping
  bool clipped = false;
  int64_t step = 0;        // step count after this update
};

class AdamW {
 public:
  AdamW() = default;

  // Updates every param in place. The first call fixes the parameter set (names and shapes);
  // later calls must pass the same set (invalid_argument otherwise).
  OptimStepResult step(std::span<const ParamRef> params, const AdamParams& hp);

  int64_t step_count() const { return step_; }
  // Moments by parameter name (empty before the first step).
  const std::map<std::string, std::pair<Tensor, Tensor>>& moments() const { return moments_; }

  // Saves m and v of every parameter (`<name>.exp_avg`, `<name>.exp_avg_sq`) and the step
  // count (metadata "step") as one safetensors file, atomically; load restores it exactly
  // (bit-exact resume). load throws naming the file and tensor on a missing or misshapen entry.
  void save(const std::filesystem::path& file) const;
  static AdamW load(const std::filesystem::path& file);
  // The same safetensors bytes in memory (a blob); `source` names them in errors.
  std::string serialize() const;
  // A state from its parts (a copy of another AdamW's, or one a device downloaded): `moments`
  // by parameter name, (m, v) each shaped like the parameter.
  static AdamW restore(int64_t step, std::map<std::string, std::pair<Tensor, Tensor>> moments);
  AdamW clone() const;  // the same step and moments (tensors are never copied implicitly)
  static AdamW deserialize(std::string bytes, const std::string& source);

 private:
  int64_t step_ = 0;
  std::map<std::string, std::pair<Tensor, Tensor>> moments_;  // name -> (m, v)
};

}  // namespace spindle::engine
