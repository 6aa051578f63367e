// lora_expand_backward / lora_shrink_backward at every vector level against a naive double
// backward, which central finite differences of the double forward y = s·(x·Aᵀ)·Bᵀ check in
// turn. Mixed ranks, a rank-0 slot, base-only segments, 1-row and 20-row segments (both code
// paths), a slot used by short and tall segments, rows in no segment, a column window of a wider
// dy, dx null and non-null, accumulation, and padding past each slot's rank left exactly 0.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernel_test_util.h"
#include "spindle/kernels/lora.h"

namespace spindle::kernels::test {
namespace {

constexpr float kUntouched = 12345.0f;

struct Case {
  int64_t d_in, d_out, max_rank;
  std::vector<int32_t> ranks;  // one per slot
  std::vector<LoraSegment> segments;
  int64_t T;
};

// Inputs of one case; weights past a slot's rank are NaN so reading them poisons the result.
struct Data {
  const Case& c;
  int64_t ld_x, ld_dy, ld_dx, col_offset = 7;
  std::vector<float> A, B, scale, x, dy;
  std::vector<int32_t> rank;
  std::vector<int32_t> row_slot;  // slot of each row, -1 if none or rank 0
  LoraSlots slots;

  Data(const Case& c_, uint32_t seed)
      : c(c_), ld_x(c_.d_in + 3), ld_dy(c_.d_out + 7 + 4), ld_dx(c_.d_in + 2), rank(c_.ranks) {
    const auto n_slots = int64_t(c.ranks.size());
    A = random_floats(size_t(n_slots * c.max_rank * c.d_in), seed);
    B = random_floats(size_t(n_slots * c.d_out * c.max_rank), seed + 1);
    for (int64_t s = 0; s < n_slots; ++s) {
      for (int64_t i = c.ranks[size_t(s)]; i < c.max_rank; ++i)
        for (int64_t k = 0; k < c.d_in; ++k) A[a_at(s, i, k)] = std::nanf("");
      // B_s = [d_out, r_s] packed at the slot's start: the rest of its d_out·max_rank is NaN.
      for (int64_t n = c.d_out * c.ranks[size_t(s)]; n < c.d_out * c.max_rank; ++n)
        B[size_t(s * c.d_out * c.max_rank + n)] = std::nanf("");
    }
    for (int64_t s = 0; s < n_slots; ++s) scale.push_back(0.5f + 0.25f * float(s));
    x = random_floats(size_t(c.T * ld_x), seed + 2);
    dy = random_floats(size_t(c.T * ld_dy), seed + 3);
    slots = LoraSlots{A.data(), B.data(),   rank.data(), scale.data(),
                      n_slots,  c.max_rank, c.d_in,      c.d_out};
    row_slot.assign(size_t(c.T), -1);
    for (const auto& seg : c.segments)
      for (int64_t r = seg.row_begin; r < seg.row_end; ++r)
        if (seg.slot >= 0 && c.ranks[size_t(seg.slot)] > 0) row_slot[size_t(r)] = seg.slot;
  }
  size_t a_at(int64_t s, int64_t i, int64_t k) const {
    return size_t((s * c.max_rank + i) * c.d_in + k);
  }
  size_t b_at(int64_t s, int64_t j, int64_t i) const {  // B_s[j, i], row stride r_s
    return size_t(s * c.d_out * c.max_rank + j * c.ranks[size_t(s)] + i);
  }
  int64_t r_of(int64_t t) const {
    const int32_t s = row_slot[size_t(t)];
    return s < 0 ? 0 : c.ranks[size_t(s)];
  }
};

// Kernel outputs: h from lora_shrink, then the two backward passes.
struct Grads {
  std::vector<float> h, dh, dA, dB, dx;
};

Grads run_backward(const Data& d, bool with_dx, const std::vector<float>& dA0,
                   const std::vector<float>& dB0, const std::vector<float>& dx0) {
  const Case& c = d.c;
  Grads g{std::vector<float>(size_t(c.T * c.max_rank), kUntouched),
          std::vector<float>(size_t(c.T * c.max_rank), kUntouched), dA0, dB0, dx0};
  lora_shrink(d.x.data(), d.ld_x, d.slots, c.segments, g.h.data());
  lora_expand_backward(g.h.data(), d.dy.data(), d.ld_dy, d.col_offset, d.slots, c.segments,
                       g.dh.data(), g.dB.data());
  lora_shrink_backward(d.x.data(), d.ld_x, g.dh.data(), d.slots, c.segments, g.dA.data(),
                       with_dx ? g.dx.data() : nullptr, d.ld_dx);
  return g;
}

// Zero-filled gradient pools, as the trainer allocates them.
std::vector<float> zeros(size_t n) {
  return std::vector<float>(n, 0.0f);
}

class LoraBackward : public SimdLevelTest {
 protected:
  // Naive double backward from the kernel's own h and dh (each pass checked on its inputs);
  // float sums err in proportion to the sum of |terms|, so tolerances scale with it.
  static void check(const Case& c, uint32_t seed) {
    const Data d(c, seed);
    const size_t a_size = d.A.size(), b_size = d.B.size();
    // Start from random gradients in the adapted region, 0 in the padding.
    auto dA0 = random_floats(a_size, seed + 5), dB0 = random_floats(b_size, seed + 6);
    for (size_t i = 0; i < a_size; ++i)
      if (std::isnan(d.A[i])) dA0[i] = 0.0f;
    for (size_t i = 0; i < b_size; ++i)
      if (std::isnan(d.B[i])) dB0[i] = 0.0f;
    const auto dx0 = random_floats(size_t(c.T * d.ld_dx), seed + 7);
    const Grads g = run_backward(d, /*with_dx=*/true, dA0, dB0, dx0);

    constexpr double kRel = 2e-5;
    std::vector<double> want_dA(dA0.begin(), dA0.end()), mag_dA(a_size);
    std::vector<double> want_dB(dB0.begin(), dB0.end()), mag_dB(b_size);
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t s = d.row_slot[size_t(t)], r = d.r_of(t);
      const double sc = s < 0 ? 0.0 : d.scale[size_t(s)];
      for (int64_t i = 0; i < c.max_rank; ++i) {
        const size_t at = size_t(t * c.max_rank + i);
        if (i >= r) {
          ASSERT_EQ(g.dh[at], kUntouched) << "dh row " << t << " col " << i << " past rank";
          continue;
        }
        double want = 0.0, mag = 0.0;
        for (int64_t j = 0; j < c.d_out; ++j) {
          const double term =
              double(d.dy[size_t(t * d.ld_dy + d.col_offset + j)]) * d.B[d.b_at(s, j, i)];
          want += term;
          mag += std::abs(term);
        }
        ASSERT_NEAR(g.dh[at], sc * want, kRel * sc * mag + 1e-6) << "dh row " << t << " col " << i;
        for (int64_t j = 0; j < c.d_out; ++j) {
          const double term = sc * d.dy[size_t(t * d.ld_dy + d.col_offset + j)] * g.h[at];
          want_dB[d.b_at(s, j, i)] += term;
          mag_dB[d.b_at(s, j, i)] += std::abs(term);
        }
        for (int64_t k = 0; k < c.d_in; ++k) {
          const double term = double(g.dh[at]) * d.x[size_t(t * d.ld_x + k)];
          want_dA[d.a_at(s, i, k)] += term;
          mag_dA[d.a_at(s, i, k)] += std::abs(term);
        }
      }
      for (int64_t k = 0; k < d.ld_dx; ++k) {
        const size_t at = size_t(t * d.ld_dx + k);
        if (r == 0 || k >= c.d_in) {
          ASSERT_EQ(g.dx[at], dx0[at]) << "dx row " << t << " col " << k << " untouched";
          continue;
        }
        double want = dx0[at], mag = std::abs(dx0[at]);
        for (int64_t i = 0; i < r; ++i) {
          const double term = double(g.dh[size_t(t * c.max_rank + i)]) * d.A[d.a_at(s, i, k)];
          want += term;
          mag += std::abs(term);
        }
        ASSERT_NEAR(g.dx[at], want, kRel * mag + 1e-6) << "dx row " << t << " col " << k;
      }
    }
    const auto compare_pool = [&](const std::vector<float>& got, const std::vector<double>& want,
                                  const std::vector<double>& mag, const std::vector<float>& w,
                                  const char* name) {
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(w[i])) {  // past the slot's rank: exactly 0, so the optimizer never moves it
          ASSERT_EQ(got[i], 0.0f) << name << " padding " << i;
        } else {
          ASSERT_NEAR(got[i], want[i], kRel * (mag[i] + std::abs(want[i])) + 1e-6)
              << name << " " << i;
        }
      }
    };
    compare_pool(g.dA, want_dA, mag_dA, d.A, "dA");
    compare_pool(g.dB, want_dB, mag_dB, d.B, "dB");

