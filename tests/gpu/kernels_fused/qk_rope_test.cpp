// cuda::qk_norm_rope_kv_write against the unfused sequence it replaces (cuda::rmsnorm of each q
// and k head, cuda::rope of q and k, cuda::kv_cache_write), both on the GPU from the same
// inputs: q, k and the whole cache must be bitwise equal. Both dtypes, Qwen3 (norms) and Llama
// (none), both RoPE styles, GQA, padded row strides, several rows with shuffled cache slots (one
// outside the cache: skipped), large positions. Contract violations throw on the host.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernels_lora/gpu_test_util.h"
#include "spindle/kernels/cuda/attention.h"
#include "spindle/kernels/cuda/norm.h"
#include "spindle/kernels/cuda/qk_rope.h"
#include "spindle/kernels/cuda/rope.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaQkRope : public ::testing::Test {};
TYPED_TEST_SUITE(CudaQkRope, ElementTypes);

struct Case {
  int64_t rows, n_heads, n_kv, hd;
  bool norms;
  RopeStyle style;
};

std::string describe(const Case& c) {
  return "rows " + std::to_string(c.rows) + " heads " + std::to_string(c.n_heads) + "/" +
         std::to_string(c.n_kv) + " head_dim " + std::to_string(c.hd) +
         (c.norms ? " qwen3" : " llama") + (c.style == RopeStyle::half ? " half" : " interleaved");
}

// Two copies of every input buffer: one for the fused kernel, one for the unfused steps.
template <class T>
struct Inputs {
  DeviceBuffer<T> q, k, v, cache_k, cache_v;
};

template <class T>
void check_case(const Case& c, uint32_t seed) {
  const std::string tag = std::string(dtype_name<T>()) + " " + describe(c);
  const int64_t ld_q = c.n_heads * c.hd + 8, ld_kv = c.n_kv * c.hd + 4;
  const int64_t block_size = 4, n_blocks = (c.rows + 1 + block_size - 1) / block_size + 2;
  const int64_t n_slots = n_blocks * block_size, width = c.n_kv * c.hd;
  const int64_t rows_alloc = std::max<int64_t>(c.rows, 1);

  const auto q = random_floats(size_t(rows_alloc * ld_q), seed);
  const auto k = random_floats(size_t(rows_alloc * ld_kv), seed + 1);
  const auto v = random_floats(size_t(rows_alloc * ld_kv), seed + 2);
  const auto ck = random_floats(size_t(n_slots * width), seed + 3);
  const auto cv = random_floats(size_t(n_slots * width), seed + 4);
  std::vector<float> qw = random_floats(size_t(c.hd), seed + 5);
  std::vector<float> kw = random_floats(size_t(c.hd), seed + 6);
  for (float& w : qw) w += 1.0f;
  for (float& w : kw) w += 1.0f;
  std::vector<float> inv_freq(size_t(c.hd / 2));
  for (int64_t i = 0; i < c.hd / 2; ++i) {
    inv_freq[size_t(i)] = float(1.0 / std::pow(1e6, double(2 * i) / double(c.hd)));
  }
  std::mt19937 rng(seed);
  std::vector<int32_t> pos(static_cast<size_t>(rows_alloc));
  for (auto& p : pos) p = int32_t(rng() % 40000);
  std::vector<int64_t> slots(static_cast<size_t>(n_slots));
  std::iota(slots.begin(), slots.end(), int64_t{0});
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(size_t(rows_alloc));
  if (c.rows > 2) slots[1] = -1;  // skipped by the cache write
  if (c.rows > 3) slots[2] = n_slots;

  Inputs<T> in[2];
  for (Inputs<T>& b : in) {
    b.q = upload_as<T>(q);
    b.k = upload_as<T>(k);
    b.v = upload_as<T>(v);
    b.cache_k = upload_as<T>(ck);
    b.cache_v = upload_as<T>(cv);
  }
  const auto d_qw = upload_vec<float>(qw);
  const auto d_kw = upload_vec<float>(kw);
  const auto d_freq = upload_vec<float>(inv_freq);
  const auto d_pos = upload_vec<int32_t>(pos);
  const auto d_slots = upload_vec<int64_t>(slots);
  fence_uploads();
  auto cache_of = [&](Inputs<T>& b) {
    return DevicePagedKv<T>{b.cache_k.data(), b.cache_v.data(), n_blocks, block_size, c.n_kv, c.hd};
  };
  const float eps = 1e-6f;
  Stream stream;
  const cudaStream_t s = stream.get();

  qk_norm_rope_kv_write<T>(in[0].q.data(), ld_q, c.n_heads, in[0].k.data(), in[0].v.data(), ld_kv,
                           c.rows, c.norms ? d_qw.data() : nullptr, c.norms ? d_kw.data() : nullptr,
                           eps, d_pos.data(), d_freq.data(), c.style, cache_of(in[0]),
                           d_slots.data(), s);

  Inputs<T>& u = in[1];
  if (c.norms) {
    for (int64_t r = 0; r < c.rows; ++r) {  // per row: the heads of a padded row are contiguous
      rmsnorm<T>(u.q.data() + r * ld_q, c.hd, d_qw.data(), u.q.data() + r * ld_q, c.hd, c.n_heads,
                 c.hd, eps, nullptr, s);
      rmsnorm<T>(u.k.data() + r * ld_kv, c.hd, d_kw.data(), u.k.data() + r * ld_kv, c.hd, c.n_kv,
                 c.hd, eps, nullptr, s);
    }
  }
  rope<T>(u.q.data(), ld_q, c.rows, c.n_heads, c.hd, d_pos.data(), d_freq.data(), c.style, false,
          s);
  rope<T>(u.k.data(), ld_kv, c.rows, c.n_kv, c.hd, d_pos.data(), d_freq.data(), c.style, false, s);
  kv_cache_write<T>(cache_of(u), u.k.data(), u.v.data(), ld_kv, c.rows, d_slots.data(), s);
  stream.synchronize();

  EXPECT_TRUE(bitwise_equal(tag + " q", in[0].q.download(), u.q.download()));
  EXPECT_TRUE(bitwise_equal(tag + " k", in[0].k.download(), u.k.download()));
  EXPECT_TRUE(bitwise_equal(tag + " v", in[0].v.download(), u.v.download()));
  EXPECT_TRUE(bitwise_equal(tag + " cache k", in[0].cache_k.download(), u.cache_k.download()));
  EXPECT_TRUE(bitwise_equal(tag + " cache v", in[0].cache_v.download(), u.cache_v.download()));
}

