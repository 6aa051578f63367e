// Contract violations of the GPU attention kernels throw std::invalid_argument naming the kernel,
// on the host before any launch, and calls with no work return without touching the device.
// Both need no device, so these tests also run where there is none; the pointers are dummies
// the kernels must never dereference.

#include <cstdint>

#include "gpu_test_util.h"
#include "spindle/kernels/cuda/attention.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
T* fake() {
  return reinterpret_cast<T*>(uintptr_t{4096});
}

template <class T>
DevicePagedKv<T> good_cache() {
  return {fake<T>(),      fake<T>(), /*n_blocks=*/4, /*block_size=*/16, /*n_kv_heads=*/2,
          /*head_dim=*/64};
}

template <class T>
class GpuAttentionContract : public ::testing::Test {};
TYPED_TEST_SUITE(GpuAttentionContract, ElementTypes);

TYPED_TEST(GpuAttentionContract, KvCacheWrite) {
  using T = TypeParam;
  const auto slot = fake<int64_t>();
  const auto write = [&](DevicePagedKv<T> cache, int64_t ld, int64_t rows, const int64_t* s) {
    return [=] { kv_cache_write<T>(cache, fake<T>(), fake<T>(), ld, rows, s, nullptr); };
  };
  auto null_k = good_cache<T>();
  null_k.k = nullptr;
  auto no_blocks = good_cache<T>();
  no_blocks.block_size = 0;
  EXPECT_TRUE(throws_contract(write(null_k, 128, 1, slot), "kv_cache_write"));
  EXPECT_TRUE(throws_contract(write(no_blocks, 128, 1, slot), "kv_cache_write"));
  EXPECT_TRUE(throws_contract(write(good_cache<T>(), 127, 1, slot), "kv_cache_write"));
  EXPECT_TRUE(throws_contract(write(good_cache<T>(), 128, -1, slot), "kv_cache_write"));
  EXPECT_TRUE(throws_contract(write(good_cache<T>(), 128, 1, nullptr), "kv_cache_write"));
  EXPECT_NO_THROW(write(good_cache<T>(), 128, 0, nullptr)());
}

struct PagedArgs {
  int64_t ld_q = 128, ld_out = 128, n_heads = 2;
  int32_t n_seqs = 1, max_new = 3, max_ctx = 10;
  bool null_q = false, null_tables = false;
};

// Calls each of the three entry points with args on cache; expects a contract violation from
// each (decode ignores max_new: it is always 1 there).
template <class T>
void expect_paged_violation(const DevicePagedKv<T>& cache, const PagedArgs& a,
                            bool decode_too = true) {
  const T* q = a.null_q ? nullptr : fake<T>();
  const int32_t* tables = a.null_tables ? nullptr : fake<int32_t>();
  const auto* seqs = fake<DeviceAttnSeq>();
  EXPECT_TRUE(throws_contract(
      [&] {
        attention_paged<T>(q, a.ld_q, fake<T>(), a.ld_out, a.n_heads, cache, seqs, a.n_seqs, tables,
                           a.max_new, a.max_ctx, 1.0f, nullptr, 0, nullptr);
      },
      "attention_paged"));
  EXPECT_TRUE(throws_contract(
      [&] {
        attention_prefill<T>(q, a.ld_q, fake<T>(), a.ld_out, a.n_heads, cache, seqs, a.n_seqs,
                             tables, a.max_new, a.max_ctx, 1.0f, nullptr);
      },
      "attention_prefill"));
  if (decode_too) {
    EXPECT_TRUE(throws_contract(
        [&] {
          attention_decode<T>(q, a.ld_q, fake<T>(), a.ld_out, a.n_heads, cache, seqs, a.n_seqs,
                              tables, a.max_ctx, 1.0f, nullptr, 0, nullptr);
        },
        "attention_decode"));
  }
}