    // Accumulation: two calls from zero give twice one call (within rounding); dx null leaves
    // dA unchanged; padding stays exactly 0.
    const Grads once = run_backward(d, /*with_dx=*/false, zeros(a_size), zeros(b_size), {});
    Grads twice = once;
    lora_expand_backward(twice.h.data(), d.dy.data(), d.ld_dy, d.col_offset, d.slots, c.segments,
                         twice.dh.data(), twice.dB.data());
    lora_shrink_backward(d.x.data(), d.ld_x, twice.dh.data(), d.slots, c.segments, twice.dA.data(),
                         nullptr, d.ld_dx);
    EXPECT_EQ(twice.dh, once.dh) << "dh is overwritten, not accumulated";
    for (size_t i = 0; i < a_size; ++i)
      ASSERT_NEAR(twice.dA[i], 2.0 * once.dA[i], 1e-5 * (1 + std::abs(once.dA[i]))) << "dA " << i;
    for (size_t i = 0; i < b_size; ++i)
      ASSERT_NEAR(twice.dB[i], 2.0 * once.dB[i], 1e-5 * (1 + std::abs(once.dB[i]))) << "dB " << i;
    for (size_t i = 0; i < a_size; ++i)
      if (std::isnan(d.A[i])) ASSERT_EQ(twice.dA[i], 0.0f) << "dA padding " << i;
    for (size_t i = 0; i < b_size; ++i)
      if (std::isnan(d.B[i])) ASSERT_EQ(twice.dB[i], 0.0f) << "dB padding " << i;
  }
};

