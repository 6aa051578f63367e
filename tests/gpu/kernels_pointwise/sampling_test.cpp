// CUDA sample_tokens: greedy is the argmax (first index on ties), top_k = 1 and a tiny top_p
// are greedy, top-k / top-p draws stay in their candidate sets, the empirical distribution over
// 20 000 draws matches the (tempered, truncated) softmax within 4 standard errors, a row's draw
// depends only on its logits, params, seed and counter (not on the batch), and the logprob is
// the raw log_softmax at the token, a cut inside a run of equal logits keeps the lowest
// indices, and the candidate pre-filter gives bitwise the full-row path's token and logprob.
// Both element types; vocabularies 1 to 151 936.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

#include "pointwise_test_util.h"
#include "spindle/kernels/cuda/sampling.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class PointwiseSampling : public ::testing::Test {};
TYPED_TEST_SUITE(PointwiseSampling, ElementTypes, ElementTypeNames);

struct Sampled {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// logits: [rows, ld] host floats already representable in T. full_row: without the candidate
// pre-filter (sample_tokens_full_row).
template <class T>
Sampled run_sampling(const std::vector<float>& logits, int64_t ld, int64_t vocab,
                     const std::vector<RowSampling>& params, bool full_row = false) {
  const int64_t rows = int64_t(params.size());
  Stream stream;
  auto d_logits = upload_as<T>(logits);
  auto d_params = upload_vec(params);
  DeviceBuffer<int32_t> d_tokens(static_cast<size_t>(rows));
  DeviceBuffer<float> d_logprobs(static_cast<size_t>(rows));
  DeviceBuffer<uint8_t> scratch(sampling_scratch_bytes(rows, vocab));
  if (full_row) {
    sample_tokens_full_row<T>(d_logits.data(), ld, rows, vocab, d_params.data(), d_tokens.data(),
                              d_logprobs.data(), scratch.data(), stream.get());
  } else {
    sample_tokens<T>(d_logits.data(), ld, rows, vocab, d_params.data(), d_tokens.data(),
                     d_logprobs.data(), scratch.data(), stream.get());
  }
  stream.synchronize();
  return {d_tokens.download(), d_logprobs.download()};
}

std::vector<double> raw_log_softmax(const float* x, int64_t vocab) {
  double m = -INFINITY;
  for (int64_t j = 0; j < vocab; ++j) m = std::max(m, double(x[j]));
  double s = 0.0;
  for (int64_t j = 0; j < vocab; ++j) s += std::exp(double(x[j]) - m);
  std::vector<double> out(static_cast<size_t>(vocab));
  for (int64_t j = 0; j < vocab; ++j) out[size_t(j)] = double(x[j]) - m - std::log(s);
  return out;
}

int64_t first_argmax(const float* x, int64_t vocab) {
  return std::max_element(x, x + vocab) - x;  // first of equal maxima
}

// Indices in the kernel's candidate order: logit descending, index ascending on ties.
std::vector<int64_t> order_desc(const float* x, int64_t vocab) {
  std::vector<int64_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
  return idx;
}

// Every row's logprob equals the raw log_softmax of its logits at the sampled token.
::testing::AssertionResult logprobs_are_raw(const std::vector<float>& logits, int64_t ld,
                                            int64_t vocab, const Sampled& s) {
  std::vector<float> got;
  std::vector<double> want;
  for (size_t r = 0; r < s.tokens.size(); ++r) {
    const int32_t t = s.tokens[r];
    if (t < 0 || t >= vocab) {
      return ::testing::AssertionFailure() << "row " << r << ": token " << t << " outside vocab";
    }
    got.push_back(s.logprobs[r]);
    want.push_back(raw_log_softmax(logits.data() + int64_t(r) * ld, vocab)[size_t(t)]);
  }
  return all_close(got, want, 5e-5, 1e-5, "logprob");
}

// Rows of one logits vector repeated; ties at the max at indices 1 and vocab/2 (vocab > 2).
template <class T>
std::vector<float> repeated_logits(int64_t rows, int64_t ld, int64_t vocab, uint32_t seed,
                                   float lo = -6.0f, float hi = 6.0f) {
  auto row = quantize<T>(random_floats(size_t(ld), seed, lo, hi));
  if (vocab > 2) row[1] = row[size_t(vocab / 2)] = hi + 1.0f;
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) out.insert(out.end(), row.begin(), row.end());
  return out;
}

