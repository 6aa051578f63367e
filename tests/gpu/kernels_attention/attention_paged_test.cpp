// GPU kv_cache_write, attention_paged, attention_prefill and attention_decode against the CPU
// kernels (spindle::kernels) on the same inputs (rounded to bf16 first in the bf16 mode): ragged
// batches mixing decode rows and prefill chunks with n_past > 0, shuffled block tables, GQA
// ratios 1–16, head_dim 8–256, contexts that neither the block size nor the tiles divide. bf16
// prefill runs on both paths: tensor cores (head_dim a multiple of 16 up to 128) and CUDA cores.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "gpu_test_util.h"
#include "spindle/kernels/attention.h"
#include "spindle/kernels/cuda/attention.h"

namespace spindle::kernels::cuda::test {
namespace {

struct SeqSpec {
  int32_t n_past, n_new;
};

struct PagedCase {
  int64_t n_heads, n_kv, hd, bs;
  std::vector<SeqSpec> seqs;
  uint32_t seed;
};

enum class Entry { paged, prefill, prefill_cuda_cores, decode };

const char* entry_name(Entry e) {
  switch (e) {
    case Entry::paged:
      return "attention_paged";
    case Entry::prefill:
      return "attention_prefill";
    case Entry::prefill_cuda_cores:
      return "attention_prefill (CUDA cores)";
    case Entry::decode:
      break;
  }
  return "attention_decode";
}

// Cache slots and out columns nobody should write (all_close accepts NaN only against NaN).
const float kSentinel = std::numeric_limits<float>::quiet_NaN();

// One ragged batch on both devices. The caches are filled by the GPU and CPU kv_cache_write
// from the same dense rows (row stride width + 3); blocks are handed out shuffled, a few stay
// unused, and q/out rows go in reverse sequence order (row_begin not monotone) with padded
// row strides.
template <class T>
struct PagedBatch {
  PagedCase c;
  int64_t width, n_blocks, rows = 0, ld_q, ld_out;
  int32_t max_new = 0, max_ctx = 0;
  std::vector<int32_t> tables;  // all sequences' tables, concatenated
  std::vector<DeviceAttnSeq> dseqs;
  std::vector<AttnSeq> cseqs;
  std::vector<float> k_cache, v_cache, q;  // CPU copies (values representable in T)
  DeviceBuffer<T> d_k, d_v, d_q;
  DeviceBuffer<int32_t> d_tables;
  DeviceBuffer<DeviceAttnSeq> d_seqs;

