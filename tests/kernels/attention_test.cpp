// kv_cache_write and attention_paged against dense causal GQA attention in double, on ragged
// batches whose block tables are shuffled and whose lengths block_size does not divide.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernel_test_util.h"
#include "spindle/kernels/attention.h"

namespace spindle::kernels::test {
namespace {

struct SeqSpec {
  int64_t n_past, n_new;
};

// A paged cache filled through kv_cache_write with every sequence's dense K/V, plus the dense
// copies the reference reads. Blocks are handed out in a shuffled order, so no sequence owns
// contiguous or increasing blocks, and a few blocks stay unused.
struct Fixture {
  int64_t n_heads, n_kv, hd, bs;
  std::vector<SeqSpec> specs;
  std::vector<float> k_cache, v_cache;
  PagedKv cache;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> k_dense, v_dense;  // [pos, n_kv·hd] per sequence
  std::vector<AttnSeq> seqs;
  int64_t T = 0;

  Fixture(int64_t n_heads_, int64_t n_kv_, int64_t hd_, int64_t bs_, std::vector<SeqSpec> s,
          uint32_t seed)
      : n_heads(n_heads_), n_kv(n_kv_), hd(hd_), bs(bs_), specs(std::move(s)) {
    const int64_t width = n_kv * hd;
    int64_t n_blocks = 3;  // spare blocks nobody uses
    for (const auto& sp : specs) n_blocks += (sp.n_past + sp.n_new + bs - 1) / bs;
    k_cache.assign(size_t(n_blocks * bs * width), std::nanf(""));
    v_cache.assign(k_cache.size(), std::nanf(""));
    cache = PagedKv{k_cache.data(), v_cache.data(), n_blocks, bs, n_kv, hd};
    std::vector<int32_t> order(static_cast<size_t>(n_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    size_t next = 0;
    // New-token rows go to q/out in reverse sequence order, so row_begin is not monotone.
    std::vector<int64_t> row_begin(specs.size());
    for (size_t i = specs.size(); i-- > 0;) {
      row_begin[i] = T;
      T += specs[i].n_new;
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t ctx = specs[i].n_past + specs[i].n_new;
      std::vector<int32_t> table;
      for (int64_t b = 0; b < (ctx + bs - 1) / bs; ++b) table.push_back(order[next++]);
      tables.push_back(table);
      k_dense.push_back(random_floats(size_t(ctx * width), seed + 10 + uint32_t(i)));
      v_dense.push_back(random_floats(size_t(ctx * width), seed + 20 + uint32_t(i)));
      std::vector<int64_t> slot(static_cast<size_t>(ctx));
      for (int64_t p = 0; p < ctx; ++p) slot[size_t(p)] = table[size_t(p / bs)] * bs + p % bs;
      kv_cache_write(cache, k_dense[i].data(), v_dense[i].data(), width, ctx, slot.data());
    }
    for (size_t i = 0; i < specs.size(); ++i)
      seqs.push_back({row_begin[i], specs[i].n_new, specs[i].n_past, tables[i].data()});
  }

  // Dense causal GQA attention in double; out rows follow seqs[i].row_begin.
  std::vector<double> reference(const std::vector<float>& q, int64_t ld_q, int64_t ld_out,
                                double scale) const {
    std::vector<double> out(size_t(T * ld_out), 0.0);
    const int64_t width = n_kv * hd;
    for (size_t i = 0; i < specs.size(); ++i)
      for (int64_t t = 0; t < specs[i].n_new; ++t)
        for (int64_t h = 0; h < n_heads; ++h) {
          const int64_t row = seqs[i].row_begin + t;
          const int64_t kvh = h / (n_heads / n_kv);
          const int64_t ctx = specs[i].n_past + t + 1;
          std::vector<double> s(static_cast<size_t>(ctx));
          for (int64_t j = 0; j < ctx; ++j) {
            double d = 0.0;
            for (int64_t c = 0; c < hd; ++c)
              d += double(q[size_t(row * ld_q + h * hd + c)]) *
                   k_dense[i][size_t(j * width + kvh * hd + c)];
            s[size_t(j)] = scale * d;
          }
          const double m = *std::max_element(s.begin(), s.end());
          double sum = 0.0;
          for (double& v : s) sum += (v = std::exp(v - m));
          for (int64_t c = 0; c < hd; ++c) {
            double acc = 0.0;
            for (int64_t j = 0; j < ctx; ++j)
              acc += s[size_t(j)] / sum * v_dense[i][size_t(j * width + kvh * hd + c)];
            out[size_t(row * ld_out + h * hd + c)] = acc;
          }
        }
    return out;
  }
};

struct AttnCase {
  int64_t n_heads, n_kv, hd, bs;
  std::vector<SeqSpec> seqs;
};

class Attention : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (set_simd_level_for_testing(GetParam()) != GetParam()) GTEST_SKIP();
  }
  void TearDown() override { set_simd_level_for_testing(simd_level_detected()); }