// Ranks 1, 3, 8, 16, 0, 5 (slot 4 not adapted); segments of 1, 3 (base only), 1, 20, 1 (rank 0),
// 18, 3 rows; rows 47..49 in no segment; slot 3 in a 20-row and a 1-row segment.
Case mixed_case(int64_t d_in, int64_t d_out, int64_t max_rank, std::vector<int32_t> ranks) {
  return {d_in,
          d_out,
          max_rank,
          std::move(ranks),
          {{0, 1, 2},
           {1, 4, -1},
           {4, 5, 0},
           {5, 25, 3},
           {25, 26, 4},
           {26, 44, 1},
           {44, 47, 5},
           {50, 51, 3},
           {51, 51, 2}},
          51};
}

TEST_P(LoraBackward, MixedRanksAndSegmentShapes) {
  check(mixed_case(40, 37, 16, {1, 3, 8, 16, 0, 5}), 1);
  check(mixed_case(20, 70, 64, {1, 3, 8, 40, 0, 64}), 2);
  check(mixed_case(8, 8, 16, {1, 3, 8, 16, 0, 5}), 3);
}

TEST_P(LoraBackward, ShortSegmentsOfOneSlotAndParallelRows) {
  // 64 one-row segments of 8 slots (runs of one slot across segments), large enough to go parallel.
  Case c{512, 1024, 16, {16, 8, 1, 3, 8, 16, 0, 5}, {}, 64};
  for (int32_t r = 0; r < 64; ++r) c.segments.push_back({r, r + 1, r % 3 == 0 ? 1 : r % 8});
  check(c, 4);
  // Runs of 15 rows of one slot separated by base-only rows.
  check({33, 29, 8, {8, 3}, {{0, 15, 0}, {15, 16, -1}, {16, 31, 0}, {31, 46, 1}}, 46}, 5);
}

