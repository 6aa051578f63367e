// attention_backward at every vector level against a naive double backward of causal GQA
// attention, which central finite differences of a double forward check in turn. Ragged
// batches: sequences sit in reverse row order with unused rows between them.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernel_test_util.h"
#include "spindle/kernels/attention.h"

namespace spindle::kernels::test {
namespace {

constexpr float kUntouched = 777.0f;

struct Problem {
  int64_t n_heads, n_kv, hd, T = 0;
  std::vector<DenseSeq> seqs;
  std::vector<double> q, k, v, d_out;  // the float inputs, widened
  double scale;

  Problem(int64_t n_heads_, int64_t n_kv_, int64_t hd_, const std::vector<int64_t>& lens,
          uint32_t seed)
      : n_heads(n_heads_), n_kv(n_kv_), hd(hd_), scale(1.0 / std::sqrt(double(hd_))) {
    for (size_t i = lens.size(); i-- > 0;) {
      seqs.insert(seqs.begin(), DenseSeq{T, lens[i]});
      T += lens[i] + 1;  // one row in no sequence after each
    }
    const auto widen = [](const std::vector<float>& f) {
      return std::vector<double>(f.begin(), f.end());
    };
    q = widen(random_floats(size_t(T * n_heads * hd), seed, -2.0f, 2.0f));
    k = widen(random_floats(size_t(T * n_kv * hd), seed + 1, -2.0f, 2.0f));
    v = widen(random_floats(size_t(T * n_kv * hd), seed + 2));
    d_out = widen(random_floats(size_t(T * n_heads * hd), seed + 3));
    // The kernel sees floats: keep scale a float too.
    scale = double(float(scale));
  }

  size_t qi(int64_t row, int64_t h, int64_t c) const {
    return size_t((row * n_heads + h) * hd + c);
  }
  size_t kvi(int64_t row, int64_t g, int64_t c) const { return size_t((row * n_kv + g) * hd + c); }

  // P of query row t (keys 0..t) of head h in one sequence.
  std::vector<double> probs(const DenseSeq& s, int64_t t, int64_t h) const {
    const int64_t g = h / (n_heads / n_kv);
    std::vector<double> p(size_t(t + 1));
    for (int64_t j = 0; j <= t; ++j) {
      double d = 0.0;
      for (int64_t c = 0; c < hd; ++c)
        d += q[qi(s.row_begin + t, h, c)] * k[kvi(s.row_begin + j, g, c)];
      p[size_t(j)] = scale * d;
    }
    const double m = *std::max_element(p.begin(), p.end());
    double sum = 0.0;
    for (double& x : p) sum += (x = std::exp(x - m));
    for (double& x : p) x /= sum;
    return p;
  }

  // Σ out·d_out of the double forward.
  double functional() const {
    double f = 0.0;
    for (const auto& s : seqs)
      for (int64_t t = 0; t < s.n; ++t)
        for (int64_t h = 0; h < n_heads; ++h) {
          const int64_t g = h / (n_heads / n_kv);
          const auto p = probs(s, t, h);
          for (int64_t c = 0; c < hd; ++c) {
            double o = 0.0;
            for (int64_t j = 0; j <= t; ++j) o += p[size_t(j)] * v[kvi(s.row_begin + j, g, c)];
            f += o * d_out[qi(s.row_begin + t, h, c)];
          }
        }
    return f;
  }

  struct Grads {
    std::vector<double> dq, dk, dv;
  };

  // Naive double backward; rows outside every sequence stay 0.
  Grads backward() const {
    Grads gr{std::vector<double>(q.size()), std::vector<double>(k.size()),
             std::vector<double>(v.size())};
    for (const auto& s : seqs)
      for (int64_t t = 0; t < s.n; ++t)
        for (int64_t h = 0; h < n_heads; ++h) {
          const int64_t g = h / (n_heads / n_kv);
          const int64_t row = s.row_begin + t;
          const auto p = probs(s, t, h);
          std::vector<double> dp(p.size());
          double row_dot = 0.0;
          for (int64_t j = 0; j <= t; ++j) {
            for (int64_t c = 0; c < hd; ++c)
              dp[size_t(j)] += d_out[qi(row, h, c)] * v[kvi(s.row_begin + j, g, c)];
            row_dot += dp[size_t(j)] * p[size_t(j)];
          }
          for (int64_t j = 0; j <= t; ++j) {
            const double ds = p[size_t(j)] * (dp[size_t(j)] - row_dot);
            for (int64_t c = 0; c < hd; ++c) {
              gr.dq[qi(row, h, c)] += scale * ds * k[kvi(s.row_begin + j, g, c)];
              gr.dk[kvi(s.row_begin + j, g, c)] += scale * ds * q[qi(row, h, c)];
              gr.dv[kvi(s.row_begin + j, g, c)] += p[size_t(j)] * d_out[qi(row, h, c)];
            }
          }
        }
    return gr;
  }

