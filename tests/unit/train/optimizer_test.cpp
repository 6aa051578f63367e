// AdamW: the update against the formula evaluated in double, bias correction, decoupled weight
// decay, grad-norm clipping, refusal of bad steps (nothing changes), and bit-exact resume.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "spindle/core/error.h"
#include "spindle/engine/optimizer.h"
#include "spindle/engine/safetensors.h"

namespace spindle::engine {
namespace {

std::string error_of(const std::function<void()>& f, ErrorCode code = ErrorCode::invalid_argument) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  return "<no error>";
}

std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("spindle_adamw_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Reference AdamW over one flat vector, in double, straight from optimizer.h.
struct Reference {
  std::vector<double> p, m, v;
  int64_t t = 0;
  void step(const std::vector<double>& g, const AdamParams& hp) {
    ++t;
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.learning_rate;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(b1, double(t)));
      const double v_hat = v[i] / (1 - std::pow(b2, double(t)));
      p[i] = p[i] - lr * hp.weight_decay * p[i] - lr * m_hat / (std::sqrt(v_hat) + hp.eps);
    }
  }
};

TEST(AdamParams, Validate) {
  EXPECT_NO_THROW(AdamParams{}.validate());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::pair<AdamParams, const char*> bad[] = {
      {{.learning_rate = -1e-3f}, "learning_rate"},
      {{.learning_rate = nan}, "learning_rate"},
      {{.beta1 = 1.0f}, "beta1"},
      {{.beta1 = -0.1f}, "beta1"},
      {{.beta2 = 1.0f}, "beta2"},
      {{.eps = 0.0f}, "eps"},
      {{.weight_decay = -1.0f}, "weight_decay"},
      {{.grad_clip_norm = -1.0f}, "grad_clip_norm"},
  };
  for (const auto& [hp, field] : bad) {
    const std::string m = error_of([&] { hp.validate(); });
    EXPECT_NE(m.find(field), std::string::npos) << m;
  }
}

TEST(AdamW, OneStepByHand) {
  const AdamParams hp{
      .learning_rate = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  Tensor p = Tensor::from({3}, std::vector<float>{0.5f, -1.0f, 2.0f});
  const Tensor g = Tensor::from({3}, std::vector<float>{0.1f, -0.2f, 0.3f});
  AdamW opt;
  const ParamRef refs[] = {{"w", &p, &g}};
  const OptimStepResult r = opt.step(refs, hp);
  EXPECT_EQ(r.step, 1);
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_FALSE(r.clipped);
  EXPECT_NEAR(r.grad_norm, std::sqrt(0.01 + 0.04 + 0.09), 1e-7);
  // At t = 1: m̂ = g, v̂ = g², so p ← p − lr·wd·p − lr·g/(|g| + ε).
  const double p0[] = {0.5, -1.0, 2.0};
  for (int i = 0; i < 3; ++i) {
    const double gi = g.data()[i];
    const double want =
        p0[i] - 1e-2 * double(0.1f) * p0[i] - double(1e-2f) * gi / (std::abs(gi) + double(1e-8f));
    EXPECT_NEAR(p.data()[i], want, 1e-6) << i;
    EXPECT_NEAR(opt.moments().at("w").first.data()[i], (1 - double(0.9f)) * gi, 1e-8);
    EXPECT_NEAR(opt.moments().at("w").second.data()[i], (1 - double(0.95f)) * gi * gi, 1e-9);
  }
}

TEST(AdamW, BiasCorrectionOverThreeSteps) {
  const AdamParams hp{
      .learning_rate = 5e-2f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.01f};
  const std::vector<float> init = {1.0f, -0.5f, 0.25f, 3.0f};
  Tensor p = Tensor::from({2, 2}, init);
  Reference ref{
      .p = {init.begin(), init.end()}, .m = std::vector<double>(4), .v = std::vector<double>(4)};
  AdamW opt;
  const std::vector<std::vector<float>> grads = {
      {0.3f, -0.1f, 0.0f, 2.0f}, {-0.2f, 0.4f, 0.05f, 1.0f}, {0.1f, 0.1f, -0.3f, -0.5f}};
  for (const auto& gv : grads) {
    const Tensor g = Tensor::from({2, 2}, gv);
    const ParamRef refs[] = {{"w", &p, &g}};
    opt.step(refs, hp);
    ref.step({gv.begin(), gv.end()}, hp);
  }
  EXPECT_EQ(opt.step_count(), 3);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p.data()[i], ref.p[i], 1e-6) << i;
}

