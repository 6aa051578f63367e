// GPU SGMV LoRA forward (lora_shrink / lora_expand) against the CPU kernels on the same inputs,
// both dtypes: mixed segment layouts (see lora_scenarios.h), a decode batch of one-row
// segments, d_in past the shrink chunk, float4 and scalar paths (d_in / max_rank multiples of 4
// or not), untouched rows and columns, and the contract checks.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "lora_scenarios.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaLora : public ::testing::Test {};
using Dtypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaLora, Dtypes);

std::vector<Scenario> forward_scenarios() {
  return {mixed_scenario("odd", 133, 75, 128, 75), mixed_scenario("aligned", 256, 192, 64, 0),
          mixed_scenario("rank9", 20, 36, 9, 36), decode_scenario(1024, 1536, 64), wide_scenario()};
}

template <class T>
void check_forward(const Scenario& sc, uint32_t seed) {
  const std::string label = sc.name + " " + dtype_name<T>() + " ";
  const HostLora hl = make_host_lora(sc, seed);
  DeviceLora dl = make_device_lora(sc, hl);
  const auto x = quantize<T>(random_floats(size_t(sc.rows * sc.ld_x), seed + 10));
  std::vector<float> h_cpu = nans(size_t(sc.rows * sc.max_rank));
  kernels::lora_shrink(x.data(), sc.ld_x, hl.slots(), sc.segments, h_cpu.data());
  const auto y0 = quantize<T>(random_floats(size_t(sc.rows * sc.ld_y), seed + 11));
  std::vector<float> y_cpu = y0;
  kernels::lora_expand(h_cpu.data(), hl.slots(), sc.segments, y_cpu.data(), sc.ld_y, sc.col_offset);

  auto d_x = upload_as<T>(x);
  auto d_h = upload_vec(nans(h_cpu.size()));
  auto d_h_in = upload_vec(h_cpu);  // expand gets the CPU's h: each kernel tested alone
  auto d_y = upload_as<T>(y0);
  fence_uploads();
  Stream stream;
  lora_shrink<T>(d_x.data(), sc.ld_x, dl.slots, dl.segments, d_h.data(), stream.get());
  lora_expand<T>(d_h_in.data(), dl.slots, dl.segments, d_y.data(), sc.ld_y, sc.col_offset,
                 stream.get());
  stream.synchronize();
  // h is fp32 from the same (rounded) inputs in both dtypes: only the summation order differs.
  EXPECT_TRUE(all_close(label + "h", d_h.download(), h_cpu, 1e-5));
  EXPECT_TRUE(all_close(label + "y", download_floats(d_y), y_cpu, dtype_rtol<T>()));
}

TYPED_TEST(CudaLora, ForwardMatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (const Scenario& sc : forward_scenarios()) check_forward<TypeParam>(sc, seed += 20);
}

