// AdamW (optimizer.h). Moments are stored in fp32; each element's update is computed in double
// from the fp32 state and rounded once, so a run is deterministic and a save/load resume is
// bit-exact. A step validates everything (shapes, names, finiteness) before touching any
// parameter or moment: a throwing step leaves the optimizer and the parameters unchanged.

#include "spindle/engine/optimizer.h"

#include <charconv>
#include <cmath>
#include <set>

#include "spindle/core/error.h"
#include "spindle/core/file_io.h"
#include "spindle/engine/safetensors.h"

namespace spindle::engine {
namespace {

constexpr const char* kFormat = "spindle-adamw-v1";
constexpr std::string_view kAvgSuffix = ".exp_avg";
constexpr std::string_view kAvgSqSuffix = ".exp_avg_sq";

// Checks pointers, shapes and names of one call's params, and that they match the fixed set
// once there is one.
void check_param_set(std::span<const ParamRef> params,
                     const std::map<std::string, std::pair<Tensor, Tensor>>& moments) {
  SPINDLE_CHECK(!params.empty(), invalid_argument, "AdamW::step: no parameters given");
  std::set<std::string_view> seen;
  for (const ParamRef& p : params) {
    SPINDLE_CHECK(!p.name.empty(), invalid_argument, "AdamW::step: a parameter has no name");
    SPINDLE_CHECK(p.param != nullptr && p.grad != nullptr, invalid_argument,
                  "AdamW::step: parameter '{}' has a null {} tensor", p.name,
                  p.param == nullptr ? "param" : "grad");
    SPINDLE_CHECK(p.param->shape() == p.grad->shape(), invalid_argument,
                  "AdamW::step: parameter '{}' has shape {} but its gradient has shape {}", p.name,
                  shape_str(p.param->shape()), shape_str(p.grad->shape()));
    SPINDLE_CHECK(seen.insert(p.name).second, invalid_argument,
                  "AdamW::step: parameter '{}' is given twice", p.name);
    if (moments.empty()) continue;
    const auto it = moments.find(p.name);
    SPINDLE_CHECK(it != moments.end(), invalid_argument,
                  "AdamW::step: parameter '{}' is not in the optimizer's parameter set "
                  "(fixed by the first step: {} parameters)",
                  p.name, moments.size());
    SPINDLE_CHECK(it->second.first.shape() == p.param->shape(), invalid_argument,
                  "AdamW::step: parameter '{}' has shape {} but the optimizer state has {}", p.name,
                  shape_str(p.param->shape()), shape_str(it->second.first.shape()));
  }
  if (!moments.empty() && params.size() != moments.size()) {
    for (const auto& [name, mv] : moments) {
      SPINDLE_CHECK(seen.count(name) != 0, invalid_argument,
                    "AdamW::step: parameter '{}' of the optimizer's parameter set is missing "
                    "({} given, {} expected)",
                    name, params.size(), moments.size());
    }
  }
}

}  // namespace

void AdamParams::validate() const {
  SPINDLE_CHECK(std::isfinite(learning_rate) && learning_rate >= 0.0f, invalid_argument,
                "AdamParams: learning_rate must be finite and >= 0, got {}", learning_rate);
  SPINDLE_CHECK(beta1 >= 0.0f && beta1 < 1.0f, invalid_argument,
                "AdamParams: beta1 must be in [0, 1), got {}", beta1);
  SPINDLE_CHECK(beta2 >= 0.0f && beta2 < 1.0f, invalid_argument,
                "AdamParams: beta2 must be in [0, 1), got {}", beta2);
  SPINDLE_CHECK(std::isfinite(eps) && eps > 0.0f, invalid_argument,
                "AdamParams: eps must be finite and > 0, got {}", eps);
  SPINDLE_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0f, invalid_argument,
                "AdamParams: weight_decay must be finite and >= 0, got {}", weight_decay);
  SPINDLE_CHECK(std::isfinite(grad_clip_norm) && grad_clip_norm >= 0.0f, invalid_argument,
                "AdamParams: grad_clip_norm must be finite and >= 0 (0 = off), got {}",
                grad_clip_norm);
}

OptimStepResult AdamW::step(std::span<const ParamRef> params, const AdamParams& hp) {
  hp.validate();
  check_param_set(params, moments_);

  // Global L2 norm over every gradient element, in double; any non-finite element refuses the
  // step before anything is written.
  double sum_sq = 0.0;
  for (const ParamRef& p : params) {
    for (const float g : p.grad->span()) {
      SPINDLE_CHECK(std::isfinite(g), invalid_argument,
                    "AdamW::step: gradient of parameter '{}' has a non-finite value ({}); "
                    "nothing was updated",
                    p.name, g);
      sum_sq += double(g) * double(g);
    }
  }
  OptimStepResult result;
  result.grad_norm = std::sqrt(sum_sq);
  double scale = 1.0;
  if (hp.grad_clip_norm > 0.0f && result.grad_norm > double(hp.grad_clip_norm)) {
    scale = double(hp.grad_clip_norm) / result.grad_norm;
    result.clipped = true;
  }

  if (moments_.empty()) {
    for (const ParamRef& p : params) {
      moments_.emplace(p.name,
                       std::pair{Tensor::zeros(p.param->shape()), Tensor::zeros(p.param->shape())});
    }
  }

  const int64_t t = step_ + 1;
  const double b1 = hp.beta1;
  const double b2 = hp.beta2;
  const double bc1 = 1.0 - std::pow(b1, double(t));
  const double bc2 = 1.0 - std::pow(b2, double(t));
  const double lr = hp.learning_rate;
  const double decay = lr * double(hp.weight_decay);
  const double eps = hp.eps;
  for (const ParamRef& p : params) {
    auto& [m_t, v_t] = moments_.at(p.name);
    float* w = p.param->data();
    const float* g = p.grad->data();
    float* m = m_t.data();
    float* v = v_t.data();
    const int64_t n = p.param->numel();
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(g[i]) * scale;
      m[i] = float(b1 * double(m[i]) + (1.0 - b1) * gi);
      v[i] = float(b2 * double(v[i]) + (1.0 - b2) * gi * gi);
      const double m_hat = double(m[i]) / bc1;
      const double v_hat = double(v[i]) / bc2;
      const double wi = w[i];
      w[i] = float(wi - decay * wi - lr * m_hat / (std::sqrt(v_hat) + eps));
    }
  }
  step_ = t;
  result.step = t;
  return result;
}

