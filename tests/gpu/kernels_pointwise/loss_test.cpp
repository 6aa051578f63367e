// CUDA log_softmax (vs the CPU kernel), target_logprobs and its backward (vs double loops, and
// the backward vs central finite differences of target_logprobs), token_losses (vs
// engine::token_loss for all five losses on a grid of values), both element types, vocabularies
// 5 / 512 / 151 936, and the contract checks.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "pointwise_test_util.h"
#include "spindle/engine/loss.h"
#include "spindle/kernels/cuda/loss.h"
#include "spindle/kernels/softmax.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class PointwiseLoss : public ::testing::Test {};
TYPED_TEST_SUITE(PointwiseLoss, ElementTypes, ElementTypeNames);

struct RowsVocab {
  int64_t rows, vocab;
};
const RowsVocab kShapes[] = {{0, 5}, {1, 5}, {4, 512}, {3, 1000}, {2, 151936}};

// Logits of a realistic spread (N(0, 3)-ish) with a few repeated maxima.
std::vector<float> make_logits(int64_t rows, int64_t ld, uint32_t seed) {
  auto x = random_floats(size_t(rows * ld), seed, -8.0f, 8.0f);
  for (int64_t r = 0; r < rows; ++r) x[size_t(r * ld)] = x[size_t(r * ld + ld / 2)] = 9.0f;
  return x;
}

struct RowStats {
  double lse, entropy;
};
RowStats row_stats(const float* x, int64_t vocab) {
  double m = -INFINITY;
  for (int64_t j = 0; j < vocab; ++j) m = std::max(m, double(x[j]));
  double s = 0.0;
  for (int64_t j = 0; j < vocab; ++j) s += std::exp(double(x[j]) - m);
  const double lse = m + std::log(s);
  double h = 0.0;
  for (int64_t j = 0; j < vocab; ++j) {
    const double lp = double(x[j]) - lse;
    h -= std::exp(lp) * lp;
  }
  return {lse, h};
}

TYPED_TEST(PointwiseLoss, LogSoftmaxMatchesCpu) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (const auto [rows, vocab] : kShapes) {
    SCOPED_TRACE(testing::Message() << "rows " << rows << " vocab " << vocab);
    const int64_t ld_x = vocab + 3, ld_y = vocab + 1;
    const auto x = quantize<T>(make_logits(rows, ld_x, uint32_t(vocab)));
    std::vector<float> dense(size_t(rows * vocab));
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(x.begin() + r * ld_x, vocab, dense.begin() + r * vocab);
    std::vector<float> want_dense(dense.size());
    kernels::log_softmax(dense.data(), want_dense.data(), rows, vocab);
    auto d_x = upload_as<T>(x);
    DeviceBuffer<float> d_y(size_t(rows * ld_y));
    log_softmax<T>(d_x.data(), ld_x, d_y.data(), ld_y, rows, vocab, stream.get());
    stream.synchronize();
    const auto y = d_y.download();
    std::vector<float> got(dense.size());
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(y.begin() + r * ld_y, vocab, got.begin() + r * vocab);
    // fp32 math on the same inputs in both modes; values up to ~30 in magnitude.
    EXPECT_TRUE(all_close(got, want_dense, 2e-5, 1e-5, "y"));
  }
}