  static void check(const AttnCase& c, uint32_t seed) {
    Fixture f(c.n_heads, c.n_kv, c.hd, c.bs, c.seqs, seed);
    const int64_t ld_q = c.n_heads * c.hd + 5, ld_out = c.n_heads * c.hd + 3;
    const auto q = random_floats(size_t(f.T * ld_q), seed + 99, -2.0f, 2.0f);
    std::vector<float> out(size_t(f.T * ld_out), 0.0f);
    const float scale = 1.0f / std::sqrt(float(c.hd));
    attention_paged(q.data(), ld_q, out.data(), ld_out, c.n_heads, f.cache, f.seqs, scale);
    const auto want = f.reference(q, ld_q, ld_out, scale);
    EXPECT_TRUE(all_close(out, want, 2e-5, 1e-4))
        << "n_heads=" << c.n_heads << " n_kv=" << c.n_kv << " hd=" << c.hd << " bs=" << c.bs;

    // out may alias q when the strides agree.
    auto inplace = q;
    attention_paged(inplace.data(), ld_q, inplace.data(), ld_q, c.n_heads, f.cache, f.seqs, scale);
    const auto want_inplace = f.reference(q, ld_q, ld_q, scale);
    for (int64_t r = 0; r < f.T; ++r)
      for (int64_t j = 0; j < c.n_heads * c.hd; ++j)
        ASSERT_NEAR(inplace[size_t(r * ld_q + j)], want_inplace[size_t(r * ld_q + j)], 2e-5);
  }
};

TEST_P(Attention, RaggedBatchPrefillAndDecodeGqa) {
  // Prefill continuing a prefix, a decode step, a fresh prompt; block_size 4 divides none.
  const std::vector<SeqSpec> seqs{{5, 6}, {11, 1}, {2, 9}};
  for (int64_t hd : {8, 20, 64, 72}) check({6, 2, hd, 4, seqs}, uint32_t(hd));
  check({4, 4, 16, 3, seqs}, 5);                       // plain multi-head
  check({8, 1, 32, 5, seqs}, 6);                       // multi-query
  check({2, 1, 8, 16, {{0, 1}, {0, 0}, {17, 3}}}, 7);  // a sequence with no new tokens
}

TEST_P(Attention, LargeBatchRunsParallel) {
  check({8, 2, 64, 16, {{100, 64}, {37, 1}, {0, 50}, {250, 1}}}, 11);
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(Attention);

TEST(KvCacheWrite, CopiesRowsToFlatSlots) {
  const int64_t n_kv = 2, hd = 3, width = n_kv * hd, bs = 4, n_blocks = 3, ld = width + 2;
  std::vector<float> k(size_t(n_blocks * bs * width), -1.0f), v(k.size(), -1.0f);
  const PagedKv cache{k.data(), v.data(), n_blocks, bs, n_kv, hd};
  const auto k_new = random_floats(size_t(3 * ld), 1), v_new = random_floats(size_t(3 * ld), 2);
  const std::vector<int64_t> slot{9, 0, 11};
  kv_cache_write(cache, k_new.data(), v_new.data(), ld, 3, slot.data());
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t c = 0; c < width; ++c) {
      EXPECT_EQ(k[size_t(slot[size_t(t)] * width + c)], k_new[size_t(t * ld + c)]);
      EXPECT_EQ(v[size_t(slot[size_t(t)] * width + c)], v_new[size_t(t * ld + c)]);
    }
  EXPECT_EQ(k[size_t(1 * width)], -1.0f);
  EXPECT_EQ(std::count(k.begin(), k.end(), -1.0f), int64_t(k.size()) - 3 * width);
}

TEST(AttentionContracts, ViolationsThrowInvalidArgument) {
  std::vector<float> k(2 * 4 * 8, 0.0f), v(k.size(), 0.0f), q(64, 0.0f), out(64, 0.0f);
  const PagedKv cache{k.data(), v.data(), 2, 4, 2, 4};
  const std::vector<int32_t> table{1, 0}, bad_table{1, 2};
  const std::vector<int64_t> slot{0, 8}, bad_slot{0, 8 * 8};
  std::vector<AttnSeq> seqs{{0, 2, 3, table.data()}};
  const float s = 0.5f;
  // q, out: [2, n_heads·4] with row stride 16.
  const auto run = [&](int64_t n_heads, int64_t ld_q, int64_t ld_out, const PagedKv& c,
                       const std::vector<AttnSeq>& batch, const float* qp) {
    attention_paged(qp, ld_q, out.data(), ld_out, n_heads, c, batch, s);
  };
  EXPECT_NO_THROW(run(4, 16, 16, cache, seqs, q.data()));
  EXPECT_THROW(run(3, 16, 16, cache, seqs, q.data()), std::invalid_argument);  // 3 % 2 != 0
  EXPECT_THROW(run(0, 16, 16, cache, seqs, q.data()), std::invalid_argument);
  EXPECT_THROW(run(4, 15, 16, cache, seqs, q.data()), std::invalid_argument);
  EXPECT_THROW(run(4, 16, 15, cache, seqs, q.data()), std::invalid_argument);
  EXPECT_THROW(run(4, 16, 16, cache, seqs, nullptr), std::invalid_argument);
  PagedKv no_k = cache;
  no_k.k = nullptr;
  EXPECT_THROW(run(4, 16, 16, no_k, seqs, q.data()), std::invalid_argument);
  PagedKv zero_block = cache;
  zero_block.block_size = 0;
  EXPECT_THROW(run(4, 16, 16, zero_block, seqs, q.data()), std::invalid_argument);
  const auto with = [&](AttnSeq seq) { run(4, 16, 16, cache, {seq}, q.data()); };
  EXPECT_THROW(with({0, 2, 3, nullptr}), std::invalid_argument);
  EXPECT_THROW(with({0, 2, 3, bad_table.data()}), std::invalid_argument);
  EXPECT_THROW(with({0, 2, -1, table.data()}), std::invalid_argument);
  EXPECT_THROW(with({0, -2, 3, table.data()}), std::invalid_argument);
  EXPECT_THROW(with({-1, 2, 3, table.data()}), std::invalid_argument);
  EXPECT_THROW(kv_cache_write(cache, q.data(), q.data(), 8, 2, bad_slot.data()),
               std::invalid_argument);
  EXPECT_THROW(kv_cache_write(cache, q.data(), q.data(), 7, 2, slot.data()), std::invalid_argument);
  EXPECT_THROW(kv_cache_write(cache, nullptr, q.data(), 8, 2, slot.data()), std::invalid_argument);
  EXPECT_THROW(kv_cache_write(cache, q.data(), q.data(), 8, -1, slot.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace spindle::kernels::test