std::string AdamW::serialize() const {
  std::vector<SafetensorsTensorIn> tensors;
  tensors.reserve(moments_.size() * 2);
  for (const auto& [name, mv] : moments_) {
    tensors.push_back({.name = name + std::string(kAvgSuffix),
                       .dtype = DType::f32,
                       .shape = mv.first.shape(),
                       .data = mv.first.data()});
    tensors.push_back({.name = name + std::string(kAvgSqSuffix),
                       .dtype = DType::f32,
                       .shape = mv.second.shape(),
                       .data = mv.second.data()});
  }
  return encode_safetensors(tensors, {{"step", std::to_string(step_)}, {"format", kFormat}});
}

void AdamW::save(const std::filesystem::path& file) const { write_file_atomic(file, serialize()); }

AdamW AdamW::load(const std::filesystem::path& file) {
  return deserialize(read_file_to_string(file, /*max_bytes=*/size_t(64) << 30), file.string());
}

AdamW AdamW::deserialize(std::string bytes, const std::string& source) {
  const SafetensorsBytes st(std::move(bytes), source);
  const auto& meta = st.metadata();
  const auto fmt_it = meta.find("format");
  SPINDLE_CHECK(fmt_it != meta.end() && fmt_it->second == kFormat, format,
                "{}: not an AdamW state file (metadata 'format' is '{}', expected '{}')", source,
                fmt_it == meta.end() ? "" : fmt_it->second, kFormat);
  const auto step_it = meta.find("step");
  SPINDLE_CHECK(step_it != meta.end(), format, "{}: metadata 'step' is missing", source);
  AdamW opt;
  const std::string& s = step_it->second;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), opt.step_);
  SPINDLE_CHECK(ec == std::errc() && end == s.data() + s.size() && opt.step_ >= 0, format,
                "{}: metadata 'step' = '{}' is not a non-negative integer", source, s);

  // Pair every "<name>.exp_avg" with its "<name>.exp_avg_sq".
  for (const SafetensorsEntry& e : st.entries()) {
    SPINDLE_CHECK(e.known_dtype == DType::f32, format,
                  "{}: tensor '{}' has dtype {}; AdamW state is stored as F32", source, e.name,
                  e.dtype);
    const std::string_view name = e.name;
    if (name.ends_with(kAvgSqSuffix)) continue;  // read with its exp_avg below
    SPINDLE_CHECK(name.ends_with(kAvgSuffix) && name.size() > kAvgSuffix.size(), format,
                  "{}: tensor '{}' is neither '<param>{}' nor '<param>{}'", source, e.name,
                  kAvgSuffix, kAvgSqSuffix);
    const std::string param(name.substr(0, name.size() - kAvgSuffix.size()));
    const std::string sq_name = param + std::string(kAvgSqSuffix);
    const SafetensorsEntry* sq = st.find(sq_name);
    SPINDLE_CHECK(sq != nullptr, format, "{}: tensor '{}' is missing (it pairs with '{}')", source,
                  sq_name, e.name);
    SPINDLE_CHECK(sq->shape == e.shape, format,
                  "{}: tensor '{}' has shape {} but '{}' has shape {}", source, sq_name,
                  shape_str(sq->shape), e.name, shape_str(e.shape));
    opt.moments_.emplace(param, std::pair{st.read_f32(e), st.read_f32(*sq)});
  }
  for (const SafetensorsEntry& e : st.entries()) {
    if (!std::string_view(e.name).ends_with(kAvgSqSuffix)) continue;
    const std::string param = e.name.substr(0, e.name.size() - kAvgSqSuffix.size());
    SPINDLE_CHECK(opt.moments_.count(param) != 0, format, "{}: tensor '{}' has no matching '{}{}'",
                  source, e.name, param, kAvgSuffix);
  }
  SPINDLE_CHECK((opt.step_ == 0) == opt.moments_.empty(), format,
                "{}: step {} does not fit {} stored parameters (moments exist iff step > 0)",
                source, opt.step_, opt.moments_.size());
  return opt;
}

AdamW AdamW::clone() const {
  AdamW copy;
  copy.step_ = step_;
  for (const auto& [name, mv] : moments_) {
    copy.moments_.emplace(name, std::pair{mv.first.clone(), mv.second.clone()});
  }
  return copy;
}

AdamW AdamW::restore(int64_t step, std::map<std::string, std::pair<Tensor, Tensor>> moments) {
  SPINDLE_CHECK(step >= 0, invalid_argument, "AdamW::restore: step {} is negative", step);
  for (const auto& [name, mv] : moments) {
    SPINDLE_CHECK(mv.first.shape() == mv.second.shape(), invalid_argument,
                  "AdamW::restore: moments of '{}' differ in shape", name);
  }
  AdamW opt;
  opt.step_ = step;
  opt.moments_ = std::move(moments);
  return opt;
}

}  // namespace spindle::engine