TEST_P(LoraBackward, OneAdapterForAllRows) {
  check({300, 200, 8, {8}, {{0, 64, 0}}, 64}, 6);
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(LoraBackward);

// The kernels' gradients against central differences of f = Σ dy·y, y = s·(x·Aᵀ)·Bᵀ in double.
TEST(LoraBackwardFiniteDifferences, MatchKernels) {
  const Case c{6, 5, 4, {2, 4, 0}, {{0, 2, 0}, {2, 3, -1}, {3, 20, 1}, {20, 21, 2}, {21, 22, 1}},
               23};
  Data d(c, 11);
  const Grads g =
      run_backward(d, /*with_dx=*/true, zeros(d.A.size()), zeros(d.B.size()), zeros(d.x.size()));
  std::vector<double> A(d.A.begin(), d.A.end()), B(d.B.begin(), d.B.end()),
      x(d.x.begin(), d.x.end());
  const auto f = [&] {
    double sum = 0.0;
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t s = d.row_slot[size_t(t)], r = d.r_of(t);
      for (int64_t j = 0; j < c.d_out; ++j) {
        double y = 0.0;
        for (int64_t i = 0; i < r; ++i) {
          double h = 0.0;
          for (int64_t k = 0; k < c.d_in; ++k) h += x[size_t(t * d.ld_x + k)] * A[d.a_at(s, i, k)];
          y += h * B[d.b_at(s, j, i)];
        }
        if (r > 0) sum += d.dy[size_t(t * d.ld_dy + d.col_offset + j)] * d.scale[size_t(s)] * y;
      }
    }
    return sum;
  };
  const auto fd = [&](std::vector<double>& v, size_t i) {
    const double keep = v[i], step = 1e-4;
    v[i] = keep + step;
    const double up = f();
    v[i] = keep - step;
    const double down = f();
    v[i] = keep;
    return (up - down) / (2 * step);
  };
  for (size_t i = 0; i < A.size(); ++i)
    if (!std::isnan(A[i])) ASSERT_NEAR(g.dA[i], fd(A, i), 2e-5) << "dA " << i;
  for (size_t i = 0; i < B.size(); ++i)
    if (!std::isnan(B[i])) ASSERT_NEAR(g.dB[i], fd(B, i), 2e-5) << "dB " << i;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t k = 0; k < c.d_in; ++k) {
      const size_t at = size_t(t * d.ld_x + k);
      ASSERT_NEAR(g.dx[size_t(t * d.ld_dx + k)], fd(x, at), 2e-5) << "dx row " << t << " col " << k;
    }
}