TYPED_TEST(PointwiseSampling, GreedyTopK1AndTinyTopPAreTheFirstArgmax) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  for (const int64_t vocab : {int64_t{1}, int64_t{16}, int64_t{512}, int64_t{151936}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const int64_t ld = vocab + 5;
    const int64_t rows = 6;
    auto logits = repeated_logits<T>(rows, ld, vocab, uint32_t(vocab));
    std::vector<RowSampling> params(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      RowSampling& p = params[size_t(r)];
      p.seed = 1234;
      p.counter = uint64_t(r);
      if (r < 2) {
        p.temperature = 0.0f;  // greedy ignores top_k / top_p
        p.top_k = 3;
        p.top_p = 0.5f;
      } else if (r < 4) {
        p.temperature = 1.5f;
        p.top_k = 1;
      } else {
        p.temperature = 1.0f;
        p.top_p = 1e-6f;
      }
    }
    const Sampled s = run_sampling<T>(logits, ld, vocab, params);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(s.tokens[size_t(r)], first_argmax(logits.data() + r * ld, vocab)) << "row " << r;
    }
    EXPECT_TRUE(logprobs_are_raw(logits, ld, vocab, s));
  }
}

TYPED_TEST(PointwiseSampling, TopKDrawsStayAmongTheKLargest) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  struct Case {
    int64_t vocab, rows, k;
  };
  for (const auto [vocab, rows, k] : {Case{512, 2000, 5}, Case{151936, 48, 40}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab << " k " << k);
    const int64_t ld = vocab;
    // A narrow spread keeps many tokens near the cut, so a wrong cut would show.
    auto logits = repeated_logits<T>(rows, ld, vocab, uint32_t(k), -1.0f, 1.0f);
    const auto order = order_desc(logits.data(), vocab);
    const std::set<int64_t> top(order.begin(), order.begin() + k);
    std::vector<RowSampling> params(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      params[size_t(r)] = RowSampling{.temperature = 2.0f,
                                      .top_k = int32_t(k),
                                      .top_p = 1.0f,
                                      .seed = 42,
                                      .counter = uint64_t(r)};
    }
    const Sampled s = run_sampling<T>(logits, ld, vocab, params);
    std::set<int32_t> seen;
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t t = s.tokens[size_t(r)];
      EXPECT_TRUE(top.count(t) == 1) << "row " << r << ": token " << t << " (logit "
                                     << (t >= 0 && t < vocab ? logits[size_t(t)] : NAN)
                                     << ") is not among the " << k << " largest";
      seen.insert(t);
    }
    EXPECT_GE(seen.size(), 2u) << "every draw gave one token";
    EXPECT_TRUE(logprobs_are_raw(logits, ld, vocab, s));
  }
}

// The tempered, truncated distribution a row samples from (host, double).
std::vector<double> target_distribution(const float* x, int64_t vocab, const RowSampling& p) {
  const auto order = order_desc(x, vocab);
  int64_t n = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
  const double mx = x[order[0]];
  std::vector<double> w(static_cast<size_t>(n));
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i)
    total += w[size_t(i)] = std::exp((x[order[size_t(i)]] - mx) / p.temperature);
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    int64_t keep = 0;
    while (keep < n) {
      mass += w[size_t(keep++)];
      if (mass >= double(p.top_p) * total) break;
    }
    n = keep;
    total = mass;
  }
  std::vector<double> prob(size_t(vocab), 0.0);
  for (int64_t i = 0; i < n; ++i) prob[size_t(order[size_t(i)])] = w[size_t(i)] / total;
  return prob;
}

