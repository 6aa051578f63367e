// CUDA adamw_step against engine::AdamW: three steps over a few tensors (sizes 1, 1000, 4099),
// with and without global-norm clipping and weight decay, comparing params, both moments and
// the reported grad norm; more tensors than a grid has rows (a routed-expert adapter); the
// empty set; and the contract checks.

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "pointwise_test_util.h"
#include "spindle/core/tensor.h"
#include "spindle/engine/optimizer.h"
#include "spindle/kernels/cuda/adamw.h"

namespace spindle::kernels::cuda::test {
namespace {

struct AdamCase {
  const char* name;
  engine::AdamParams hp;
  bool want_norm;
};

TEST(PointwiseAdamW, ThreeStepsMatchEngineAdamW) {
  SPINDLE_REQUIRE_CUDA_DEVICE();
  const std::vector<int64_t> sizes = {1, 1000, 4099};
  const AdamCase cases[] = {
      {"plain", {.learning_rate = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f}, false},
      {"clip+decay",
       {.learning_rate = 3e-3f,
        .beta1 = 0.8f,
        .beta2 = 0.99f,
        .eps = 1e-6f,
        .weight_decay = 0.1f,
        .grad_clip_norm = 0.5f},
       true},
      {"norm only (clip above the norm)",
       {.learning_rate = 1e-3f, .eps = 1e-12f, .grad_clip_norm = 1e6f},
       true},
  };
  for (const AdamCase& c : cases) {
    SCOPED_TRACE(c.name);
    Stream stream;
    engine::AdamW cpu;
    std::vector<Tensor> params, grads;
    std::vector<DeviceBuffer<float>> d_param, d_grad, d_m, d_v;
    std::vector<AdamWTensor> table;
    int64_t max_count = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      params.push_back(Tensor::from({n}, random_floats(size_t(n), uint32_t(10 + i))));
      grads.push_back(Tensor::zeros({n}));
      d_param.emplace_back(static_cast<size_t>(n));
      d_param.back().upload(params.back().span());
      d_grad.emplace_back(static_cast<size_t>(n));
      d_m.emplace_back(static_cast<size_t>(n));
      d_v.emplace_back(static_cast<size_t>(n));
      d_m.back().zero(stream.get());
      d_v.back().zero(stream.get());
      max_count = std::max(max_count, n);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      table.push_back(AdamWTensor{.param = d_param[i].data(),
                                  .grad = d_grad[i].data(),
                                  .m = d_m[i].data(),
                                  .v = d_v[i].data(),
                                  .count = sizes[i]});
    }
    auto d_table = upload_vec(table);
    DeviceBuffer<uint8_t> scratch(adamw_scratch_bytes(int64_t(sizes.size())));
    DeviceBuffer<float> d_norm(1);
    const AdamWHyper base{.learning_rate = c.hp.learning_rate,
                          .beta1 = c.hp.beta1,
                          .beta2 = c.hp.beta2,
                          .eps = c.hp.eps,
                          .weight_decay = c.hp.weight_decay,
                          .grad_clip_norm = c.hp.grad_clip_norm};
    for (int64_t step = 1; step <= 3; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step);
      std::vector<engine::ParamRef> refs;
      for (size_t i = 0; i < sizes.size(); ++i) {
        // Gradients large enough that the 0.5 clip bites in the clipping case.
        const auto g = random_floats(size_t(sizes[i]), uint32_t(100 * step + i), -0.2f, 0.2f);
        std::copy(g.begin(), g.end(), grads[i].data());
        d_grad[i].upload(g);
        refs.push_back({.name = "t" + std::to_string(i), .param = &params[i], .grad = &grads[i]});
      }
      const auto result = cpu.step(refs, c.hp);
      AdamWHyper hyper = base;
      hyper.step = step;
      adamw_step(d_table.data(), int64_t(sizes.size()), max_count, hyper,
                 c.want_norm ? d_norm.data() : nullptr, scratch.data(), stream.get());
      stream.synchronize();
      if (c.want_norm) {
        EXPECT_TRUE(all_close(d_norm.download(), std::vector<double>{result.grad_norm}, 0.0, 1e-6,
                              "grad_norm"));
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        const std::string name = "t" + std::to_string(i);
        const auto& [m, v] = cpu.moments().at(name);
        const std::vector<float> want_p(params[i].span().begin(), params[i].span().end());
        const std::vector<float> want_m(m.span().begin(), m.span().end());
        const std::vector<float> want_v(v.span().begin(), v.span().end());
        // Same double expressions; only the norm's summation order differs (the clip scale).
        EXPECT_TRUE(all_close(d_param[i].download(), want_p, 1e-7, 1e-6, name + " param"));
        EXPECT_TRUE(all_close(d_m[i].download(), want_m, 1e-9, 1e-6, name + " m"));
        EXPECT_TRUE(all_close(d_v[i].download(), want_v, 1e-12, 1e-6, name + " v"));
      }
    }
  }
}