  explicit PagedBatch(PagedCase pc) : c(std::move(pc)) {
    width = c.n_kv * c.hd;
    ld_q = c.n_heads * c.hd + 8;
    ld_out = c.n_heads * c.hd + 16;
    n_blocks = 3;
    for (const SeqSpec& s : c.seqs) n_blocks += (s.n_past + s.n_new + c.bs - 1) / c.bs;
    std::vector<int32_t> order(static_cast<size_t>(n_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(c.seed);
    std::shuffle(order.begin(), order.end(), rng);

    std::vector<int64_t> row_begin(c.seqs.size());
    for (size_t i = c.seqs.size(); i-- > 0;) {
      row_begin[i] = rows;
      rows += c.seqs[i].n_new;
    }
    // Dense K/V rows of every position of every sequence, and their flat cache slots.
    const int64_t ld_kv = width + 3;
    std::vector<float> k_rows, v_rows;
    std::vector<int64_t> slots;
    size_t next = 0;
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      const SeqSpec& s = c.seqs[i];
      const int32_t ctx = s.n_past + s.n_new;
      const auto offset = static_cast<int32_t>(tables.size());
      for (int64_t b = 0; b < (ctx + c.bs - 1) / c.bs; ++b) tables.push_back(order[next++]);
      for (int32_t p = 0; p < ctx; ++p)
        slots.push_back(int64_t{tables[size_t(offset + p / c.bs)]} * c.bs + p % c.bs);
      dseqs.push_back({row_begin[i], s.n_new, s.n_past, offset});
      max_new = std::max(max_new, s.n_new);
      if (s.n_new > 0) max_ctx = std::max(max_ctx, ctx);
    }
    const auto n_rows_kv = static_cast<int64_t>(slots.size());
    k_rows = quantize<T>(random_floats(size_t(n_rows_kv * ld_kv), c.seed + 1));
    v_rows = quantize<T>(random_floats(size_t(n_rows_kv * ld_kv), c.seed + 2));
    for (size_t i = 0; i < c.seqs.size(); ++i)
      cseqs.push_back(
          {row_begin[i], c.seqs[i].n_new, c.seqs[i].n_past, tables.data() + dseqs[i].table_offset});

    const size_t cache_elems = size_t(n_blocks * c.bs * width);
    k_cache.assign(cache_elems, kSentinel);
    v_cache.assign(cache_elems, kSentinel);
    d_k = upload_vec(to_elements<T>(k_cache));
    d_v = upload_vec(to_elements<T>(v_cache));
    const PagedKv cpu_cache{k_cache.data(), v_cache.data(), n_blocks, c.bs, c.n_kv, c.hd};
    kernels::kv_cache_write(cpu_cache, k_rows.data(), v_rows.data(), ld_kv, n_rows_kv,
                            slots.data());
    auto d_k_rows = upload_vec(to_elements<T>(k_rows));
    auto d_v_rows = upload_vec(to_elements<T>(v_rows));
    auto d_slots = upload_vec(slots);
    cuda::kv_cache_write(device_cache(), d_k_rows.data(), d_v_rows.data(), ld_kv, n_rows_kv,
                         d_slots.data(), nullptr);
    check(cudaDeviceSynchronize(), "sync after kv_cache_write");

    q = quantize<T>(random_floats(size_t(std::max<int64_t>(rows, 1) * ld_q), c.seed + 3));
    d_q = upload_vec(to_elements<T>(q));
    d_tables = upload_vec(tables.empty() ? std::vector<int32_t>{0} : tables);
    d_seqs = upload_vec(dseqs);
  }

  DevicePagedKv<T> device_cache() { return {d_k.data(), d_v.data(), n_blocks, c.bs, c.n_kv, c.hd}; }

  std::vector<float> cpu_out(float scale) {
    std::vector<float> out(size_t(std::max<int64_t>(rows, 1) * ld_out), kSentinel);
    const PagedKv cpu_cache{k_cache.data(), v_cache.data(), n_blocks, c.bs, c.n_kv, c.hd};
    kernels::attention_paged(q.data(), ld_q, out.data(), ld_out, c.n_heads, cpu_cache, cseqs,
                             scale);
    return out;
  }

  // On `on` when given (else a fresh stream); with shift > 0 the kernels read copies of the
  // caches that start `shift` elements into their allocation (not 16-byte aligned).
  std::vector<float> gpu_out(Entry entry, float scale, cudaStream_t on = nullptr,
                             int64_t shift = 0) {
    auto d_out = upload_vec(
        to_elements<T>(std::vector<float>(size_t(std::max<int64_t>(rows, 1) * ld_out), kSentinel)));
    const auto n_seqs = static_cast<int32_t>(dseqs.size());
    DevicePagedKv<T> cache = device_cache();
    DeviceBuffer<T> k_shifted, v_shifted;
    if (shift > 0) {
      k_shifted = DeviceBuffer<T>(d_k.size() + size_t(shift));
      v_shifted = DeviceBuffer<T>(d_v.size() + size_t(shift));
      check(cudaMemcpy(k_shifted.data() + shift, d_k.data(), d_k.bytes(), cudaMemcpyDefault),
            "copy k (shifted)");
      check(cudaMemcpy(v_shifted.data() + shift, d_v.data(), d_v.bytes(), cudaMemcpyDefault),
            "copy v (shifted)");
      cache.k = k_shifted.data() + shift;
      cache.v = v_shifted.data() + shift;
    }
    // upload_vec() runs on the legacy stream, which a non-blocking stream does not wait for.
    check(cudaDeviceSynchronize(), "sync after upload");
    Stream own;
    const cudaStream_t stream = on != nullptr ? on : own.get();
    const size_t scratch_bytes = attention_scratch_bytes(n_seqs, c.n_heads, c.n_kv, c.hd, max_ctx);
    DeviceBuffer<unsigned char> scratch(scratch_bytes);
    switch (entry) {
      case Entry::paged:
        attention_paged<T>(d_q.data(), ld_q, d_out.data(), ld_out, c.n_heads, cache, d_seqs.data(),
                           n_seqs, d_tables.data(), max_new, max_ctx, scale, scratch.data(),
                           scratch.size(), stream);
        break;
      case Entry::prefill:
      case Entry::prefill_cuda_cores: {
        // The path taken is the one the case asks for: bf16 with head_dim a multiple of 16 up
        // to 128 and aligned caches runs on tensor cores.
        const bool tc = std::is_same_v<T, bf16> && c.hd % 16 == 0 && c.hd <= 128 &&
                        ld_q % 8 == 0 && shift == 0;
        EXPECT_EQ(attention_prefill_uses_tensor_cores<T>(d_q.data(), ld_q, cache), tc);
        attention_prefill<T>(d_q.data(), ld_q, d_out.data(), ld_out, c.n_heads, cache,
                             d_seqs.data(), n_seqs, d_tables.data(), max_new, max_ctx, scale,
                             stream, entry == Entry::prefill);
        break;
      }
      case Entry::decode:
        attention_decode<T>(d_q.data(), ld_q, d_out.data(), ld_out, c.n_heads, cache, d_seqs.data(),
                            n_seqs, d_tables.data(), max_ctx, scale, scratch.data(), scratch.size(),
                            stream);
        break;
    }
    check(cudaStreamSynchronize(stream), "sync after attention");
    return to_floats<T>(d_out.download());
  }
};

template <class T>
Tolerance forward_tolerance() {
  // fp32: both sides accumulate in fp32 in different orders. bf16: the output is rounded to bf16
  // (unit roundoff 2^-8) after an fp32 computation on the same bf16 inputs.
  return std::is_same_v<T, float> ? Tolerance{2e-5, 2e-5} : Tolerance{2e-3, 1e-2};
}

template <class T>
void check_case(const PagedCase& pc, std::vector<Entry> entries) {
  PagedBatch<T> batch(pc);
  const float scale = 1.0f / std::sqrt(static_cast<float>(pc.hd));
  // kv_cache_write: every slot (written or sentinel) equals the CPU cache exactly.
  EXPECT_TRUE(all_close("kv_cache_write k", to_floats<T>(batch.d_k.download()), batch.k_cache,
                        batch.width, {0.0, 0.0}));
  EXPECT_TRUE(all_close("kv_cache_write v", to_floats<T>(batch.d_v.download()), batch.v_cache,
                        batch.width, {0.0, 0.0}));
  const std::vector<float> want = batch.cpu_out(scale);
  if (std::is_same_v<T, bf16> &&
      std::find(entries.begin(), entries.end(), Entry::prefill) != entries.end()) {
    entries.push_back(Entry::prefill_cuda_cores);
  }
  for (Entry e : entries) {
    const std::string what = std::string(entry_name(e)) + "<" + type_name<T>() + "> hd " +
                             std::to_string(pc.hd) + " heads " + std::to_string(pc.n_heads) + "/" +
                             std::to_string(pc.n_kv) + " bs " + std::to_string(pc.bs);
    EXPECT_TRUE(
        all_close(what, batch.gpu_out(e, scale), want, batch.ld_out, forward_tolerance<T>()));
  }
}

template <class T>
class GpuAttentionPaged : public ::testing::Test {};
TYPED_TEST_SUITE(GpuAttentionPaged, ElementTypes);

const std::vector<Entry> kMixed{Entry::paged, Entry::prefill};
const std::vector<Entry> kAll{Entry::paged, Entry::prefill, Entry::decode};

// stories260K's shape: head_dim 8, 8 heads over 4 KV heads. Prefill from 0, chunked prefill
// spanning two query tiles, decode rows, an empty sequence.
TYPED_TEST(GpuAttentionPaged, StoriesShapeMixedBatch) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({8, 4, 8, 16, {{0, 37}, {5, 1}, {100, 70}, {0, 1}, {33, 0}, {200, 1}}, 11},
                        kMixed);
}

TYPED_TEST(GpuAttentionPaged, Gqa1HeadDim64) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({4, 4, 64, 16, {{17, 1}, {0, 65}, {63, 64}, {1000, 1}}, 12}, kMixed);
}

// Qwen3-like: head_dim 128, GQA 4, a 4501-token decode context (18 splits) beside a prefill chunk.
TYPED_TEST(GpuAttentionPaged, Gqa4HeadDim128LongContext) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({16, 4, 128, 32, {{4500, 1}, {300, 130}, {0, 3}, {31, 1}}, 13}, kMixed);
}

