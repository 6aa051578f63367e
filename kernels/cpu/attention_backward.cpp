#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {
namespace {

// Query rows whose P and dS rows are kept at once: dK/dV rows then take one axpy_rows over the
// block (accumulators stay in registers for kQueryBlock rank-1 updates) instead of one axpy per
// query row.
constexpr int64_t kQueryBlock = 32;

// One job: every query head of KV head `kv_head` over one sequence. The job owns its sequence's
// dk/dv rows in that KV head's columns and its dq rows in the group's head columns, so jobs never
// write the same float.
struct GroupJob {
  int64_t row_begin;
  int64_t n;
  int64_t kv_head;
};

struct Shape {
  int64_t hd;
  int64_t group;  // query heads per KV head
  int64_t ld_q;   // n_heads · hd: q, d_out, dq
  int64_t ld_kv;  // n_kv_heads · hd: k, v, dk, dv
  float scale;
};

struct Tensors {
  const float* q;
  const float* k;
  const float* v;
  const float* d_out;
  float* dq;
  float* dk;
  float* dv;
};

// Floats of scratch one job needs: P and dS rows of a query block, and their gathered columns.
int64_t job_scratch(int64_t max_n) {
  return 2 * kQueryBlock * max_n + 2 * kQueryBlock;
}

void zero_rows(float* p, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    std::memset(p + r * ld, 0, sizeof(float) * static_cast<size_t>(cols));
}

// For query row t (keys 0..t) of head h: P = softmax(scale·q·kᵀ) as the forward computes it
// (float scores, max-subtracted exp, divided by the float sum), dP = dO·vᵀ,
// dS = scale·P∘(dP − Σ dP∘P), dq = dS·K. Per query block, then per key j:
// dv_j += Σ_t P[t, j]·dO_t and dk_j += Σ_t dS[t, j]·q_t over the block's rows t >= j.
void backward_group(const GroupJob& job, const Shape& sh, const Tensors& ts, const simd::Ops& ops,
                    float* scratch) {
  const int64_t hd = sh.hd;
  const int64_t n = job.n;
  const int64_t kv_col = job.kv_head * hd;
  const float* K = ts.k + job.row_begin * sh.ld_kv + kv_col;
  const float* V = ts.v + job.row_begin * sh.ld_kv + kv_col;
  float* dK = ts.dk + job.row_begin * sh.ld_kv + kv_col;
  float* dV = ts.dv + job.row_begin * sh.ld_kv + kv_col;
  zero_rows(dK, sh.ld_kv, n, hd);
  zero_rows(dV, sh.ld_kv, n, hd);
  float* P = scratch;               // [kQueryBlock, n]
  float* dS = P + kQueryBlock * n;  // [kQueryBlock, n]
  float* col_p = dS + kQueryBlock * n;
  float* col_ds = col_p + kQueryBlock;

  for (int64_t t0 = 0; t0 < n; t0 += kQueryBlock) {
    const int64_t nb = std::min(kQueryBlock, n - t0);
    for (int64_t hh = 0; hh < sh.group; ++hh) {
      const int64_t q_col = (job.kv_head * sh.group + hh) * hd;
      const int64_t row0 = job.row_begin + t0;
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t ctx = t0 + i + 1;
        const int64_t at = (row0 + i) * sh.ld_q + q_col;
        float* p = P + i * n;
        float* ds = dS + i * n;
        ops.gemv(K, sh.ld_kv, ctx, hd, ts.q + at, sh.scale, 0.0f, p);
        const float m = ops.max(p, ctx);
        const float sum = ops.exp_sum(p, m, p, ctx);
        for (int64_t j = 0; j < ctx; ++j) p[j] /= sum;
        ops.gemv(V, sh.ld_kv, ctx, hd, ts.d_out + at, 1.0f, 0.0f, ds);
        const float row_dot = ops.dot(ds, p, ctx);
        for (int64_t j = 0; j < ctx; ++j) ds[j] = sh.scale * (p[j] * (ds[j] - row_dot));
        float* dq = ts.dq + at;
        std::memset(dq, 0, sizeof(float) * static_cast<size_t>(hd));
        ops.axpy_rows(ds, K, sh.ld_kv, ctx, hd, dq);
      }
      // Key j is seen by the block's rows i >= j − t0.
      for (int64_t j = 0; j < t0 + nb; ++j) {
        const int64_t i0 = std::max<int64_t>(0, j - t0);
        for (int64_t i = i0; i < nb; ++i) {
          col_p[i] = P[i * n + j];
          col_ds[i] = dS[i * n + j];
        }
        const int64_t at = (row0 + i0) * sh.ld_q + q_col;
        ops.axpy_rows(col_p + i0, ts.d_out + at, sh.ld_q, nb - i0, hd, dV + j * sh.ld_kv);
        ops.axpy_rows(col_ds + i0, ts.q + at, sh.ld_q, nb - i0, hd, dK + j * sh.ld_kv);
      }
    }
  }
}

}  // namespace