TYPED_TEST(PointwiseLoss, TargetLogprobsMatchDoubleLoop) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (const auto [rows, vocab] : kShapes) {
    SCOPED_TRACE(testing::Message() << "rows " << rows << " vocab " << vocab);
    const int64_t ld = vocab + 2;
    const auto x = quantize<T>(make_logits(rows, ld, uint32_t(vocab + 11)));
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = int32_t((r * 7919 + 1) % vocab);
    std::vector<double> want_logp, want_lse, want_h;
    for (int64_t r = 0; r < rows; ++r) {
      const RowStats s = row_stats(x.data() + r * ld, vocab);
      want_lse.push_back(s.lse);
      want_h.push_back(s.entropy);
      want_logp.push_back(double(x[size_t(r * ld + targets[size_t(r)])]) - s.lse);
    }
    auto d_x = upload_as<T>(x);
    auto d_t = upload_vec(targets);
    DeviceBuffer<float> d_logp(static_cast<size_t>(rows)), d_lse(static_cast<size_t>(rows)),
        d_h(static_cast<size_t>(rows));
    target_logprobs<T>(d_x.data(), ld, rows, vocab, d_t.data(), d_logp.data(), d_lse.data(),
                       d_h.data(), stream.get());
    stream.synchronize();
    EXPECT_TRUE(all_close(d_logp.download(), want_logp, 5e-5, 1e-5, "logp"));
    EXPECT_TRUE(all_close(d_lse.download(), want_lse, 5e-5, 1e-5, "lse"));
    EXPECT_TRUE(all_close(d_h.download(), want_h, 1e-4, 1e-4, "entropy"));
    // lse and entropy are optional.
    DeviceBuffer<float> d_logp2(static_cast<size_t>(rows));
    target_logprobs<T>(d_x.data(), ld, rows, vocab, d_t.data(), d_logp2.data(), nullptr, nullptr,
                       stream.get());
    stream.synchronize();
    EXPECT_TRUE(all_close(d_logp2.download(), want_logp, 5e-5, 1e-5, "logp (no lse, entropy)"));
  }
}

TYPED_TEST(PointwiseLoss, TargetLogprobsBackwardMatchesDoubleLoop) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  for (const auto [rows, vocab] : kShapes) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "rows " << rows << " vocab " << vocab << " in_place " << in_place);
      const int64_t ld = vocab + 1;
      const int64_t ld_d = in_place ? ld : vocab + 4;
      const auto x = quantize<T>(make_logits(rows, ld, uint32_t(vocab + 21)));
      std::vector<int32_t> targets(static_cast<size_t>(rows));
      std::vector<float> g(static_cast<size_t>(rows));
      std::vector<float> lse(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        targets[size_t(r)] = int32_t((r * 104729 + 5) % vocab);
        g[size_t(r)] = r == 1 ? 0.0f : -0.75f + 0.5f * float(r);  // row 1: a masked token
        lse[size_t(r)] = float(row_stats(x.data() + r * ld, vocab).lse);
      }
      const float kUntouched = 3.0f;
      std::vector<double> want(size_t(rows * ld_d), kUntouched);
      for (int64_t r = 0; r < rows; ++r) {
        const double lse_d = lse[size_t(r)];  // the kernel is given the fp32 lse
        for (int64_t j = 0; j < vocab; ++j) {
          const double p = std::exp(double(x[size_t(r * ld + j)]) - lse_d);
          want[size_t(r * ld_d + j)] =
              double(g[size_t(r)]) * ((j == targets[size_t(r)] ? 1.0 : 0.0) - p);
        }
        if (in_place) want[size_t(r * ld_d + vocab)] = x[size_t(r * ld + vocab)];
      }
      auto d_x = upload_as<T>(x);
      auto d_t = upload_vec(targets);
      auto d_g = upload_vec(g);
      auto d_lse = upload_vec(lse);
      auto d_out_own = upload_as<T>(std::vector<float>(size_t(rows * ld_d), kUntouched));
      T* out = in_place ? d_x.data() : d_out_own.data();
      target_logprobs_backward<T>(d_x.data(), ld, rows, vocab, d_t.data(), d_lse.data(), d_g.data(),
                                  out, ld_d, stream.get());
      stream.synchronize();
      const auto got = in_place ? download_floats(d_x) : download_floats(d_out_own);
      // p up to ~0.5 (two maxima); bf16 rounds the product.
      const double abs_tol = std::is_same_v<T, float> ? 1e-6 : 1e-4;
      EXPECT_TRUE(all_close(got, want, abs_tol, Tol<T>::rel, "dlogits"));
    }
  }
}