TYPED_TEST(PointwiseSampling, EmpiricalDistributionMatchesSoftmaxWithin4StandardErrors) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 16, rows = 20000;
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t j = 0; j < vocab; ++j) row[size_t(j)] = 0.37f * float((j * 7) % vocab) - 3.0f;
  row = quantize<T>(row);
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) logits.insert(logits.end(), row.begin(), row.end());
  const RowSampling configs[] = {
      {.temperature = 1.0f},
      {.temperature = 0.5f},
      {.temperature = 1.0f, .top_k = 6},
      {.temperature = 0.8f, .top_p = 0.7f},
      {.temperature = 1.3f, .top_k = 10, .top_p = 0.9f},
  };
  for (const RowSampling& config : configs) {
    SCOPED_TRACE(testing::Message() << "temperature " << config.temperature << " top_k "
                                    << config.top_k << " top_p " << config.top_p);
    // The nucleus must not sit on a rounding edge (the kernel sums fixed-point weights).
    const auto prob = target_distribution(row.data(), vocab, config);
    std::vector<RowSampling> params(size_t(rows), config);
    for (int64_t r = 0; r < rows; ++r) {
      params[size_t(r)].seed = 7;
      params[size_t(r)].counter = uint64_t(r);
    }
    const Sampled s = run_sampling<T>(logits, vocab, vocab, params);
    std::vector<int64_t> counts(size_t(vocab), 0);
    for (const int32_t t : s.tokens) {
      ASSERT_TRUE(t >= 0 && t < vocab) << "token " << t;
      ++counts[size_t(t)];
    }
    for (int64_t j = 0; j < vocab; ++j) {
      const double p = prob[size_t(j)];
      const double expected = double(rows) * p;
      const double se = std::sqrt(double(rows) * p * (1.0 - p));
      EXPECT_LE(std::abs(double(counts[size_t(j)]) - expected), 4.0 * se)
          << "token " << j << ": " << counts[size_t(j)] << " draws, expected " << expected << " (p "
          << p << ", standard error " << se << ")";
    }
    EXPECT_TRUE(logprobs_are_raw(logits, vocab, vocab, s));
  }
}

TYPED_TEST(PointwiseSampling, TopPDrawsStayInTheNucleus) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 1000, rows = 1000;
  auto logits = repeated_logits<T>(rows, vocab, vocab, 5u, -3.0f, 3.0f);
  const auto order = order_desc(logits.data(), vocab);
  // top_p halfway between the masses of the 7- and 8-token prefixes: the nucleus is 8 tokens.
  std::vector<double> cum;
  double total = 0.0;
  const double mx = logits[size_t(order[0])];
  for (int64_t i = 0; i < vocab; ++i)
    total += std::exp(double(logits[size_t(order[size_t(i)])]) - mx);
  double acc = 0.0;
  for (int64_t i = 0; i < 8; ++i)
    cum.push_back(acc += std::exp(double(logits[size_t(order[size_t(i)])]) - mx));
  const float top_p = float((cum[6] + cum[7]) / 2.0 / total);
  const std::set<int64_t> nucleus(order.begin(), order.begin() + 8);
  std::vector<RowSampling> params(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    params[size_t(r)] =
        RowSampling{.temperature = 1.0f, .top_p = top_p, .seed = 99, .counter = uint64_t(r)};
  }
  const Sampled s = run_sampling<T>(logits, vocab, vocab, params);
  std::set<int32_t> seen;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(nucleus.count(s.tokens[size_t(r)]) == 1)
        << "row " << r << ": token " << s.tokens[size_t(r)] << " outside the top_p " << top_p
        << " nucleus of 8 tokens";
    seen.insert(s.tokens[size_t(r)]);
  }
  EXPECT_GE(seen.size(), 3u);
  EXPECT_TRUE(logprobs_are_raw(logits, vocab, vocab, s));
}

// A cut inside a run of equal logits keeps the lowest indices: a flat row with top_k = 3 draws
// only tokens 0..2, and a top_p of 4.5 tokens' mass draws only 0..4 (vocab 777 and 151 936).
TYPED_TEST(PointwiseSampling, TiesAtACutAreTakenLowestIndexFirst) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  for (const int64_t vocab : {int64_t{777}, int64_t{151936}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const int64_t rows = 64;
    const std::vector<float> logits(size_t(rows * vocab), 0.25f);
    for (const bool by_k : {true, false}) {
      const int32_t allowed = by_k ? 3 : 5;
      std::vector<RowSampling> params(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        RowSampling& p = params[size_t(r)];
        p.seed = 5;
        p.counter = uint64_t(r);
        if (by_k) p.top_k = 3;
        else p.top_p = float(4.5 / double(vocab));
      }
      const Sampled s = run_sampling<T>(logits, vocab, vocab, params);
      std::set<int32_t> seen;
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t t = s.tokens[size_t(r)];
        EXPECT_TRUE(t >= 0 && t < allowed)
            << "row " << r << (by_k ? " top_k 3" : " top_p of 4.5 tokens") << ": token " << t
            << ", want one of the " << allowed << " lowest indices";
        seen.insert(t);
      }
      EXPECT_GE(seen.size(), 2u) << (by_k ? "top_k" : "top_p") << ": every draw gave one token";
      EXPECT_TRUE(logprobs_are_raw(logits, vocab, vocab, s));
    }
  }
}