// 70 000 tensors (past CUDA's 65 535 grid rows, as a Qwen3-235B-shaped expert adapter has):
// every tensor is updated, and the clipped step and its norm match the CPU AdamW.
TEST(PointwiseAdamW, MoreTensorsThanGridRowsAllUpdate) {
  SPINDLE_REQUIRE_CUDA_DEVICE();
  constexpr int64_t kTensors = 70000, kEach = 3;
  const engine::AdamParams hp{.learning_rate = 1e-2f, .grad_clip_norm = 1.0f};
  const auto p0 = random_floats(size_t(kTensors * kEach), 7u);
  const auto g = random_floats(size_t(kTensors * kEach), 8u, -0.2f, 0.2f);
  std::vector<Tensor> params, grads;
  std::vector<engine::ParamRef> refs;
  params.reserve(kTensors);
  grads.reserve(kTensors);
  for (int64_t i = 0; i < kTensors; ++i) {
    params.push_back(Tensor::from({kEach}, {p0.begin() + i * kEach, p0.begin() + (i + 1) * kEach}));
    grads.push_back(Tensor::from({kEach}, {g.begin() + i * kEach, g.begin() + (i + 1) * kEach}));
  }
  for (int64_t i = 0; i < kTensors; ++i) {
    refs.push_back({.name = "t" + std::to_string(i), .param = &params[i], .grad = &grads[i]});
  }
  engine::AdamW cpu;
  const auto result = cpu.step(refs, hp);

  Stream stream;
  DeviceBuffer<float> d_param(p0.size()), d_grad(g.size()), d_m(p0.size()), d_v(p0.size());
  d_param.upload(p0);
  d_grad.upload(g);
  d_m.zero(stream.get());
  d_v.zero(stream.get());
  std::vector<AdamWTensor> table;
  for (int64_t i = 0; i < kTensors; ++i) {
    table.push_back(AdamWTensor{.param = d_param.data() + i * kEach,
                                .grad = d_grad.data() + i * kEach,
                                .m = d_m.data() + i * kEach,
                                .v = d_v.data() + i * kEach,
                                .count = kEach});
  }
  auto d_table = upload_vec(table);
  DeviceBuffer<uint8_t> scratch(adamw_scratch_bytes(kTensors));
  DeviceBuffer<float> d_norm(1);
  adamw_step(d_table.data(), kTensors, kEach,
             AdamWHyper{.learning_rate = hp.learning_rate,
                        .beta1 = hp.beta1,
                        .beta2 = hp.beta2,
                        .eps = hp.eps,
                        .grad_clip_norm = hp.grad_clip_norm},
             d_norm.data(), scratch.data(), stream.get());
  stream.synchronize();
  EXPECT_TRUE(
      all_close(d_norm.download(), std::vector<double>{result.grad_norm}, 0.0, 1e-6, "grad_norm"));
  std::vector<float> want;
  for (const Tensor& t : params) want.insert(want.end(), t.span().begin(), t.span().end());
  EXPECT_TRUE(all_close(d_param.download(), want, 1e-7, 1e-6, "params"));
}