  struct Result {
    std::vector<float> dq, dk, dv;
  };

  Result run_kernel() const {
    const auto narrow = [](const std::vector<double>& d) {
      return std::vector<float>(d.begin(), d.end());
    };
    const auto qf = narrow(q), kf = narrow(k), vf = narrow(v), dof = narrow(d_out);
    Result r{std::vector<float>(q.size(), kUntouched), std::vector<float>(k.size(), kUntouched),
             std::vector<float>(v.size(), kUntouched)};
    attention_backward(qf.data(), kf.data(), vf.data(), dof.data(), r.dq.data(), r.dk.data(),
                       r.dv.data(), n_heads, n_kv, hd, seqs, float(scale));
    return r;
  }

  bool in_sequence(int64_t row) const {
    for (const auto& s : seqs)
      if (row >= s.row_begin && row < s.row_begin + s.n) return true;
    return false;
  }

  // Kernel vs want on sequence rows (tolerance abs + rel·|want|); untouched elsewhere.
  void expect_matches(const Result& got, const Grads& want, double abs_tol, double rel_tol) const {
    const auto compare = [&](const std::vector<float>& g, const std::vector<double>& w,
                             int64_t width, const char* name) {
      for (int64_t row = 0; row < T; ++row)
        for (int64_t c = 0; c < width; ++c) {
          const size_t i = size_t(row * width + c);
          if (!in_sequence(row)) {
            ASSERT_EQ(g[i], kUntouched) << name << " row " << row << " outside every sequence";
          } else {
            ASSERT_NEAR(g[i], w[i], abs_tol + rel_tol * std::abs(w[i]))
                << name << " row " << row << " col " << c << " (n_heads=" << n_heads
                << " n_kv=" << n_kv << " hd=" << hd << ")";
          }
        }
    };
    compare(got.dq, want.dq, n_heads * hd, "dq");
    compare(got.dk, want.dk, n_kv * hd, "dk");
    compare(got.dv, want.dv, n_kv * hd, "dv");
  }
};

// Central differences of the double forward against the naive double backward.
TEST(AttentionBackwardReference, MatchesFiniteDifferences) {
  Problem p(4, 2, 3, {4, 1, 3}, 1);
  const auto want = p.backward();
  const auto check = [&](std::vector<double>& x, const std::vector<double>& grad,
                         const char* name) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double keep = x[i], step = 1e-5;
      x[i] = keep + step;
      const double up = p.functional();
      x[i] = keep - step;
      const double down = p.functional();
      x[i] = keep;
      ASSERT_NEAR(grad[i], (up - down) / (2 * step), 1e-7) << name << " " << i;
    }
  };
  check(p.q, want.dq, "dq");
  check(p.k, want.dk, "dk");
  check(p.v, want.dv, "dv");
}

class AttentionBackward : public SimdLevelTest {
 protected:
  static void check(int64_t n_heads, int64_t n_kv, int64_t hd, const std::vector<int64_t>& lens,
                    uint32_t seed, bool finite_differences = false) {
    Problem p(n_heads, n_kv, hd, lens, seed);
    const auto got = p.run_kernel();
    const auto want = p.backward();
    p.expect_matches(got, want, 2e-5, 2e-4);
    if (!finite_differences) return;
    // Also straight against finite differences of the double forward, on a few entries of each.
    const auto fd = [&](std::vector<double>& x, size_t i) {
      const double keep = x[i], step = 1e-5;
      x[i] = keep + step;
      const double up = p.functional();
      x[i] = keep - step;
      const double down = p.functional();
      x[i] = keep;
      return (up - down) / (2 * step);
    };
    for (size_t i = 0; i < p.q.size(); i += 7)
      if (got.dq[i] != kUntouched) ASSERT_NEAR(got.dq[i], fd(p.q, i), 5e-5) << "dq " << i;
    for (size_t i = 0; i < p.k.size(); i += 5) {
      if (got.dk[i] != kUntouched) ASSERT_NEAR(got.dk[i], fd(p.k, i), 5e-5) << "dk " << i;
      if (got.dv[i] != kUntouched) ASSERT_NEAR(got.dv[i], fd(p.v, i), 5e-5) << "dv " << i;
    }
  }
};