TEST(AdamW, DecoupledWeightDecayWithZeroGradient) {
  const AdamParams hp{.learning_rate = 0.1f, .weight_decay = 0.5f};
  Tensor p = Tensor::from({2}, std::vector<float>{2.0f, -4.0f});
  const Tensor g = Tensor::zeros({2});
  AdamW opt;
  const ParamRef refs[] = {{"w", &p, &g}};
  opt.step(refs, hp);
  opt.step(refs, hp);
  const double f = 1.0 - double(0.1f) * double(0.5f);
  EXPECT_NEAR(p.data()[0], 2.0 * f * f, 1e-6);
  EXPECT_NEAR(p.data()[1], -4.0 * f * f, 1e-6);
  EXPECT_EQ(opt.moments().at("w").first.data()[0], 0.0f);
  EXPECT_EQ(opt.moments().at("w").second.data()[1], 0.0f);
}

TEST(AdamW, GlobalGradNormClipping) {
  // Two params: ‖(3, 0) ∪ (0, 4)‖ = 5, clipped to 1 → every gradient scaled by 0.2.
  const AdamParams hp{.learning_rate = 1e-3f, .grad_clip_norm = 1.0f};
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({1, 2});
  const Tensor ga = Tensor::from({2}, std::vector<float>{3.0f, 0.0f});
  const Tensor gb = Tensor::from({1, 2}, std::vector<float>{0.0f, 4.0f});
  AdamW opt;
  const ParamRef refs[] = {{"a", &a, &ga}, {"b", &b, &gb}};
  const OptimStepResult r = opt.step(refs, hp);
  EXPECT_NEAR(r.grad_norm, 5.0, 1e-12);  // reported before clipping
  EXPECT_TRUE(r.clipped);
  const double k = 1.0 - double(0.9f);
  EXPECT_NEAR(opt.moments().at("a").first.data()[0], k * 0.6, 1e-7);
  EXPECT_NEAR(opt.moments().at("b").first.data()[1], k * 0.8, 1e-7);
  EXPECT_EQ(opt.moments().at("a").first.data()[1], 0.0f);

  // Under the threshold nothing is scaled.
  AdamW loose;
  const AdamParams hp2{.learning_rate = 1e-3f, .grad_clip_norm = 10.0f};
  const OptimStepResult r2 = loose.step(refs, hp2);
  EXPECT_FALSE(r2.clipped);
  EXPECT_NEAR(r2.grad_norm, 5.0, 1e-12);
  EXPECT_NEAR(loose.moments().at("b").first.data()[1], k * 4.0, 1e-6);
}

TEST(AdamW, HugeEpsGivesLrTimesGradOverEps) {
  const AdamParams hp{.learning_rate = 1e-3f, .eps = 1e9f};
  const std::vector<float> gv = {0.5f, -2.0f, 1e-3f, 7.0f};
  Tensor p = Tensor::zeros({4});
  const Tensor g = Tensor::from({4}, gv);
  AdamW opt;
  const ParamRef refs[] = {{"w", &p, &g}};
  opt.step(refs, hp);
  for (int i = 0; i < 4; ++i) {
    const double want = -double(1e-3f) * gv[i] / 1e9;
    EXPECT_LT(std::abs(p.data()[i] - want) / std::abs(want), 1e-6) << i;
  }
}