TYPED_TEST(GpuAttentionPaged, Gqa8SmallBlocks) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({16, 2, 64, 8, {{0, 1}, {2, 129}, {77, 1}, {500, 20}}, 14}, kMixed);
}

// head_dim 48 (not a multiple of 32) with a block size that is not a power of two.
TYPED_TEST(GpuAttentionPaged, HeadDim48OddBlockSize) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({6, 3, 48, 12, {{10, 50}, {25, 1}, {0, 2}}, 15}, kMixed);
}

// head_dim 256 takes the 32-row query tile (70 rows: three tiles) and the largest shared memory.
TYPED_TEST(GpuAttentionPaged, HeadDim256) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({2, 1, 256, 16, {{40, 70}, {300, 1}}, 16}, kMixed);
}

// 16 query heads on one KV head: decode blocks take 8 heads, two blocks per KV head.
TYPED_TEST(GpuAttentionPaged, Gqa16) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({16, 1, 32, 16, {{700, 1}, {10, 5}}, 17}, kMixed);
}

// Only one-token sequences (plus an empty one): all three entries, contexts around the 256-key
// split boundary.
TYPED_TEST(GpuAttentionPaged, DecodeOnlyBatch) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>(
      {16, 4, 128, 16, {{4500, 1}, {0, 1}, {255, 1}, {256, 1}, {257, 1}, {40, 0}}, 18}, kAll);
  check_case<TypeParam>({8, 4, 8, 16, {{0, 1}, {511, 1}, {3, 1}}, 19}, kAll);
}