TEST_P(AttentionBackward, RaggedGqaBatch) {
  for (int64_t hd : {8, 20}) check(6, 2, hd, {5, 9, 1}, uint32_t(hd), /*finite_differences=*/true);
  check(6, 2, 20, {40, 0, 9, 33}, 3);  // several query blocks, an empty sequence
}

TEST_P(AttentionBackward, MultiHeadAndMultiQuery) {
  for (int64_t hd : {8, 20}) {
    check(4, 4, hd, {5, 9, 1}, uint32_t(hd) + 10, /*finite_differences=*/true);
    check(6, 1, hd, {5, 9, 1}, uint32_t(hd) + 20, /*finite_differences=*/true);
  }
}

TEST_P(AttentionBackward, LargeBatchRunsParallel) {
  check(8, 4, 128, {100, 70, 33}, 31);
}

SPINDLE_INSTANTIATE_SIMD_LEVELS(AttentionBackward);

TEST(AttentionBackwardContracts, ViolationsThrowAndWriteNothing) {
  // T = 4 rows; n_heads up to 4, n_kv 2, head_dim 2.
  std::vector<float> in(64, 0.5f), dq(64, kUntouched), dk(64, kUntouched), dv(64, kUntouched);
  const auto run = [&](int64_t n_heads, int64_t n_kv, int64_t hd, std::vector<DenseSeq> seqs,
                       const float* q = nullptr, float* out = nullptr) {
    attention_backward(q != nullptr ? q : in.data(), in.data(), in.data(), in.data(),
                       out != nullptr ? out : dq.data(), dk.data(), dv.data(), n_heads, n_kv, hd,
                       seqs, 0.5f);
  };
  EXPECT_THROW(run(3, 2, 2, {{0, 2}}), std::invalid_argument);  // 3 % 2 != 0
  EXPECT_THROW(run(0, 2, 2, {{0, 2}}), std::invalid_argument);
  EXPECT_THROW(run(4, 0, 2, {{0, 2}}), std::invalid_argument);
  EXPECT_THROW(run(4, 2, 0, {{0, 2}}), std::invalid_argument);
  EXPECT_THROW(run(4, 2, 2, {{0, 2}, {-1, 1}}), std::invalid_argument);
  EXPECT_THROW(run(4, 2, 2, {{0, 2}, {2, -1}}), std::invalid_argument);
  EXPECT_THROW(run(4, 2, 2, {{2, 2}, {0, 3}}), std::invalid_argument);  // rows 2 shared
  float* no_out = nullptr;
  EXPECT_THROW(attention_backward(in.data(), in.data(), in.data(), in.data(), dq.data(), dk.data(),
                                  no_out, 4, 2, 2, std::vector<DenseSeq>{{0, 2}}, 0.5f),
               std::invalid_argument);
  EXPECT_THROW(attention_backward(in.data(), nullptr, in.data(), in.data(), dq.data(), dk.data(),
                                  dv.data(), 4, 2, 2, std::vector<DenseSeq>{{0, 2}}, 0.5f),
               std::invalid_argument);
  for (const auto* g : {&dq, &dk, &dv})
    EXPECT_EQ(std::count(g->begin(), g->end(), kUntouched), int64_t(g->size()));
  // Nothing to do: null data is fine; adjacent sequences in any order are fine.
  EXPECT_NO_THROW(attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     4, 2, 2, std::vector<DenseSeq>{{0, 0}, {3, 0}}, 0.5f));
  EXPECT_NO_THROW(run(4, 2, 2, {{2, 2}, {0, 2}}));
}

}  // namespace
}  // namespace spindle::kernels::test
