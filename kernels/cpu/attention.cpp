#include "spindle/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "simd.h"
#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels {
namespace {

void check_cache(const PagedKv& cache, const char* kernel) {
  SPINDLE_KERNEL_REQUIRE(cache.k != nullptr && cache.v != nullptr, kernel,
                         "cache.k and cache.v must be non-null");
  SPINDLE_KERNEL_REQUIRE(cache.n_blocks > 0 && cache.block_size > 0, kernel,
                         "cache.n_blocks > 0 and cache.block_size > 0");
  SPINDLE_KERNEL_REQUIRE(cache.n_kv_heads > 0 && cache.head_dim > 0, kernel,
                         "cache.n_kv_heads > 0 and cache.head_dim > 0");
}

// One job of attention_paged: n_q consecutive query heads of one new token, all reading KV
// head kv_head. Walking the blocks once for all of them reads each K/V block from memory once
// and from L1 for the other heads. Queries are copied first, so out may alias q.
struct HeadJob {
  const float* q;  // first head's query; head i at q + i·head_dim
  float* out;      // first head's output, same layout
  const int32_t* block_table;
  int64_t ctx;  // keys [0, ctx)
  int64_t kv_head;
  int64_t n_q;
};

// Floats of scratch one job needs: per head ctx scores, head_dim query, head_dim accumulators.
int64_t job_scratch(int64_t max_ctx, int64_t head_dim, int64_t n_q) {
  return n_q * ((max_ctx + 2 * head_dim + 15) / 16 * 16);
}

// Two passes like llama2.c: scores = scale·q·k, then max-subtracted softmax with the float sum
// divided out, then Σ p_j·v_j. Keys of one block are contiguous rows of stride n_kv·head_dim.
void attend(const HeadJob& job, const PagedKv& cache, float scale, const simd::Ops& ops,
            int64_t max_ctx, float* scratch) {
  const int64_t hd = cache.head_dim;
  const int64_t bs = cache.block_size;
  const int64_t width = cache.n_kv_heads * hd;
  const int64_t per_head = job_scratch(max_ctx, hd, 1);
  const auto scores = [&](int64_t i) { return scratch + i * per_head; };
  const auto query = [&](int64_t i) { return scores(i) + max_ctx; };
  const auto acc = [&](int64_t i) { return query(i) + hd; };
  for (int64_t i = 0; i < job.n_q; ++i)
    std::memcpy(query(i), job.q + i * hd, sizeof(float) * static_cast<size_t>(hd));
  const int64_t n_blk = (job.ctx + bs - 1) / bs;
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t j0 = b * bs;
    const float* k = cache.k + int64_t{job.block_table[b]} * bs * width + job.kv_head * hd;
    for (int64_t i = 0; i < job.n_q; ++i)
      ops.gemv(k, width, std::min(bs, job.ctx - j0), hd, query(i), scale, 0.0f, scores(i) + j0);
  }
  for (int64_t i = 0; i < job.n_q; ++i) {
    float* s = scores(i);
    const float m = ops.max(s, job.ctx);
    const float sum = ops.exp_sum(s, m, s, job.ctx);
    for (int64_t j = 0; j < job.ctx; ++j) s[j] /= sum;
    std::fill(acc(i), acc(i) + hd, 0.0f);
  }
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t j0 = b * bs;
    const float* v = cache.v + int64_t{job.block_table[b]} * bs * width + job.kv_head * hd;
    for (int64_t i = 0; i < job.n_q; ++i)
      ops.axpy_rows(scores(i) + j0, v, width, std::min(bs, job.ctx - j0), hd, acc(i));
  }
  for (int64_t i = 0; i < job.n_q; ++i)
    std::memcpy(job.out + i * hd, acc(i), sizeof(float) * static_cast<size_t>(hd));
}

}  // namespace

void kv_cache_write(const PagedKv& cache, const float* k_new, const float* v_new, int64_t ld,
                    int64_t T, const int64_t* slot) {
  check_cache(cache, "kv_cache_write");
  const int64_t width = cache.n_kv_heads * cache.head_dim;
  SPINDLE_KERNEL_REQUIRE(T >= 0, "kv_cache_write", "T >= 0");
  SPINDLE_KERNEL_REQUIRE(ld >= width, "kv_cache_write", "ld >= n_kv_heads * head_dim");
  if (T == 0) return;
  SPINDLE_KERNEL_REQUIRE(k_new != nullptr && v_new != nullptr && slot != nullptr, "kv_cache_write",
                         "k_new, v_new and slot must be non-null");
  const int64_t n_slots = cache.n_blocks * cache.block_size;
  for (int64_t t = 0; t < T; ++t)
    SPINDLE_KERNEL_REQUIRE(slot[t] >= 0 && slot[t] < n_slots, "kv_cache_write",
                           "slot must lie in [0, n_blocks * block_size)");
  const size_t bytes = sizeof(float) * static_cast<size_t>(width);
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(cache.k + slot[t] * width, k_new + t * ld, bytes);
    std::memcpy(cache.v + slot[t] * width, v_new + t * ld, bytes);
  }
}