TYPED_TEST(GpuAttentionContract, PagedShapes) {
  using T = TypeParam;
  auto cache = good_cache<T>();
  cache.head_dim = 12;  // not a multiple of 8
  expect_paged_violation(cache, {.ld_q = 24, .ld_out = 24});
  cache.head_dim = 264;  // above 256
  expect_paged_violation(cache, {.ld_q = 528, .ld_out = 528});
  cache = good_cache<T>();
  cache.v = nullptr;
  expect_paged_violation(cache, {});
  cache = good_cache<T>();
  cache.n_blocks = 0;
  expect_paged_violation(cache, {});
  expect_paged_violation(good_cache<T>(), {.n_heads = 3});  // not a multiple of n_kv_heads
  expect_paged_violation(good_cache<T>(), {.ld_q = 127});
  expect_paged_violation(good_cache<T>(), {.ld_out = 100});
  expect_paged_violation(good_cache<T>(), {.n_seqs = -1});
  expect_paged_violation(good_cache<T>(), {.max_new = 11, .max_ctx = 10}, /*decode_too=*/false);
  expect_paged_violation(good_cache<T>(), {.max_ctx = 0});
  expect_paged_violation(good_cache<T>(), {.null_q = true});
  expect_paged_violation(good_cache<T>(), {.null_tables = true});
}

TYPED_TEST(GpuAttentionContract, PagedWithoutWorkLaunchesNothing) {
  using T = TypeParam;
  const auto cache = good_cache<T>();
  EXPECT_NO_THROW(attention_paged<T>(nullptr, 128, nullptr, 128, 2, cache, nullptr, 0, nullptr, 0,
                                     0, 1.0f, nullptr, 0, nullptr));
  EXPECT_NO_THROW(attention_prefill<T>(nullptr, 128, nullptr, 128, 2, cache, nullptr, 3, nullptr, 0,
                                       0, 1.0f, nullptr));
  EXPECT_NO_THROW(attention_decode<T>(nullptr, 128, nullptr, 128, 2, cache, nullptr, 0, nullptr, 0,
                                      1.0f, nullptr, 0, nullptr));
}

// A decode call whose contexts need split-KV partials refuses scratch smaller than
// attention_scratch_bytes says, naming the sizes, before any launch.
TYPED_TEST(GpuAttentionContract, DecodeScratchTooSmall) {
  using T = TypeParam;
  const auto cache = good_cache<T>();
  const int64_t n_heads = 2 * cache.n_kv_heads;
  const int32_t max_ctx = 4096;
  const size_t need =
      attention_scratch_bytes(1, n_heads, cache.n_kv_heads, cache.head_dim, max_ctx);
  ASSERT_GT(need, 0u);
  EXPECT_EQ(attention_scratch_bytes(1, n_heads, cache.n_kv_heads, cache.head_dim, 16), 0u);
  const int64_t ld = n_heads * cache.head_dim;
  EXPECT_TRUE(throws_contract(
      [&] {
        attention_decode<T>(fake<T>(), ld, fake<T>(), ld, n_heads, cache, fake<DeviceAttnSeq>(), 1,
                            fake<int32_t>(), max_ctx, 1.0f, fake<unsigned char>(), need - 1,
                            nullptr);
      },
      "attention_decode"));
}

TYPED_TEST(GpuAttentionContract, Backward) {
  using T = TypeParam;
  const auto call = [](int64_t n_heads, int64_t n_kv, int64_t hd, int32_t n_seqs, int32_t max_n,
                       T* dq) {
    return [=] {
      attention_backward<T>(fake<T>(), fake<T>(), fake<T>(), fake<T>(), dq, fake<T>(), fake<T>(),
                            n_heads, n_kv, hd, fake<DenseSeq>(), n_seqs, max_n, 1.0f, fake<T>(),
                            attention_backward_scratch_bytes(n_seqs, max_n, n_heads), nullptr);
    };
  };
  EXPECT_TRUE(throws_contract(call(4, 2, 0, 1, 8, fake<T>()), "attention_backward"));
  EXPECT_TRUE(throws_contract(call(4, 2, 20, 1, 8, fake<T>()), "attention_backward"));
  EXPECT_TRUE(throws_contract(call(4, 0, 64, 1, 8, fake<T>()), "attention_backward"));
  EXPECT_TRUE(throws_contract(call(5, 2, 64, 1, 8, fake<T>()), "attention_backward"));
  EXPECT_TRUE(throws_contract(call(4, 2, 64, -1, 8, fake<T>()), "attention_backward"));
  EXPECT_TRUE(throws_contract(call(4, 2, 64, 1, -8, fake<T>()), "attention_backward"));
  EXPECT_TRUE(throws_contract(call(4, 2, 64, 1, 8, nullptr), "attention_backward"));
  EXPECT_NO_THROW(call(4, 2, 64, 0, 8, nullptr)());
  EXPECT_NO_THROW(call(4, 2, 64, 2, 0, nullptr)());
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