// The prefill kernel alone on a batch of one long prompt that spans several query tiles.
TYPED_TEST(GpuAttentionPaged, LongPromptFromZero) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({8, 2, 64, 16, {{0, 333}}, 20}, kMixed);
}

// Qwen3-0.6B's decode shape (16 query heads over 8 KV heads, head_dim 128) at context 200, alone
// and beside other sequences.
TYPED_TEST(GpuAttentionPaged, DecodeQwen3Shape) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({16, 8, 128, 16, {{199, 1}}, 21}, kAll);
  check_case<TypeParam>({16, 8, 128, 16, {{199, 1}, {63, 1}, {64, 1}, {1, 1}}, 22}, kAll);
}

// Every context within one split: the decode kernel writes the output without the combine pass.
TYPED_TEST(GpuAttentionPaged, DecodeOneSplitDirect) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({16, 1, 32, 16, {{0, 1}, {31, 1}, {7, 1}}, 23}, kAll);
  check_case<TypeParam>({6, 3, 48, 12, {{20, 1}, {2, 1}}, 24}, kAll);
  check_case<TypeParam>({2, 1, 256, 16, {{31, 1}}, 25}, kAll);
  check_case<TypeParam>({8, 4, 8, 16, {{0, 1}, {9, 1}}, 26}, kAll);
}