TYPED_TEST(CudaLora, NoWorkIsANoOp) {
  SPINDLE_REQUIRE_GPU();
  using T = TypeParam;
  const DeviceLoraSlots slots{nullptr, nullptr, nullptr, nullptr, 4, 8, 16, 16};
  // No segments, or no rows: nothing is launched, null data pointers are fine.
  EXPECT_NO_THROW(
      lora_shrink<T>(nullptr, 16, slots, DeviceSegments{nullptr, 0, 10}, nullptr, nullptr));
  DeviceBuffer<LoraSegment> seg(1);
  EXPECT_NO_THROW(
      lora_expand<T>(nullptr, slots, DeviceSegments{seg.data(), 1, 0}, nullptr, 16, 0, nullptr));
  EXPECT_NO_THROW(lora_expand_backward<T>(nullptr, nullptr, 16, 0, slots,
                                          DeviceSegments{nullptr, 0, 3}, nullptr, nullptr, nullptr,
                                          0, nullptr));
  EXPECT_NO_THROW(lora_shrink_backward<T>(nullptr, 16, nullptr, slots,
                                          DeviceSegments{nullptr, 0, 3}, nullptr, nullptr, 16,
                                          nullptr, 0, nullptr));
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// Contract checks run on the host before any CUDA call, so these run without a device too.
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

TYPED_TEST(CudaLora, ContractViolationsThrowBeforeLaunch) {
  using T = TypeParam;
  // Never dereferenced: every call below throws on the host first.
  auto* fake_seg = reinterpret_cast<const LoraSegment*>(uintptr_t{0x1000});
  auto* fake_t = reinterpret_cast<T*>(uintptr_t{0x2000});
  auto* fake_f = reinterpret_cast<float*>(uintptr_t{0x3000});
  const DeviceLoraSlots ok{fake_f, fake_f, reinterpret_cast<const int32_t*>(fake_f), fake_f, 4, 8,
                           16,     12};
  const DeviceSegments segs{fake_seg, 2, 10};
  const char* shrink = "cuda::lora_shrink";
  const char* expand = "cuda::lora_expand";
  const char* expand_bw = "cuda::lora_expand_backward";
  const char* shrink_bw = "cuda::lora_shrink_backward";

  for (int64_t bad_rank : {int64_t{0}, int64_t{129}, int64_t{-1}}) {
    DeviceLoraSlots s = ok;
    s.max_rank = bad_rank;
    expect_contract([&] { lora_shrink<T>(fake_t, 16, s, segs, fake_f, nullptr); }, shrink,
                    "max_rank out of [1, 128]");
    expect_contract([&] { lora_expand<T>(fake_f, s, segs, fake_t, 12, 0, nullptr); }, expand,
                    "max_rank out of [1, 128]");
  }
  {
    DeviceLoraSlots s = ok;
    s.d_in = 0;
    expect_contract([&] { lora_shrink<T>(fake_t, 16, s, segs, fake_f, nullptr); }, shrink,
                    "d_in == 0");
    s = ok;
    s.d_out = 0;
    expect_contract([&] { lora_expand<T>(fake_f, s, segs, fake_t, 12, 0, nullptr); }, expand,
                    "d_out == 0");
    s = ok;
    s.max_slots = -1;
    expect_contract([&] { lora_shrink<T>(fake_t, 16, s, segs, fake_f, nullptr); }, shrink,
                    "max_slots < 0");
  }
  expect_contract(
      [&] {
        lora_shrink<T>(fake_t, 16, ok, {fake_seg, -1, 10}, fake_f, nullptr);
      },
      shrink, "count < 0");
  expect_contract(
      [&] {
        lora_shrink<T>(fake_t, 16, ok, {fake_seg, 2, -1}, fake_f, nullptr);
      },
      shrink, "rows < 0");
  expect_contract(
      [&] {
        lora_shrink<T>(fake_t, 16, ok, {nullptr, 2, 10}, fake_f, nullptr);
      },
      shrink, "null segments");
  expect_contract([&] { lora_shrink<T>(fake_t, 15, ok, segs, fake_f, nullptr); }, shrink,
                  "ld_x < d_in");
  expect_contract([&] { lora_shrink<T>(nullptr, 16, ok, segs, fake_f, nullptr); }, shrink,
                  "null x");
  expect_contract([&] { lora_expand<T>(fake_f, ok, segs, fake_t, 20, -1, nullptr); }, expand,
                  "col_offset < 0");
  expect_contract([&] { lora_expand<T>(fake_f, ok, segs, fake_t, 19, 8, nullptr); }, expand,
                  "ld_y < col_offset + d_out");
  expect_contract([&] { lora_expand<T>(fake_f, ok, segs, nullptr, 12, 0, nullptr); }, expand,
                  "null y");
  expect_contract(
      [&] {
        lora_expand_backward<T>(fake_f, fake_t, 15, 4, ok, segs, fake_f, fake_f, nullptr, 0,
                                nullptr);
      },
      expand_bw, "ld_dy < col_offset + d_out");
  expect_contract(
      [&] {
        lora_expand_backward<T>(fake_f, fake_t, 12, 0, ok, segs, fake_f, nullptr, nullptr, 0,
                                nullptr);
      },
      expand_bw, "null dB");
  expect_contract(
      [&] {
        lora_shrink_backward<T>(fake_t, 16, fake_f, ok, segs, fake_f, fake_t, 15, nullptr, 0,
                                nullptr);
      },
      shrink_bw, "ld_dx < d_in");
  expect_contract(
      [&] {
        lora_shrink_backward<T>(fake_t, 10, fake_f, ok, segs, fake_f, nullptr, 0, nullptr, 0,
                                nullptr);
      },
      shrink_bw, "ld_x < d_in");
  expect_contract(
      [&] {
        lora_shrink_backward<T>(fake_t, 16, fake_f, ok, segs, nullptr, nullptr, 0, nullptr, 0,
                                nullptr);
      },
      shrink_bw, "null dA");
  // A tall call reduces over row chunks in the caller's scratch: none given, or too little, is
  // refused before any launch (the kernels never allocate).
  const DeviceSegments tall{fake_seg, 2, 4096};
  const size_t need = lora_backward_scratch_bytes<T>(ok, tall);
  EXPECT_GT(need, 0u);
  EXPECT_EQ(lora_backward_scratch_bytes<T>(ok, segs), 0u);  // 10 rows: one chunk, no scratch
  expect_contract(
      [&] {
        lora_shrink_backward<T>(fake_t, 16, fake_f, ok, tall, fake_f, nullptr, 0, nullptr, 0,
                                nullptr);
      },
      shrink_bw, "no scratch");
  expect_contract(
      [&] {
        lora_shrink_backward<T>(fake_t, 16, fake_f, ok, tall, fake_f, nullptr, 0, fake_f, need - 4,
                                nullptr);
      },
      shrink_bw, "scratch too small");
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
