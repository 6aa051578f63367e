// GPU multi-target SGMV (lora_shrink_multi / lora_expand_multi): 1..3 targets sharing x, each
// with its own slot pool (ranks rotated, so a slot is rank 0 in one target and adapted in
// another), h and output window. Every h and y element must be bitwise that of the per-target
// lora_shrink / lora_expand calls (NaN-initialised h rows and untouched y columns included), and
// y must match the CPU kernels. Layouts: the mixed segments of lora_scenarios.h (base-only,
// rank-0, empty and long segments, 64 one-row segments), a decode batch of 64 one-row segments
// on distinct rank-8 slots (Qwen3-0.6B q/k/v shapes), and prefill-sized segments. Plus the
// contract checks of the multi entry points.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "lora_scenarios.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaLoraMulti : public ::testing::Test {};
using Dtypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaLoraMulti, Dtypes);

// A decode batch: 64 one-row segments, each its own slot (rank 8, slot 5 rank 0), rows 10 and
// 33 base-only.
Scenario decode64_scenario() {
  Scenario sc;
  sc.name = "decode64";
  sc.d_in = 1024;
  sc.d_out = 1024;
  sc.max_rank = 16;
  for (int32_t s = 0; s < 64; ++s) sc.ranks.push_back(s == 5 ? 0 : 8);
  for (int64_t t = 0; t < 64; ++t) {
    sc.segments.push_back({t, t + 1, t == 10 || t == 33 ? -1 : int32_t(t)});
  }
  sc.rows = 64;
  sc.ld_x = sc.d_in;
  return sc;
}

// Prefill: long segments on few slots, a base-only one, a one-row tail, a trailing free row.
Scenario prefill_scenario() {
  Scenario sc;
  sc.name = "prefill";
  sc.d_in = 1024;
  sc.d_out = 1024;
  sc.max_rank = 16;
  sc.ranks = {16, 5, 0, 12};
  sc.segments = {{0, 300, 0}, {300, 310, -1}, {310, 700, 1}, {700, 701, 3}, {701, 702, 2}};
  sc.rows = 703;
  sc.ld_x = sc.d_in + 4;
  return sc;
}

struct Case {
  Scenario base;                // x, segments, max_rank, ranks of target 0
  std::vector<int64_t> d_outs;  // one per target
};

// Target k: the base scenario with its own d_out and the ranks rotated by 2k.
Scenario target_scenario(const Scenario& base, int64_t d_out, size_t k) {
  Scenario sc = base;
  sc.d_out = d_out;
  const size_t shift = (2 * k) % sc.ranks.size();
  std::rotate(sc.ranks.begin(), sc.ranks.begin() + ptrdiff_t(shift), sc.ranks.end());
  return sc;
}

template <class T>
void check_multi(const Case& c, uint32_t seed) {
  const size_t n = c.d_outs.size();
  const Scenario& base = c.base;
  const std::string label =
      base.name + " " + dtype_name<T>() + " " + std::to_string(n) + " targets ";
  // y is one fused row [target 0 | target 1 | ...] plus 2 padding columns, as q/k/v would be.
  std::vector<Scenario> scs;
  std::vector<HostLora> hls;
  std::vector<DeviceLora> dls;
  std::vector<int64_t> offs;
  int64_t ld_y = 2;
  for (size_t k = 0; k < n; ++k) {
    scs.push_back(target_scenario(base, c.d_outs[k], k));
    hls.push_back(make_host_lora(scs[k], seed + 3 * uint32_t(k)));
    dls.push_back(make_device_lora(scs[k], hls[k]));
    offs.push_back(ld_y - 2);
    ld_y += c.d_outs[k];
  }
  const int64_t rows = base.rows;
  const auto x = quantize<T>(random_floats(size_t(rows * base.ld_x), seed + 10));
  const auto y0 = quantize<T>(random_floats(size_t(rows * ld_y), seed + 11));

  // CPU reference of the multi result.
  std::vector<float> y_cpu = y0;
  for (size_t k = 0; k < n; ++k) {
    std::vector<float> h = nans(size_t(rows * base.max_rank));
    kernels::lora_shrink(x.data(), base.ld_x, hls[k].slots(), base.segments, h.data());
    kernels::lora_expand(h.data(), hls[k].slots(), base.segments, y_cpu.data(), ld_y, offs[k]);
  }

  auto d_x = upload_as<T>(x);
  auto d_y_single = upload_as<T>(y0);
  auto d_y_multi = upload_as<T>(y0);
  std::vector<DeviceBuffer<float>> h_single, h_multi;
  for (size_t k = 0; k < n; ++k) {
    h_single.push_back(upload_vec(nans(size_t(rows * base.max_rank))));
    h_multi.push_back(upload_vec(nans(size_t(rows * base.max_rank))));
  }
  fence_uploads();
  Stream stream;
  const DeviceSegments segs = dls[0].segments;
  for (size_t k = 0; k < n; ++k) {
    lora_shrink<T>(d_x.data(), base.ld_x, dls[k].slots, segs, h_single[k].data(), stream.get());
    lora_expand<T>(h_single[k].data(), dls[k].slots, segs, d_y_single.data(), ld_y, offs[k],
                   stream.get());
  }
  std::vector<LoraMultiTarget<T>> targets;
  for (size_t k = 0; k < n; ++k) {
    targets.push_back({dls[k].slots, h_multi[k].data(), d_y_multi.data(), ld_y, offs[k]});
  }
  const std::span<const LoraMultiTarget<T>> span(targets);
  lora_shrink_multi<T>(d_x.data(), base.ld_x, span, segs, stream.get());
  lora_expand_multi<T>(span, segs, stream.get());
  stream.synchronize();

  for (size_t k = 0; k < n; ++k) {
    EXPECT_TRUE(bitwise_equal(label + "h" + std::to_string(k), h_multi[k].download(),
                              h_single[k].download()));
  }
  const std::vector<float> y_multi = download_floats(d_y_multi);
  EXPECT_TRUE(bitwise_equal(label + "y", y_multi, download_floats(d_y_single)));
  EXPECT_TRUE(all_close(label + "y vs cpu", y_multi, y_cpu, dtype_rtol<T>()));
}