void attention_backward(const float* q, const float* k, const float* v, const float* d_out,
                        float* dq, float* dk, float* dv, int64_t n_heads, int64_t n_kv_heads,
                        int64_t head_dim, std::span<const DenseSeq> seqs, float scale) {
  constexpr const char* kKernel = "attention_backward";
  SPINDLE_KERNEL_REQUIRE(n_kv_heads > 0 && head_dim > 0, kKernel,
                         "n_kv_heads > 0 and head_dim > 0");
  SPINDLE_KERNEL_REQUIRE(n_heads > 0 && n_heads % n_kv_heads == 0, kKernel,
                         "n_heads must be a positive multiple of n_kv_heads");
  std::vector<std::pair<int64_t, int64_t>> spans;  // [begin, end) of non-empty sequences
  int64_t max_n = 0;
  int64_t work = 0;
  for (const DenseSeq& seq : seqs) {
    SPINDLE_KERNEL_REQUIRE(seq.row_begin >= 0 && seq.n >= 0, kKernel,
                           "row_begin and n must be >= 0");
    if (seq.n == 0) continue;
    spans.emplace_back(seq.row_begin, seq.row_begin + seq.n);
    max_n = std::max(max_n, seq.n);
    // Five products of n(n+1)/2 · head_dim multiply-adds per query head.
    work += 5 * (seq.n * (seq.n + 1) / 2) * head_dim * n_heads;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    SPINDLE_KERNEL_REQUIRE(spans[i].first >= spans[i - 1].second, kKernel,
                           "sequences must not share rows");
  if (spans.empty()) return;
  SPINDLE_KERNEL_REQUIRE(q != nullptr && k != nullptr && v != nullptr && d_out != nullptr &&
                             dq != nullptr && dk != nullptr && dv != nullptr,
                         kKernel, "q, k, v, d_out, dq, dk and dv must be non-null");

  // Longest sequences first: jobs cost ~n², so the dynamic schedule ends evenly.
  std::vector<GroupJob> jobs;
  for (const DenseSeq& seq : seqs)
    if (seq.n > 0)
      for (int64_t g = 0; g < n_kv_heads; ++g) jobs.push_back({seq.row_begin, seq.n, g});
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const GroupJob& a, const GroupJob& b) { return a.n > b.n; });

  const Shape sh{head_dim, n_heads / n_kv_heads, n_heads * head_dim, n_kv_heads * head_dim, scale};
  const Tensors ts{q, k, v, d_out, dq, dk, dv};
  const bool parallel = cpu::worth_parallel(work);
  const int64_t n_threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
  const int64_t stride = job_scratch(max_n);
  std::vector<float> scratch(static_cast<size_t>(n_threads * stride));
  const simd::Ops& ops = simd::ops();
  cpu::parallel_for(
      static_cast<int64_t>(jobs.size()), parallel, cpu::Schedule::dynamic, [&](int64_t i) {
        const int64_t thread = parallel ? omp_get_thread_num() : 0;
        backward_group(jobs[static_cast<size_t>(i)], sh, ts, ops, scratch.data() + thread * stride);
      });
}

}  // namespace spindle::kernels