// A NaN or an Inf gradient anywhere: nothing is updated (the CPU AdamW refuses such a step), and
// the norm says why.
TEST(PointwiseAdamW, NonFiniteGradientUpdatesNothing) {
  SPINDLE_REQUIRE_CUDA_DEVICE();
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (const float clip : {0.0f, 1.0f}) {
      SCOPED_TRACE(testing::Message() << "bad " << bad << " clip " << clip);
      Stream stream;
      const auto p0 = random_floats(300, 5u);
      auto g = random_floats(300, 6u, -0.2f, 0.2f);
      g[257] = bad;  // in the second tensor
      DeviceBuffer<float> d_param(300), d_grad(300), d_m(300), d_v(300);
      d_param.upload(p0);
      d_grad.upload(g);
      d_m.zero(stream.get());
      d_v.zero(stream.get());
      const std::vector<AdamWTensor> table = {
          {d_param.data(), d_grad.data(), d_m.data(), d_v.data(), 200},
          {d_param.data() + 200, d_grad.data() + 200, d_m.data() + 200, d_v.data() + 200, 100}};
      auto d_table = upload_vec(table);
      DeviceBuffer<uint8_t> scratch(adamw_scratch_bytes(2));
      DeviceBuffer<float> d_norm(1);
      adamw_step(d_table.data(), 2, 200,
                 AdamWHyper{.learning_rate = 1e-2f, .weight_decay = 0.1f, .grad_clip_norm = clip},
                 d_norm.data(), scratch.data(), stream.get());
      stream.synchronize();
      EXPECT_FALSE(std::isfinite(d_norm.download()[0]));
      EXPECT_EQ(d_param.download(), p0);
      EXPECT_EQ(d_m.download(), std::vector<float>(300, 0.0f));
      EXPECT_EQ(d_v.download(), std::vector<float>(300, 0.0f));
    }
  }
}

TEST(PointwiseAdamW, EmptySetReportsZeroNorm) {
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  DeviceBuffer<float> d_norm(1);
  d_norm.upload(std::vector<float>{5.0f});
  adamw_step(nullptr, 0, 0, AdamWHyper{}, d_norm.data(), nullptr, stream.get());
  stream.synchronize();
  EXPECT_EQ(d_norm.download()[0], 0.0f);
}

TEST(PointwiseAdamWContracts, ViolationsThrowInvalidArgument) {
  const AdamWTensor* t = reinterpret_cast<const AdamWTensor*>(uintptr_t{256});
  float* f = reinterpret_cast<float*>(uintptr_t{256});
  AdamWHyper ok;
  AdamWHyper bad_step = ok;
  bad_step.step = 0;
  EXPECT_THROW(adamw_step(t, 1, 4, bad_step, nullptr, f, nullptr), std::invalid_argument);
  AdamWHyper bad_beta = ok;
  bad_beta.beta1 = 1.0f;
  EXPECT_THROW(adamw_step(t, 1, 4, bad_beta, nullptr, f, nullptr), std::invalid_argument);
  AdamWHyper bad_eps = ok;
  bad_eps.eps = 0.0f;
  EXPECT_THROW(adamw_step(t, 1, 4, bad_eps, nullptr, f, nullptr), std::invalid_argument);
  EXPECT_THROW(adamw_step(t, -1, 4, ok, nullptr, f, nullptr), std::invalid_argument);
  EXPECT_THROW(adamw_step(t, 1, -4, ok, nullptr, f, nullptr), std::invalid_argument);
  EXPECT_THROW(adamw_step(nullptr, 1, 4, ok, nullptr, f, nullptr), std::invalid_argument);
  AdamWHyper clip = ok;
  clip.grad_clip_norm = 1.0f;
  EXPECT_THROW(adamw_step(t, 1, 4, clip, nullptr, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(adamw_step(t, 1, 4, ok, f, nullptr, nullptr), std::invalid_argument);
  EXPECT_GE(adamw_scratch_bytes(3), 3 * sizeof(double));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