TEST(LoraBackwardContracts, ViolationsThrowAndWriteNothing) {
  const Case c = mixed_case(16, 12, 8, {1, 3, 8, 2, 0, 5});
  const Data d(c, 9);
  std::vector<float> h(size_t(c.T * c.max_rank), 1.0f), dh(h.size(), kUntouched);
  std::vector<float> dA(d.A.size(), 0.0f), dB(d.B.size(), 0.0f), dx(size_t(c.T * 16), 0.0f);
  const auto expand = [&](const LoraSlots& slots, std::vector<LoraSegment> segs) {
    lora_expand_backward(h.data(), d.dy.data(), d.ld_dy, 0, slots, segs, dh.data(), dB.data());
  };
  const auto shrink = [&](const LoraSlots& slots, std::vector<LoraSegment> segs) {
    lora_shrink_backward(d.x.data(), d.ld_x, h.data(), slots, segs, dA.data(), dx.data(), 16);
  };
  const auto expect_both_throw = [&](const LoraSlots& slots, std::vector<LoraSegment> segs) {
    EXPECT_THROW(expand(slots, segs), std::invalid_argument);
    EXPECT_THROW(shrink(slots, segs), std::invalid_argument);
  };
  expect_both_throw(d.slots, {{0, 1, 2}, {1, 3, 6}});  // slot >= max_slots
  expect_both_throw(d.slots, {{0, 1, 2}, {3, 2, 1}});  // row_end < row_begin
  expect_both_throw(d.slots, {{-1, 1, 2}});
  expect_both_throw(d.slots, {{4, 6, 2}, {0, 2, 1}});  // out of order
  expect_both_throw(d.slots, {{0, 4, 2}, {3, 6, 1}});  // overlapping
  std::vector<int32_t> big_rank = d.rank;
  big_rank[1] = 9;  // > max_rank
  LoraSlots bad = d.slots;
  bad.rank = big_rank.data();
  expect_both_throw(bad, {{0, 1, 1}});
  bad = d.slots;
  bad.B = nullptr;
  EXPECT_THROW(expand(bad, {{0, 1, 1}}), std::invalid_argument);
  bad = d.slots;
  bad.scale = nullptr;
  EXPECT_THROW(expand(bad, {{0, 1, 1}}), std::invalid_argument);
  bad = d.slots;
  bad.A = nullptr;
  EXPECT_THROW(shrink(bad, {{0, 1, 1}}), std::invalid_argument);
  const std::vector<LoraSegment> one{{0, 20, 1}};
  EXPECT_THROW(
      lora_expand_backward(h.data(), d.dy.data(), d.ld_dy, 12, d.slots, one, dh.data(), dB.data()),
      std::invalid_argument);  // col_offset + d_out > ld_dy
  EXPECT_THROW(
      lora_expand_backward(h.data(), d.dy.data(), d.ld_dy, 0, d.slots, one, dh.data(), nullptr),
      std::invalid_argument);
  EXPECT_THROW(lora_shrink_backward(d.x.data(), 15, h.data(), d.slots, one, dA.data(), nullptr, 0),
               std::invalid_argument);  // ld_x < d_in
  EXPECT_THROW(
      lora_shrink_backward(d.x.data(), d.ld_x, h.data(), d.slots, one, dA.data(), dx.data(), 15),
      std::invalid_argument);  // ld_dx < d_in with dx
  EXPECT_THROW(
      lora_shrink_backward(d.x.data(), d.ld_x, h.data(), d.slots, one, nullptr, nullptr, 0),
      std::invalid_argument);
  EXPECT_EQ(std::count(dh.begin(), dh.end(), kUntouched), int64_t(dh.size()));
  EXPECT_EQ(std::count(dA.begin(), dA.end(), 0.0f), int64_t(dA.size()));
  EXPECT_EQ(std::count(dB.begin(), dB.end(), 0.0f), int64_t(dB.size()));
  EXPECT_EQ(std::count(dx.begin(), dx.end(), 0.0f), int64_t(dx.size()));
  // Nothing adapted: null data is fine; dx null needs no ld_dx.
  const std::vector<LoraSegment> base{{0, 5, -1}, {5, 6, 4}};
  EXPECT_NO_THROW(
      lora_expand_backward(nullptr, nullptr, d.ld_dy, 0, d.slots, base, nullptr, nullptr));
  EXPECT_NO_THROW(
      lora_shrink_backward(nullptr, d.ld_x, nullptr, d.slots, base, nullptr, nullptr, 0));
}

}  // namespace
}  // namespace spindle::kernels::test
