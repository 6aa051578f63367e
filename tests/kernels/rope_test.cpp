// rope: both pair conventions against a reference, their equivalence under the pair
// permutation, inverse as the exact transpose, and the contract checks.

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernel_test_util.h"
#include "spindle/kernels/rope.h"

namespace spindle::kernels::test {
namespace {

std::vector<float> llama_inv_freq(int64_t head_dim, float theta) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    f[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
  return f;
}

// Reference: the angle is float(pos)·inv_freq rounded to float (the contract's precision),
// then cos/sin and the rotation in double.
std::vector<double> rope_ref(const std::vector<float>& x, int64_t ld, int64_t T, int64_t n_heads,
                             int64_t hd, const std::vector<int32_t>& pos,
                             const std::vector<float>& inv_freq, RopeStyle style, double sign) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const float angle = float(pos[size_t(t)]) * inv_freq[size_t(i)];
        const double c = std::cos(double(angle)), s = sign * std::sin(double(angle));
        const int64_t base = t * ld + h * hd;
        const int64_t a = base + (style == RopeStyle::interleaved ? 2 * i : i);
        const int64_t b = base + (style == RopeStyle::interleaved ? 2 * i + 1 : i + hd / 2);
        const double v0 = x[size_t(a)], v1 = x[size_t(b)];
        y[size_t(a)] = v0 * c - v1 * s;
        y[size_t(b)] = v0 * s + v1 * c;
      }
  return y;
}

struct RopeCase {
  int64_t T, n_heads, hd, pad;
};

class Rope : public ::testing::TestWithParam<RopeCase> {};

TEST_P(Rope, BothStylesMatchReferenceForwardAndInverse) {
  const auto [T, n_heads, hd, pad] = GetParam();
  const int64_t ld = n_heads * hd + pad;
  const auto x = random_floats(size_t(T * ld), uint32_t(T * hd), -2.0f, 2.0f);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t * 37 % 2000);
  const auto inv_freq = llama_inv_freq(hd, 10000.0f);
  for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
    for (bool inverse : {false, true}) {
      auto y = x;
      rope(y.data(), ld, T, n_heads, hd, pos.data(), inv_freq.data(), style, inverse);
      EXPECT_TRUE(
          all_close(y, rope_ref(x, ld, T, n_heads, hd, pos, inv_freq, style, inverse ? -1.0 : 1.0),
                    1e-5, 1e-5))
          << "style " << int(style) << " inverse " << inverse;
    }
  }
}

TEST_P(Rope, InverseUndoesForward) {
  const auto [T, n_heads, hd, pad] = GetParam();
  const int64_t ld = n_heads * hd + pad;
  const auto x = random_floats(size_t(T * ld), 3);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(4000 - t);
  const auto inv_freq = llama_inv_freq(hd, 500000.0f);
  for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
    auto y = x;
    rope(y.data(), ld, T, n_heads, hd, pos.data(), inv_freq.data(), style);
    rope(y.data(), ld, T, n_heads, hd, pos.data(), inv_freq.data(), style, /*inverse=*/true);
    EXPECT_TRUE(all_close(y, x, 1e-6, 1e-5));
  }
}

// Interleaved pair i = (2i, 2i+1) is half pair i = (i, i + hd/2) after permuting each head:
// half index i <-> interleaved 2i, half index i + hd/2 <-> interleaved 2i + 1.
TEST_P(Rope, InterleavedEqualsHalfUnderPairPermutation) {
  const auto [T, n_heads, hd, pad] = GetParam();
  const int64_t ld = n_heads * hd + pad;
  const auto x_half = random_floats(size_t(T * ld), 9);
  const auto permute = [&](const std::vector<float>& half_layout) {
    std::vector<float> out = half_layout;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const int64_t base = t * ld + h * hd;
          out[size_t(base + 2 * i)] = half_layout[size_t(base + i)];
          out[size_t(base + 2 * i + 1)] = half_layout[size_t(base + i + hd / 2)];
        }
    return out;
  };
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t * 5 + 1);
  const auto inv_freq = llama_inv_freq(hd, 10000.0f);
  auto y_half = x_half;
  rope(y_half.data(), ld, T, n_heads, hd, pos.data(), inv_freq.data(), RopeStyle::half);
  auto y_inter = permute(x_half);
  rope(y_inter.data(), ld, T, n_heads, hd, pos.data(), inv_freq.data(), RopeStyle::interleaved);
  EXPECT_EQ(permute(y_half), y_inter);  // the same float operations on each pair: exact
}

INSTANTIATE_TEST_SUITE_P(Shapes, Rope,
                         ::testing::Values(RopeCase{1, 1, 2, 0}, RopeCase{5, 3, 8, 4},
                                           RopeCase{7, 4, 64, 0}, RopeCase{3, 2, 256, 6},
                                           RopeCase{300, 8, 128, 0}));

TEST(Rope, PositionZeroIsIdentity) {
  auto x = random_floats(2 * 16, 4);
  const auto x0 = x;
  const std::vector<int32_t> pos{0, 0};
  const auto inv_freq = llama_inv_freq(16, 10000.0f);
  rope(x.data(), 16, 2, 1, 16, pos.data(), inv_freq.data(), RopeStyle::half);
  EXPECT_EQ(x, x0);
}

TEST(RopeContracts, ViolationsThrowInvalidArgument) {
  std::vector<float> x(64, 1.0f);
  const std::vector<float> f(8, 1.0f);
  const std::vector<int32_t> pos{0, 1}, neg{0, -1};
  const auto half = RopeStyle::half;
  EXPECT_THROW(rope(x.data(), 16, 2, 1, 15, pos.data(), f.data(), half), std::invalid_argument);
  EXPECT_THROW(rope(x.data(), 15, 2, 1, 16, pos.data(), f.data(), half), std::invalid_argument);
  EXPECT_THROW(rope(x.data(), 16, 2, 0, 16, pos.data(), f.data(), half), std::invalid_argument);
  EXPECT_THROW(rope(x.data(), 16, -1, 1, 16, pos.data(), f.data(), half), std::invalid_argument);
  EXPECT_THROW(rope(x.data(), 16, 2, 1, 16, nullptr, f.data(), half), std::invalid_argument);
  EXPECT_THROW(rope(x.data(), 16, 2, 1, 16, pos.data(), nullptr, half), std::invalid_argument);
  EXPECT_THROW(rope(nullptr, 16, 2, 1, 16, pos.data(), f.data(), half), std::invalid_argument);
  EXPECT_THROW(rope(x.data(), 16, 2, 1, 16, neg.data(), f.data(), half), std::invalid_argument);
  EXPECT_THROW(rope(x.data(), 16, 2, 1, 16, pos.data(), f.data(), static_cast<RopeStyle>(7)),
               std::invalid_argument);
}

}  // namespace
}  // namespace spindle::kernels::test