// Enough sequences that the splits stay at their largest (256 keys), contexts 1..700.
TYPED_TEST(GpuAttentionPaged, DecodeManySequences) {
  SPINDLE_REQUIRE_GPU();
  std::vector<SeqSpec> seqs;
  std::mt19937 rng(27);
  for (int i = 0; i < 40; ++i) seqs.push_back({int32_t(rng() % 700), 1});
  check_case<TypeParam>({8, 8, 64, 16, seqs, 27}, kAll);
}

// One stream across calls whose partials need a growing scratch (and a smaller one again), and
// caches that are not 16-byte aligned (the kernels then read K/V element by element).
TYPED_TEST(GpuAttentionPaged, DecodeScratchReuseAndUnalignedCache) {
  SPINDLE_REQUIRE_GPU();
  PagedBatch<TypeParam> small({16, 8, 128, 16, {{199, 1}}, 28});
  PagedBatch<TypeParam> big({16, 4, 128, 32, {{4500, 1}, {900, 1}, {77, 1}}, 29});
  const float scale = 1.0f / std::sqrt(128.0f);
  const std::vector<float> want_small = small.cpu_out(scale);
  const std::vector<float> want_big = big.cpu_out(scale);
  const Tolerance tol = forward_tolerance<TypeParam>();
  Stream stream;
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_TRUE(all_close("decode small rep " + std::to_string(rep),
                          small.gpu_out(Entry::decode, scale, stream.get()), want_small,
                          small.ld_out, tol));
    EXPECT_TRUE(all_close("decode big rep " + std::to_string(rep),
                          big.gpu_out(Entry::decode, scale, stream.get()), want_big, big.ld_out,
                          tol));
  }
  EXPECT_TRUE(all_close("decode small unaligned",
                        small.gpu_out(Entry::decode, scale, stream.get(), 1), want_small,
                        small.ld_out, tol));
  EXPECT_TRUE(all_close("decode big unaligned", big.gpu_out(Entry::decode, scale, stream.get(), 1),
                        want_big, big.ld_out, tol));
  EXPECT_TRUE(all_close("paged big unaligned", big.gpu_out(Entry::paged, scale, stream.get(), 1),
                        want_big, big.ld_out, tol));
}

// The smallest head_dim the tensor cores take (one 16-wide fragment per row), prefill tiles
// straddling 64 rows with a cached prefix.
TYPED_TEST(GpuAttentionPaged, HeadDim16Prefill) {
  SPINDLE_REQUIRE_GPU();
  check_case<TypeParam>({4, 2, 16, 16, {{0, 70}, {9, 33}, {130, 1}}, 32}, kMixed);
}

// Unaligned caches send bf16 prefill back to the CUDA cores (checked inside gpu_out), with the
// same results.
TYPED_TEST(GpuAttentionPaged, PrefillUnalignedCacheFallsBack) {
  SPINDLE_REQUIRE_GPU();
  PagedBatch<TypeParam> batch({8, 2, 64, 16, {{0, 70}, {40, 9}}, 30});
  const float scale = 1.0f / std::sqrt(64.0f);
  EXPECT_TRUE(all_close("prefill unaligned", batch.gpu_out(Entry::prefill, scale, nullptr, 1),
                        batch.cpu_out(scale), batch.ld_out, forward_tolerance<TypeParam>()));
}

// No atomics on either path: two launches give bitwise-equal outputs (bf16: tensor cores).
TYPED_TEST(GpuAttentionPaged, PrefillRepeatedLaunchesBitwiseEqual) {
  SPINDLE_REQUIRE_GPU();
  PagedBatch<TypeParam> batch({16, 8, 128, 16, {{0, 256}, {100, 37}}, 31});
  const float scale = 1.0f / std::sqrt(128.0f);
  const std::vector<float> a = batch.gpu_out(Entry::prefill, scale);
  const std::vector<float> b = batch.gpu_out(Entry::prefill, scale);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;  // untouched sentinel columns
    ASSERT_EQ(a[i], b[i]) << "index " << i;
  }
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