TEST(PointwiseLossF32, TargetLogprobsBackwardMatchesFiniteDifferences) {
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  const int64_t rows = 3, vocab = 7;
  auto x = random_floats(size_t(rows * vocab), 77u, -2.0f, 2.0f);
  const std::vector<int32_t> targets = {6, 0, 3};
  const std::vector<float> g = {1.0f, -0.5f, 2.0f};
  auto d_t = upload_vec(targets);
  auto d_g = upload_vec(g);
  DeviceBuffer<float> d_logp(static_cast<size_t>(rows)), d_lse(static_cast<size_t>(rows));
  // L(x) = Σ_r g_r·logp_r, evaluated on the device in fp32.
  const auto loss_at = [&](const std::vector<float>& logits) {
    auto d_x = upload_vec(logits);
    target_logprobs<float>(d_x.data(), vocab, rows, vocab, d_t.data(), d_logp.data(), d_lse.data(),
                           nullptr, stream.get());
    stream.synchronize();
    const auto lp = d_logp.download();
    double l = 0.0;
    for (int64_t r = 0; r < rows; ++r) l += double(g[size_t(r)]) * lp[size_t(r)];
    return l;
  };
  loss_at(x);  // leaves x's lse in d_lse for the backward below
  auto d_x = upload_vec(x);
  DeviceBuffer<float> d_dx(size_t(rows * vocab));
  target_logprobs_backward<float>(d_x.data(), vocab, rows, vocab, d_t.data(), d_lse.data(),
                                  d_g.data(), d_dx.data(), vocab, stream.get());
  stream.synchronize();
  std::vector<double> fd(size_t(rows * vocab));
  const float h = 1e-2f;
  for (size_t i = 0; i < fd.size(); ++i) {
    auto xp = x;
    auto xm = x;
    xp[i] += h;
    xm[i] -= h;
    fd[i] = (loss_at(xp) - loss_at(xm)) / double(xp[i] - xm[i]);
  }
  EXPECT_TRUE(all_close(d_dx.download(), fd, 2e-3, 1e-2, "dlogits vs finite differences"));
}

TEST(PointwiseLossF32, TokenLossesMatchEngineForAllFiveLosses) {
  SPINDLE_REQUIRE_CUDA_DEVICE();
  Stream stream;
  std::vector<float> logp, q, adv, weight;
  for (const float lp : {-7.0f, -1.25f, -0.3f, -1e-3f, 0.0f})
    for (const float dq : {-100.0f, -0.5f, -0.1f, 0.0f, 0.15f, 0.3f, 2.0f, 100.0f})
      for (const float a : {-2.0f, -0.5f, 0.0f, 0.7f, 3.0f})
        for (const float w : {0.0f, 1.0f, 0.5f}) {
          logp.push_back(lp);
          q.push_back(lp - dq);  // log ρ = dq: both sides of the clip range and the ±80 guard
          adv.push_back(a);
          weight.push_back(w);
        }
  const int64_t n = int64_t(logp.size());
  auto d_logp = upload_vec(logp);
  auto d_q = upload_vec(q);
  auto d_adv = upload_vec(adv);
  auto d_w = upload_vec(weight);
  DeviceBuffer<float> d_loss(static_cast<size_t>(n)), d_grad(static_cast<size_t>(n));
  DeviceBuffer<uint8_t> d_clipped(static_cast<size_t>(n));
  const engine::LossConfig config{
      .clip_low_threshold = 0.8f, .clip_high_threshold = 1.25f, .beta = 0.07f};
  const LossParams base{.clip_low = 0.8f, .clip_high = 1.25f, .beta = 0.07f};
  for (const auto fn : {engine::LossFn::cross_entropy, engine::LossFn::importance_sampling,
                        engine::LossFn::ppo, engine::LossFn::cispo, engine::LossFn::dro}) {
    for (const bool with_weight : {true, false}) {
      SCOPED_TRACE(testing::Message() << engine::loss_fn_name(fn) << " weight " << with_weight);
      LossParams params = base;
      params.kind = static_cast<LossKind>(fn);
      token_losses(params, d_logp.data(), with_weight ? d_w.data() : nullptr, d_q.data(),
                   d_adv.data(), n, d_loss.data(), d_grad.data(), d_clipped.data(), stream.get());
      stream.synchronize();
      std::vector<double> want_loss, want_grad;
      std::vector<int> want_clipped;
      for (int64_t i = 0; i < n; ++i) {
        const auto t =
            engine::token_loss(fn, config, logp[size_t(i)], with_weight ? weight[size_t(i)] : 1.0f,
                               q[size_t(i)], adv[size_t(i)]);
        want_loss.push_back(t.loss);
        want_grad.push_back(t.dloss_dlogp);
        want_clipped.push_back(t.clipped ? 1 : 0);
      }
      // Both sides evaluate the same double expressions and round once: at most one ulp apart.
      EXPECT_TRUE(all_close(d_loss.download(), want_loss, 0.0, 2.4e-7, "loss"));
      EXPECT_TRUE(all_close(d_grad.download(), want_grad, 0.0, 2.4e-7, "dloss_dlogp"));
      const auto clipped = d_clipped.download();
      EXPECT_TRUE(all_close(std::vector<int>(clipped.begin(), clipped.end()), want_clipped, 0.0,
                            0.0, "clipped"));
    }
  }
  // cross_entropy needs neither q nor adv, and clipped may be null.
  token_losses(LossParams{}, d_logp.data(), nullptr, nullptr, nullptr, n, d_loss.data(),
               d_grad.data(), nullptr, stream.get());
  stream.synchronize();
  std::vector<double> want(logp.begin(), logp.end());
  for (double& v : want) v = -v;
  EXPECT_TRUE(all_close(d_loss.download(), want, 0.0, 0.0, "cross_entropy loss"));
}