TYPED_TEST(CudaLoraMulti, MixedSegmentsEqualSingleCalls) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 700;
  // d_in 133: the scalar paths; d_in 256, max_rank 64: the float4 paths, d_out past a tile.
  const Scenario odd = mixed_scenario("odd", 133, 75, 128, 0);
  const Scenario aligned = mixed_scenario("aligned", 256, 192, 64, 0);
  const Scenario rank9 = mixed_scenario("rank9", 20, 36, 9, 0);
  for (const Case& c :
       {Case{odd, {75}}, Case{odd, {75, 41}}, Case{odd, {75, 41, 130}},
        Case{aligned, {192, 64, 600}}, Case{aligned, {1030, 512}}, Case{rank9, {36, 5, 36}}}) {
    check_multi<TypeParam>(c, seed += 20);
  }
}

TYPED_TEST(CudaLoraMulti, DecodeAndPrefillEqualSingleCalls) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 900;
  const Scenario decode = decode64_scenario();
  const Scenario prefill = prefill_scenario();
  for (const Case& c : {Case{decode, {2048, 1024, 1024}}, Case{decode, {3072, 3072}},
                        Case{prefill, {2048, 1024, 1024}}, Case{prefill, {3072, 3072}}}) {
    check_multi<TypeParam>(c, seed += 20);
  }
}

template <class F>
void expect_contract(F&& call, const char* kernel, const char* what) {
  try {
    call();
    ADD_FAILURE() << kernel << ": no std::invalid_argument for " << what;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(kernel), std::string::npos)
        << "message does not name " << kernel << ": " << e.what();
  }
}

// Host-side checks before any CUDA call: these run without a device too.
TYPED_TEST(CudaLoraMulti, ContractViolationsThrowBeforeLaunch) {
  using T = TypeParam;
  auto* fake_seg = reinterpret_cast<const LoraSegment*>(uintptr_t{0x1000});
  auto* fake_t = reinterpret_cast<T*>(uintptr_t{0x2000});
  auto* fake_f = reinterpret_cast<float*>(uintptr_t{0x3000});
  const DeviceLoraSlots ok{fake_f, fake_f, reinterpret_cast<const int32_t*>(fake_f), fake_f, 4, 8,
                           16,     12};
  const DeviceSegments segs{fake_seg, 2, 10};
  const LoraMultiTarget<T> good{ok, fake_f, fake_t, 40, 0};
  const char* shrink = "cuda::lora_shrink_multi";
  const char* expand = "cuda::lora_expand_multi";
  using Span = std::span<const LoraMultiTarget<T>>;

  const std::vector<LoraMultiTarget<T>> four(4, good);
  expect_contract([&] { lora_shrink_multi<T>(fake_t, 16, Span(four), segs, nullptr); }, shrink,
                  "4 targets");
  expect_contract([&] { lora_expand_multi<T>(Span(four), segs, nullptr); }, expand, "4 targets");

  std::vector<LoraMultiTarget<T>> bad(3, good);
  bad[2].slots.d_in = 12;
  expect_contract([&] { lora_shrink_multi<T>(fake_t, 16, Span(bad), segs, nullptr); }, shrink,
                  "targets with different d_in");
  bad = std::vector<LoraMultiTarget<T>>(3, good);
  bad[1].slots.max_rank = 129;
  expect_contract([&] { lora_shrink_multi<T>(fake_t, 16, Span(bad), segs, nullptr); }, shrink,
                  "max_rank 129 in target 1");
  expect_contract([&] { lora_expand_multi<T>(Span(bad), segs, nullptr); }, expand,
                  "max_rank 129 in target 1");
  bad = std::vector<LoraMultiTarget<T>>(3, good);
  bad[1].h = nullptr;
  expect_contract([&] { lora_shrink_multi<T>(fake_t, 16, Span(bad), segs, nullptr); }, shrink,
                  "null h in target 1");
  expect_contract([&] { lora_shrink_multi<T>(fake_t, 15, Span(bad), segs, nullptr); }, shrink,
                  "ld_x < d_in");
  bad = std::vector<LoraMultiTarget<T>>(3, good);
  bad[2].col_offset = 30;  // 30 + 12 > ld_y 40
  expect_contract([&] { lora_expand_multi<T>(Span(bad), segs, nullptr); }, expand,
                  "ld_y < col_offset + d_out in target 2");
  bad[2].col_offset = 0;
  bad[2].y = nullptr;
  expect_contract([&] { lora_expand_multi<T>(Span(bad), segs, nullptr); }, expand,
                  "null y in target 2");

  // No targets, or no rows: nothing is checked per target or launched.
  EXPECT_NO_THROW(lora_shrink_multi<T>(nullptr, 16, Span(), segs, nullptr));
  EXPECT_NO_THROW(lora_expand_multi<T>(Span(), segs, nullptr));
  std::vector<LoraMultiTarget<T>> nulls(2, LoraMultiTarget<T>{ok, nullptr, nullptr, 12, 0});
  EXPECT_NO_THROW(
      lora_shrink_multi<T>(nullptr, 16, Span(nulls), DeviceSegments{fake_seg, 2, 0}, nullptr));
  EXPECT_NO_THROW(lora_expand_multi<T>(Span(nulls), DeviceSegments{nullptr, 0, 5}, nullptr));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