TYPED_TEST(CudaQkRope, MatchesUnfusedStepsBitwise) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 1000;
  for (bool norms : {true, false}) {
    for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved}) {
      for (int64_t rows : {0, 1, 3, 7, 33}) {
        check_case<TypeParam>({rows, 16, 8, 128, norms, style}, seed++);  // Qwen3-0.6B heads
        check_case<TypeParam>({rows, 4, 1, 64, norms, style}, seed++);
        check_case<TypeParam>({rows, 8, 4, 8, norms, style}, seed++);  // stories260K head_dim
        check_case<TypeParam>({rows, 2, 2, 96, norms, style}, seed++);
        check_case<TypeParam>({rows, 2, 1, 320, norms, style}, seed++);  // > 256 threads' worth
      }
    }
  }
}

// Host-side checks, before any launch: no device needed (pointers are never dereferenced).
TEST(CudaQkRopeContract, ViolationsThrow) {
  auto* p = reinterpret_cast<float*>(uintptr_t{256});
  const auto* pos = reinterpret_cast<const int32_t*>(uintptr_t{256});
  const auto* slot = reinterpret_cast<const int64_t*>(uintptr_t{256});
  const DevicePagedKv<float> cache{p, p, 4, 4, 2, 8};
  auto call = [&](int64_t ld_q, int64_t n_heads, int64_t ld_kv, int64_t rows, const float* qn,
                  const float* kn, RopeStyle style, DevicePagedKv<float> kv) {
    qk_norm_rope_kv_write<float>(p, ld_q, n_heads, p, p, ld_kv, rows, qn, kn, 1e-6f, pos, p, style,
                                 kv, slot, nullptr);
  };
  const RopeStyle half = RopeStyle::half;
  EXPECT_THROW(call(32, 4, 16, -1, p, p, half, cache), std::invalid_argument);
  EXPECT_THROW(call(32, 3, 16, 1, p, p, half, cache), std::invalid_argument);  // 3 % 2
  EXPECT_THROW(call(31, 4, 16, 1, p, p, half, cache), std::invalid_argument);  // ld_q
  EXPECT_THROW(call(32, 4, 15, 1, p, p, half, cache), std::invalid_argument);  // ld_kv
  EXPECT_THROW(call(32, 4, 16, 1, p, nullptr, half, cache), std::invalid_argument);
  EXPECT_THROW(call(32, 4, 16, 1, p, p, RopeStyle(7), cache), std::invalid_argument);
  EXPECT_THROW(call(32, 4, 16, 1, p, p, half, {nullptr, p, 4, 4, 2, 8}), std::invalid_argument);
  EXPECT_THROW(call(36, 4, 18, 1, p, p, half, {p, p, 4, 4, 2, 9}), std::invalid_argument);  // odd
  EXPECT_THROW(call(32, 4, 16, 1, p, p, half, {p, p, 0, 4, 2, 8}), std::invalid_argument);
  EXPECT_THROW(qk_norm_rope_kv_write<float>(p, 32, 4, p, p, 16, 1, p, p, 1e-6f, nullptr, p, half,
                                            cache, slot, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
