// lora_shrink / lora_expand against y += s·(x·Aᵀ)·Bᵀ in double: mixed ranks, a rank-0 slot,
// base-only segments, one-row and many-row segments (both code paths), rows in no segment, and
// a column window of a wider y.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernel_test_util.h"
#include "spindle/kernels/lora.h"

namespace spindle::kernels::test {
namespace {

constexpr float kUntouched = 12345.0f;

struct LoraCase {
  int64_t d_in, d_out, max_rank;
  std::vector<int32_t> ranks;  // one per slot
  std::vector<LoraSegment> segments;
  int64_t T;
};

struct LoraData {
  std::vector<float> A, B, scale, x;
  std::vector<int32_t> rank;
  LoraSlots slots;
};

LoraData make_data(const LoraCase& c, int64_t ld_x, uint32_t seed) {
  LoraData d;
  const auto n_slots = int64_t(c.ranks.size());
  d.rank = c.ranks;
  // Columns/rows past a slot's rank hold NaN: reading them would poison the result.
  d.A = random_floats(size_t(n_slots * c.max_rank * c.d_in), seed);
  d.B = random_floats(size_t(n_slots * c.d_out * c.max_rank), seed + 1);
  for (int64_t s = 0; s < n_slots; ++s) {
    for (int64_t i = c.ranks[size_t(s)]; i < c.max_rank; ++i)
      for (int64_t k = 0; k < c.d_in; ++k)
        d.A[size_t((s * c.max_rank + i) * c.d_in + k)] = std::nanf("");
    // B_s = [d_out, r_s] packed at the slot's start: the rest of its d_out·max_rank is NaN.
    for (int64_t n = c.d_out * c.ranks[size_t(s)]; n < c.d_out * c.max_rank; ++n)
      d.B[size_t(s * c.d_out * c.max_rank + n)] = std::nanf("");
  }
  for (int64_t s = 0; s < n_slots; ++s) d.scale.push_back(0.5f + 0.25f * float(s));
  d.x = random_floats(size_t(c.T * ld_x), seed + 2);
  d.slots = LoraSlots{d.A.data(), d.B.data(), d.rank.data(), d.scale.data(),
                      n_slots,    c.max_rank, c.d_in,        c.d_out};
  return d;
}

class Lora : public SimdLevelTest {
 protected:
  static void check(const LoraCase& c, uint32_t seed) {
    const int64_t ld_x = c.d_in + 3, col_offset = 7, ld_y = c.d_out + col_offset + 4;
    const LoraData d = make_data(c, ld_x, seed);
    std::vector<float> h(size_t(c.T * c.max_rank), kUntouched);
    auto y = random_floats(size_t(c.T * ld_y), seed + 3);
    const auto y0 = y;
    lora_shrink(d.x.data(), ld_x, d.slots, c.segments, h.data());
    lora_expand(h.data(), d.slots, c.segments, y.data(), ld_y, col_offset);

    std::vector<int32_t> row_slot(size_t(c.T), -1);
    for (const auto& seg : c.segments)
      for (int64_t r = seg.row_begin; r < seg.row_end; ++r) row_slot[size_t(r)] = seg.slot;
    // Float sums err in proportion to the sum of |terms|: tolerances scale with it.
    constexpr double kRel = 1e-5;
    std::vector<double> want_y(y0.begin(), y0.end());
    std::vector<double> mag_y(y0.size(), 0.0);
    for (int64_t t = 0; t < c.T; ++t) {
      const int32_t s = row_slot[static_cast<size_t>(t)];
      const int64_t r = s < 0 ? 0 : c.ranks[static_cast<size_t>(s)];
      std::vector<double> ht(static_cast<size_t>(r)), mag_h(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) {
        for (int64_t k = 0; k < c.d_in; ++k) {
          const double term =
              double(d.x[size_t(t * ld_x + k)]) * d.A[size_t((s * c.max_rank + i) * c.d_in + k)];
          ht[size_t(i)] += term;
          mag_h[size_t(i)] += std::abs(term);
        }
        ASSERT_NEAR(h[size_t(t * c.max_rank + i)], ht[size_t(i)], kRel * mag_h[size_t(i)])
            << "h row " << t;
      }
      for (int64_t i = r; i < c.max_rank; ++i)
        ASSERT_EQ(h[size_t(t * c.max_rank + i)], kUntouched) << "h row " << t << " col " << i;
      for (int64_t j = 0; j < c.d_out; ++j) {
        double acc = 0.0, mag = 0.0;
        for (int64_t i = 0; i < r; ++i) {
          const double b = d.B[size_t(s * c.d_out * c.max_rank + j * r + i)];
          acc += ht[size_t(i)] * b;
          mag += mag_h[size_t(i)] * std::abs(b);
        }
        const size_t at = size_t(t * ld_y + col_offset + j);
        if (r == 0) continue;
        want_y[at] += d.scale[size_t(s)] * acc;
        mag_y[at] = std::abs(y0[at]) + d.scale[size_t(s)] * mag;
      }
    }
    // Columns outside [col_offset, col_offset + d_out) and unadapted rows compare exactly.
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < ld_y; ++j) {
        const size_t i = size_t(t * ld_y + j);
        if (mag_y[i] == 0.0 || row_slot[size_t(t)] < 0 ||
            c.ranks[size_t(row_slot[size_t(t)])] == 0) {
          ASSERT_EQ(y[i], y0[i]) << "row " << t << " col " << j;
        } else {
          ASSERT_NEAR(y[i], want_y[i], kRel * mag_y[i]) << "row " << t << " col " << j;
        }
      }
  }
};

// Ranks 1, 3, 8, 16, 0, 5 (slot 4 not adapted); segments of 1, 3, 20 and 18 rows; rows 47..49
// in no segment.
LoraCase mixed_case(int64_t d_in, int64_t d_out, int64_t max_rank, std::vector<int32_t> ranks) {
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

TEST_P(Lora, MixedRanksAndSegmentShapes) {
  check(mixed_case(40, 37, 16, {1, 3, 8, 16, 0, 5}), 1);   // long shrink rows, short expand
  check(mixed_case(20, 70, 64, {1, 3, 8, 40, 0, 64}), 2);  // short shrink rows, long expand
  check(mixed_case(8, 8, 8, {1, 3, 8, 2, 0, 5}), 3);
}

TEST_P(Lora, DecodeBatchOfDistinctAdaptersRunsParallel) {
  LoraCase c{512, 1024, 16, {}, {}, 64};
  for (int32_t s = 0; s < 64; ++s) {
    c.ranks.push_back(s % 9 == 0 ? 16 : 8);
    c.segments.push_back({s, s + 1, s});
  }
  check(c, 4);
}

TEST_P(Lora, OneAdapterForAllRows) {
  check({300, 200, 8, {8}, {{0, 64, 0}}, 64}, 5);
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(Lora);

TEST(LoraContracts, ViolationsThrowAndWriteNothing) {
  const LoraCase c = mixed_case(16, 12, 8, {1, 3, 8, 2, 0, 5});
  const LoraData d = make_data(c, 16, 9);
  std::vector<float> h(size_t(c.T * c.max_rank), kUntouched);
  std::vector<float> y(size_t(c.T * 12), 1.0f);
  const auto shrink = [&](const LoraSlots& slots, std::vector<LoraSegment> segs) {
    lora_shrink(d.x.data(), 16, slots, segs, h.data());
  };
  const auto expand = [&](const LoraSlots& slots, std::vector<LoraSegment> segs) {
    lora_expand(h.data(), slots, segs, y.data(), 12, 0);
  };
  const auto expect_both_throw = [&](const LoraSlots& slots, std::vector<LoraSegment> segs) {
    EXPECT_THROW(shrink(slots, segs), std::invalid_argument);
    EXPECT_THROW(expand(slots, segs), std::invalid_argument);
  };
  // A bad segment after good ones: validation precedes all work.
  expect_both_throw(d.slots, {{0, 1, 2}, {1, 3, 6}});  // slot >= max_slots
  expect_both_throw(d.slots, {{0, 1, 2}, {3, 2, 1}});  // row_end < row_begin
  expect_both_throw(d.slots, {{-1, 1, 2}});            // negative row
  expect_both_throw(d.slots, {{4, 6, 2}, {0, 2, 1}});  // out of order
  expect_both_throw(d.slots, {{0, 4, 2}, {3, 6, 1}});  // overlapping
  EXPECT_EQ(std::count(h.begin(), h.end(), kUntouched), int64_t(h.size()));
  EXPECT_EQ(std::count(y.begin(), y.end(), 1.0f), int64_t(y.size()));

  std::vector<int32_t> big_rank = d.rank;
  big_rank[1] = 9;  // > max_rank
  LoraSlots bad = d.slots;
  bad.rank = big_rank.data();
  expect_both_throw(bad, {{0, 1, 1}});
  big_rank[1] = -1;
  expect_both_throw(bad, {{0, 1, 1}});
  bad = d.slots;
  bad.A = nullptr;
  EXPECT_THROW(shrink(bad, {{0, 1, 1}}), std::invalid_argument);
  EXPECT_NO_THROW(shrink(bad, {{0, 1, -1}, {1, 2, 4}}));  // base-only and rank 0 need no A
  bad = d.slots;
  bad.B = nullptr;
  EXPECT_THROW(expand(bad, {{0, 1, 1}}), std::invalid_argument);
  bad = d.slots;
  bad.scale = nullptr;
  EXPECT_THROW(expand(bad, {{0, 1, 1}}), std::invalid_argument);
  bad = d.slots;
  bad.d_in = 0;
  expect_both_throw(bad, {{0, 1, 1}});
  EXPECT_THROW(lora_shrink(d.x.data(), 15, d.slots, std::vector<LoraSegment>{{0, 1, 1}}, h.data()),
               std::invalid_argument);  // ld_x < d_in
  EXPECT_THROW(lora_expand(h.data(), d.slots, std::vector<LoraSegment>{{0, 1, 1}}, y.data(), 12, 1),
               std::invalid_argument);  // col_offset + d_out > ld_y
  EXPECT_THROW(
      lora_expand(h.data(), d.slots, std::vector<LoraSegment>{{0, 1, 1}}, y.data(), 12, -1),
      std::invalid_argument);
  EXPECT_THROW(lora_shrink(nullptr, 16, d.slots, std::vector<LoraSegment>{{0, 1, 1}}, h.data()),
               std::invalid_argument);
  EXPECT_THROW(lora_expand(h.data(), d.slots, std::vector<LoraSegment>{{0, 1, 1}}, nullptr, 12, 0),
               std::invalid_argument);
  // Nothing adapted: null data is fine.
  EXPECT_NO_THROW(lora_shrink(nullptr, 16, d.slots, std::vector<LoraSegment>{{0, 5, -1}}, nullptr));
}

}  // namespace
}  // namespace spindle::kernels::test