void attention_paged(const float* q, int64_t ld_q, float* out, int64_t ld_out, int64_t n_heads,
                     const PagedKv& cache, std::span<const AttnSeq> seqs, float scale) {
  constexpr const char* kKernel = "attention_paged";
  check_cache(cache, kKernel);
  const int64_t hd = cache.head_dim;
  SPINDLE_KERNEL_REQUIRE(n_heads > 0 && n_heads % cache.n_kv_heads == 0, kKernel,
                         "n_heads must be a positive multiple of n_kv_heads");
  SPINDLE_KERNEL_REQUIRE(ld_q >= n_heads * hd && ld_out >= n_heads * hd, kKernel,
                         "ld_q and ld_out must be >= n_heads * head_dim");

  // first_row[s]: new tokens of the sequences before s.
  std::vector<int64_t> first_row(seqs.size() + 1, 0);
  int64_t max_ctx = 0;
  int64_t work = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const AttnSeq& seq = seqs[s];
    SPINDLE_KERNEL_REQUIRE(seq.row_begin >= 0 && seq.n_new >= 0 && seq.n_past >= 0, kKernel,
                           "row_begin, n_new and n_past must be >= 0");
    first_row[s + 1] = first_row[s] + seq.n_new;
    if (seq.n_new == 0) continue;
    const int64_t ctx = seq.n_past + seq.n_new;
    SPINDLE_KERNEL_REQUIRE(seq.block_table != nullptr, kKernel, "block_table must be non-null");
    for (int64_t b = 0; b < (ctx + cache.block_size - 1) / cache.block_size; ++b)
      SPINDLE_KERNEL_REQUIRE(seq.block_table[b] >= 0 && seq.block_table[b] < cache.n_blocks,
                             kKernel, "block_table entries must lie in [0, n_blocks)");
    max_ctx = std::max(max_ctx, ctx);
    work += seq.n_new * (seq.n_past + (seq.n_new + 1) / 2) * n_heads * hd * 2;
  }
  const int64_t n_rows = first_row.back();
  if (n_rows == 0) return;
  SPINDLE_KERNEL_REQUIRE(q != nullptr && out != nullptr, kKernel, "q and out must be non-null");

  // A job covers heads_per_job query heads sharing one KV head: the whole group, halved while
  // that leaves too few jobs to keep the threads busy (batch-1 decode with few KV heads).
  const bool parallel = cpu::worth_parallel(work);
  const int64_t n_threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
  const int64_t group = n_heads / cache.n_kv_heads;
  int64_t heads_per_job = group;
  while (heads_per_job % 2 == 0 && n_rows * (n_heads / heads_per_job) < 4 * n_threads)
    heads_per_job /= 2;
  const int64_t head_blocks = n_heads / heads_per_job;
  const int64_t n_jobs = n_rows * head_blocks;
  const int64_t stride = job_scratch(max_ctx, hd, heads_per_job);
  std::vector<float> scratch(static_cast<size_t>(n_threads * stride));
  const simd::Ops& ops = simd::ops();

  // Jobs run sequence by sequence, head block major and token minor, so one thread's
  // consecutive jobs reuse the same keys from cache.
  cpu::parallel_for(n_jobs, parallel, cpu::Schedule::dynamic, [&](int64_t i) {
    const auto s =
        static_cast<size_t>(std::upper_bound(first_row.begin(), first_row.end(), i / head_blocks) -
                            first_row.begin() - 1);
    const AttnSeq& seq = seqs[s];
    const int64_t local = i - first_row[s] * head_blocks;
    const int64_t hb = local / seq.n_new;
    const int64_t t = local % seq.n_new;
    const int64_t row = seq.row_begin + t;
    const int64_t h0 = hb * heads_per_job;
    const HeadJob job{q + row * ld_q + h0 * hd,
                      out + row * ld_out + h0 * hd,
                      seq.block_table,
                      seq.n_past + t + 1,
                      h0 / group,
                      heads_per_job};
    const int64_t thread = parallel ? omp_get_thread_num() : 0;
    attend(job, cache, scale, ops, max_ctx, scratch.data() + thread * stride);
  });
}

}  // namespace spindle::kernels