TYPED_TEST(PointwiseSampling, DrawDependsOnlyOnSeedAndCounterNotOnTheBatch) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 777, ld = 780, rows = 6;
  const auto logits = quantize<T>(random_floats(size_t(rows * ld), 31u, -4.0f, 4.0f));
  const std::vector<RowSampling> params = {
      {.temperature = 1.0f, .seed = 1, .counter = 0},
      {.temperature = 0.7f, .top_k = 20, .seed = 1, .counter = 1},
      {.temperature = 0.0f, .seed = 2, .counter = 5},
      {.temperature = 1.2f, .top_p = 0.8f, .seed = 3, .counter = 17},
      {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .seed = ~uint64_t{0}, .counter = 1u << 30},
      {.temperature = 1.0f, .seed = 1, .counter = 0},  // same as row 0 on other logits
  };
  const Sampled batch = run_sampling<T>(logits, ld, vocab, params);
  EXPECT_TRUE(logprobs_are_raw(logits, ld, vocab, batch));
  // Each row alone, and the batch reversed, give bitwise the same token and logprob.
  std::vector<float> reversed_logits;
  std::vector<RowSampling> reversed_params;
  for (int64_t r = rows; r-- > 0;) {
    reversed_logits.insert(reversed_logits.end(), logits.begin() + r * ld,
                           logits.begin() + (r + 1) * ld);
    reversed_params.push_back(params[size_t(r)]);
  }
  const Sampled rev = run_sampling<T>(reversed_logits, ld, vocab, reversed_params);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> one(logits.begin() + r * ld, logits.begin() + (r + 1) * ld);
    const Sampled alone = run_sampling<T>(one, ld, vocab, {params[size_t(r)]});
    EXPECT_EQ(alone.tokens[0], batch.tokens[size_t(r)]) << "row " << r << " alone";
    EXPECT_EQ(alone.logprobs[0], batch.logprobs[size_t(r)]) << "row " << r << " alone";
    EXPECT_EQ(rev.tokens[size_t(rows - 1 - r)], batch.tokens[size_t(r)])
        << "row " << r << " reversed";
  }
  // Different seeds on the same flat-ish row do not all agree.
  const int64_t n = 64;
  const auto flat = repeated_logits<T>(n, vocab, vocab, 8u, -0.5f, 0.5f);
  std::vector<RowSampling> seeds(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) seeds[size_t(r)] = RowSampling{.seed = uint64_t(r) * 7919};
  const Sampled by_seed = run_sampling<T>(flat, vocab, vocab, seeds);
  EXPECT_GE(std::set<int32_t>(by_seed.tokens.begin(), by_seed.tokens.end()).size(), 10u);
}

// Rows of four kinds (r % 4): a language-model-like exponential tail (few large logits), a narrow
// uniform spread (many tokens near every cut), a flat row (every cut splits a tie) and a wide
// uniform spread with two equal maxima; each kind under every config of `configs`.
template <class T>
std::vector<float> mixed_rows(int64_t rows, int64_t ld, int64_t vocab) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row;
    const uint32_t seed = 1000u + uint32_t(r);
    switch (r % 4) {
      case 0:
        row = random_floats(size_t(ld), seed, 0.0f, 1.0f);
        for (float& v : row) v = float(-8.0 * std::log(1.0 - double(v) * 0.999999));
        break;
      case 1: row = random_floats(size_t(ld), seed, -1.0f, 1.0f); break;
      case 2: row.assign(size_t(ld), 0.25f); break;
      default:
        row = random_floats(size_t(ld), seed, -6.0f, 6.0f);
        if (vocab > 2) row[0] = row[size_t(vocab - 1)] = 7.0f;
    }
    row = quantize<T>(row);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// The candidate pre-filter is exact: sample_tokens and sample_tokens_full_row give bitwise the