TEST(AdamW, NonFiniteGradientUpdatesNothing) {
  const AdamParams hp{.learning_rate = 1e-2f};
  Tensor a = Tensor::from({2}, std::vector<float>{1.0f, 2.0f});
  Tensor b = Tensor::from({2}, std::vector<float>{3.0f, 4.0f});
  Tensor ga = Tensor::from({2}, std::vector<float>{0.1f, 0.2f});
  Tensor gb = Tensor::from({2}, std::vector<float>{std::nanf(""), 0.2f});
  AdamW opt;
  const ParamRef refs[] = {{"a", &a, &ga}, {"b", &b, &gb}};
  std::string m = error_of([&] { opt.step(refs, hp); });
  EXPECT_NE(m.find("'b'"), std::string::npos) << m;
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_TRUE(opt.moments().empty());
  EXPECT_EQ(a.data()[0], 1.0f);
  EXPECT_EQ(b.data()[0], 3.0f);

  gb.data()[0] = 0.3f;
  opt.step(refs, hp);
  const Tensor a1 = a.clone(), b1 = b.clone();
  const Tensor ma = opt.moments().at("a").first.clone(), vb = opt.moments().at("b").second.clone();
  gb.data()[1] = std::numeric_limits<float>::infinity();
  m = error_of([&] { opt.step(refs, hp); });
  EXPECT_NE(m.find("'b'"), std::string::npos) << m;
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_TRUE(same_bits(a, a1));  // 'a' comes first and still was not touched
  EXPECT_TRUE(same_bits(b, b1));
  EXPECT_TRUE(same_bits(opt.moments().at("a").first, ma));
  EXPECT_TRUE(same_bits(opt.moments().at("b").second, vb));
}

TEST(AdamW, ParameterSetIsFixedByTheFirstStep) {
  const AdamParams hp;
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({3}), c = Tensor::zeros({2});
  const Tensor g2 = Tensor::zeros({2}), g3 = Tensor::zeros({3});
  AdamW opt;
  const ParamRef first[] = {{"a", &a, &g2}, {"b", &b, &g3}};
  opt.step(first, hp);

  const ParamRef missing[] = {{"a", &a, &g2}};
  EXPECT_NE(error_of([&] { opt.step(missing, hp); }).find("'b'"), std::string::npos);
  const ParamRef renamed[] = {{"a", &a, &g2}, {"c", &c, &g2}};
  EXPECT_NE(error_of([&] { opt.step(renamed, hp); }).find("'c'"), std::string::npos);
  const ParamRef extra[] = {{"a", &a, &g2}, {"b", &b, &g3}, {"c", &c, &g2}};
  EXPECT_NE(error_of([&] { opt.step(extra, hp); }).find("'c'"), std::string::npos);
  Tensor b_wrong = Tensor::zeros({2});
  const ParamRef reshaped[] = {{"a", &a, &g2}, {"b", &b_wrong, &g2}};
  const std::string m = error_of([&] { opt.step(reshaped, hp); });
  EXPECT_NE(m.find("'b'"), std::string::npos) << m;
  EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  EXPECT_EQ(opt.step_count(), 1);
  opt.step(std::span<const ParamRef>(first), hp);  // order does not matter, only the set
  EXPECT_EQ(opt.step_count(), 2);

  AdamW fresh;
  const ParamRef grad_shape[] = {{"a", &a, &g3}};
  EXPECT_NE(error_of([&] { fresh.step(grad_shape, hp); }).find("gradient"), std::string::npos);
  const ParamRef twice[] = {{"a", &a, &g2}, {"a", &c, &g2}};
  EXPECT_NE(error_of([&] { fresh.step(twice, hp); }).find("twice"), std::string::npos);
  const ParamRef null_grad[] = {{"a", &a, nullptr}};
  EXPECT_NE(error_of([&] { fresh.step(null_grad, hp); }).find("null"), std::string::npos);
  EXPECT_NE(error_of([&] { fresh.step({}, hp); }).find("no parameters"), std::string::npos);
  EXPECT_TRUE(fresh.moments().empty());
}

// Gradients that depend on the parameters and the step, so the trajectory depends on state.
void run_steps(AdamW& opt, Tensor& a, Tensor& b, int from, int to, const AdamParams& hp) {
  for (int s = from; s < to; ++s) {
    Tensor ga(a.shape()), gb(b.shape());
    for (int64_t i = 0; i < a.numel(); ++i)
      ga.data()[i] = std::sin(a.data()[i] * 3.0f + float(s)) + 0.1f * float(i);
    for (int64_t i = 0; i < b.numel(); ++i) gb.data()[i] = b.data()[i] - std::cos(float(s * 7 + i));
    const ParamRef refs[] = {{"layer.a", &a, &ga}, {"layer.b", &b, &gb}};
    opt.step(refs, hp);
  }
}