TEST(PointwiseLossContracts, ViolationsThrowInvalidArgument) {
  float* f = reinterpret_cast<float*>(uintptr_t{256});
  const int32_t* p = reinterpret_cast<const int32_t*>(uintptr_t{256});
  EXPECT_THROW(log_softmax<float>(f, 8, f, 8, 1, 0, nullptr), std::invalid_argument);
  EXPECT_THROW(log_softmax<float>(f, 8, f, 7, 1, 8, nullptr), std::invalid_argument);
  EXPECT_THROW(log_softmax<bf16>(nullptr, 8, f, 8, 1, 8, nullptr), std::invalid_argument);
  EXPECT_THROW(target_logprobs<float>(f, 7, 1, 8, p, f, f, f, nullptr), std::invalid_argument);
  EXPECT_THROW(target_logprobs<float>(f, 8, 1, 8, nullptr, f, f, f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(target_logprobs<bf16>(nullptr, 8, -1, 8, p, f, f, f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(token_losses(LossParams{.kind = static_cast<LossKind>(9)}, f, f, f, f, 4, f, f,
                            nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(token_losses(LossParams{.kind = LossKind::ppo}, f, nullptr, nullptr, f, 4, f, f,
                            nullptr, nullptr),
               std::invalid_argument);  // ppo without q
  EXPECT_THROW(
      token_losses(LossParams{}, f, nullptr, nullptr, nullptr, 4, nullptr, f, nullptr, nullptr),
      std::invalid_argument);
  EXPECT_THROW(token_losses(LossParams{}, f, nullptr, nullptr, nullptr, -1, f, f, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(target_logprobs_backward<float>(f, 8, 1, 8, p, f, f, f, 9, nullptr),
               std::invalid_argument);  // in place with ld_d != ld
  EXPECT_THROW(target_logprobs_backward<float>(f, 8, 1, 8, p, nullptr, f, f + 64, 8, nullptr),
               std::invalid_argument);  // lse null
  EXPECT_THROW(target_logprobs_backward<float>(f, 8, 1, 8, p, f, f, f + 64, 7, nullptr),
               std::invalid_argument);  // ld_d < vocab
  EXPECT_NO_THROW(log_softmax<float>(nullptr, 8, nullptr, 8, 0, 8, nullptr));
  EXPECT_NO_THROW(token_losses(LossParams{}, nullptr, nullptr, nullptr, nullptr, 0, nullptr,
                               nullptr, nullptr, nullptr));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