// same token and logprob per row. The configs and row kinds send rows both ways inside
// sample_tokens too: few candidates (exponential tail, top-k), many but under the limit (top-k
// of narrow rows, small vocabularies), and over it (flat or narrow rows without top-k, top_k
// 1000 at vocab 151 936), plus vocabularies that end in a 1-element chunk.
TYPED_TEST(PointwiseSampling, PrefilteredAndFullRowPathsDrawTheSameToken) {
  using T = TypeParam;
  SPINDLE_REQUIRE_CUDA_DEVICE();
  const RowSampling configs[] = {
      {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f},
      {.temperature = 1.0f},
      {.temperature = 0.7f, .top_p = 0.5f},
      {.temperature = 1.5f, .top_k = 300},
      {.temperature = 1.0f, .top_k = 3},
      {.temperature = 2.0f, .top_k = 1000, .top_p = 0.95f},
      {.temperature = 0.0f},
      {.temperature = 1.0f, .top_p = 1e-6f},
      {.temperature = 0.05f, .top_k = 20},
      {.temperature = 1.2f, .top_k = 7, .top_p = 0.3f},
  };
  const int64_t n_configs = int64_t(std::size(configs));
  for (const int64_t vocab :
       {int64_t{1}, int64_t{777}, int64_t{2049}, int64_t{4097}, int64_t{151936}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const int64_t ld = vocab + 3, rows = 4 * n_configs;
    const auto logits = mixed_rows<T>(rows, ld, vocab);
    for (const uint64_t seed : {uint64_t{3}, uint64_t{77}}) {
      std::vector<RowSampling> params(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        params[size_t(r)] = configs[(r / 4) % n_configs];
        params[size_t(r)].seed = seed + uint64_t(r % 4);
        params[size_t(r)].counter = uint64_t(r) * 13;
      }
      const Sampled fast = run_sampling<T>(logits, ld, vocab, params);
      const Sampled full = run_sampling<T>(logits, ld, vocab, params, /*full_row=*/true);
      for (int64_t r = 0; r < rows; ++r) {
        const RowSampling& p = params[size_t(r)];
        EXPECT_EQ(fast.tokens[size_t(r)], full.tokens[size_t(r)])
            << "row " << r << " (kind " << r % 4 << ", temperature " << p.temperature
            << ", top_k " << p.top_k << ", top_p " << p.top_p << ", seed " << seed << ")";
        EXPECT_EQ(fast.logprobs[size_t(r)], full.logprobs[size_t(r)]) << "row " << r;
      }
      EXPECT_TRUE(logprobs_are_raw(logits, ld, vocab, fast));
    }
  }
}

TEST(PointwiseSamplingContracts, ViolationsThrowInvalidArgument) {
  float* f = reinterpret_cast<float*>(uintptr_t{256});
  const RowSampling* p = reinterpret_cast<const RowSampling*>(uintptr_t{256});
  int32_t* t = reinterpret_cast<int32_t*>(uintptr_t{256});
  EXPECT_THROW(sample_tokens<float>(f, 8, 1, 0, p, t, f, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(sample_tokens<float>(f, 7, 1, 8, p, t, f, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(sample_tokens<float>(f, 8, -1, 8, p, t, f, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(sample_tokens<bf16>(nullptr, 8, 1, 8, p, t, f, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(sample_tokens<float>(f, 8, 1, 8, nullptr, t, f, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(sample_tokens<float>(f, 8, 1, 8, p, nullptr, f, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(sample_tokens<float>(f, 8, 1, 8, p, t, f, nullptr, nullptr),  // no scratch
               std::invalid_argument);
  EXPECT_THROW(sample_tokens_full_row<float>(f, 7, 1, 8, p, t, f, f, nullptr),
               std::invalid_argument);
  EXPECT_NO_THROW(
      sample_tokens<float>(nullptr, 8, 0, 8, nullptr, nullptr, nullptr, nullptr, nullptr));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