TEST(AdamW, SaveLoadResumeIsBitExact) {
  const AdamParams hp{.learning_rate = 3e-2f, .weight_decay = 0.01f, .grad_clip_norm = 1.5f};
  const std::vector<float> ia = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  const std::vector<float> ib = {1.0f, 2.0f, -3.0f};
  Tensor a1 = Tensor::from({2, 3}, ia), b1 = Tensor::from({3}, ib);
  AdamW straight;
  run_steps(straight, a1, b1, 0, 6, hp);

  Tensor a2 = Tensor::from({2, 3}, ia), b2 = Tensor::from({3}, ib);
  AdamW first_half;
  run_steps(first_half, a2, b2, 0, 3, hp);
  const auto file = temp_dir("resume") / "state.safetensors";
  first_half.save(file);
  AdamW resumed = AdamW::load(file);
  EXPECT_EQ(resumed.step_count(), 3);
  for (const auto& [name, mv] : first_half.moments()) {
    EXPECT_TRUE(same_bits(resumed.moments().at(name).first, mv.first)) << name;
    EXPECT_TRUE(same_bits(resumed.moments().at(name).second, mv.second)) << name;
  }
  run_steps(resumed, a2, b2, 3, 6, hp);
  EXPECT_EQ(resumed.step_count(), 6);
  EXPECT_TRUE(same_bits(a1, a2));
  EXPECT_TRUE(same_bits(b1, b2));
  EXPECT_TRUE(
      same_bits(resumed.moments().at("layer.a").second, straight.moments().at("layer.a").second));

  const SafetensorsFile st(file);
  EXPECT_EQ(st.metadata().at("format"), "spindle-adamw-v1");
  EXPECT_EQ(st.metadata().at("step"), "3");
  EXPECT_NE(st.find("layer.a.exp_avg"), nullptr);
  EXPECT_NE(st.find("layer.b.exp_avg_sq"), nullptr);
  EXPECT_EQ(st.entries().size(), 4u);
}

TEST(AdamW, LoadErrorsNameTheFile) {
  const auto dir = temp_dir("errors");
  const auto missing = dir / "absent.safetensors";
  EXPECT_NE(error_of([&] { AdamW::load(missing); }, ErrorCode::not_found).find(missing.string()),
            std::string::npos);

  const auto garbage = dir / "garbage.safetensors";
  write_file_atomic(garbage, std::string_view("not a safetensors file at all"));
  try {
    AdamW::load(garbage);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(garbage.string()), std::string::npos) << e.what();
  }

  const float vals[] = {1.0f, 2.0f};
  auto write = [&](const std::string& file, std::vector<SafetensorsTensorIn> t,
                   std::map<std::string, std::string> meta) {
    write_safetensors(dir / file, t, meta);
    return error_of([&] { AdamW::load(dir / file); }, ErrorCode::format);
  };
  const std::map<std::string, std::string> good_meta = {{"format", "spindle-adamw-v1"},
                                                        {"step", "2"}};
  std::string m = write("no_format.safetensors", {}, {{"step", "1"}});
  EXPECT_NE(m.find("no_format.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("format"), std::string::npos) << m;
  m = write("bad_step.safetensors", {{"w.exp_avg", DType::f32, {2}, vals}},
            {{"format", "spindle-adamw-v1"}, {"step", "two"}});
  EXPECT_NE(m.find("'step'"), std::string::npos) << m;
  m = write("unpaired.safetensors", {{"w.exp_avg", DType::f32, {2}, vals}}, good_meta);
  EXPECT_NE(m.find("unpaired.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("'w.exp_avg_sq' is missing"), std::string::npos) << m;
  m = write("misshapen.safetensors",
            {{"w.exp_avg", DType::f32, {2}, vals}, {"w.exp_avg_sq", DType::f32, {1}, vals}},
            good_meta);
  EXPECT_NE(m.find("'w.exp_avg_sq' has shape [1]"), std::string::npos) << m;
  m = write("stray.safetensors", {{"w.weight", DType::f32, {2}, vals}}, good_meta);
  EXPECT_NE(m.find("'w.weight'"), std::string::npos) << m;
  m = write("bf16.safetensors",
            {{"w.exp_avg", DType::bf16, {2}, vals}, {"w.exp_avg_sq", DType::f32, {2}, vals}},
            good_meta);
  EXPECT_NE(m.find("BF16"), std::string::npos) << m;
}

}  // namespace
}  // namespace spindle::engine
