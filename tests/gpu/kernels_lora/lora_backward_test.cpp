// GPU SGMV LoRA backward against the CPU kernels on the same inputs, both dtypes: dh overwritten
// only for adapted rows, dB/dA reduced over every segment of a slot (slots recurring in
// non-adjacent segments, decode batches), accumulation (a second call doubles the gradients and
// adds dx again), and dx == nullptr.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "lora_scenarios.h"

namespace spindle::kernels::cuda::test {
namespace {

template <class T>
class CudaLoraBackward : public ::testing::Test {};
using Dtypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaLoraBackward, Dtypes);

// The weight gradients are fp32 sums of products of the same (rounded) inputs in both dtypes.
constexpr double kGradRtol = 1e-5;

template <class T>
void check_backward(const Scenario& sc, uint32_t seed) {
  const std::string label = sc.name + " " + dtype_name<T>() + " ";
  const HostLora hl = make_host_lora(sc, seed);
  DeviceLora dl = make_device_lora(sc, hl);
  const LoraSlots slots = hl.slots();
  const size_t h_size = size_t(sc.rows * sc.max_rank);
  const size_t dA_size = size_t(hl.max_slots * sc.max_rank * sc.d_in);
  const size_t dB_size = size_t(hl.max_slots * sc.d_out * sc.max_rank);
  const int64_t ld_dy = sc.ld_y;
  const int64_t ld_dx = sc.d_in + 2;

  const auto x = quantize<T>(random_floats(size_t(sc.rows * sc.ld_x), seed + 10));
  std::vector<float> h = nans(h_size);
  kernels::lora_shrink(x.data(), sc.ld_x, slots, sc.segments, h.data());
  const auto dy = quantize<T>(random_floats(size_t(sc.rows * ld_dy), seed + 11));
  const auto dx0 = quantize<T>(random_floats(size_t(sc.rows * ld_dx), seed + 12));

  // CPU reference: one call of each, then a second shrink backward for dx accumulation.
  std::vector<float> dh_cpu = nans(h_size);
  std::vector<float> dB_cpu(dB_size, 0.0f);
  kernels::lora_expand_backward(h.data(), dy.data(), ld_dy, sc.col_offset, slots, sc.segments,
                                dh_cpu.data(), dB_cpu.data());
  std::vector<float> dA_cpu(dA_size, 0.0f);
  std::vector<float> dx_cpu = dx0;
  kernels::lora_shrink_backward(x.data(), sc.ld_x, dh_cpu.data(), slots, sc.segments, dA_cpu.data(),
                                dx_cpu.data(), ld_dx);
  std::vector<float> dx_cpu2 = dx_cpu;
  std::vector<float> scratch(dA_size, 0.0f);
  kernels::lora_shrink_backward(x.data(), sc.ld_x, dh_cpu.data(), slots, sc.segments,
                                scratch.data(), dx_cpu2.data(), ld_dx);

  auto d_x = upload_as<T>(x);
  auto d_h = upload_vec(h);
  auto d_dy = upload_as<T>(dy);
  auto d_dh = upload_vec(nans(h_size));
  auto d_dh_in = upload_vec(dh_cpu);  // shrink backward gets the CPU's dh
  auto d_dB = upload_vec(std::vector<float>(dB_size, 0.0f));
  auto d_dA = upload_vec(std::vector<float>(dA_size, 0.0f));
  auto d_dA_only = upload_vec(std::vector<float>(dA_size, 0.0f));
  auto d_dx = upload_as<T>(dx0);
  fence_uploads();
  Stream stream;
  // Caller-owned partial sums (tall calls reduce over row chunks): one buffer for both calls.
  const size_t scratch_bytes = lora_backward_scratch_bytes(dl.slots, dl.segments);
  DeviceBuffer<unsigned char> partials(scratch_bytes);
  const auto expand_bw = [&] {
    lora_expand_backward<T>(d_h.data(), d_dy.data(), ld_dy, sc.col_offset, dl.slots, dl.segments,
                            d_dh.data(), d_dB.data(), partials.data(), scratch_bytes, stream.get());
  };
  const auto shrink_bw = [&] {
    lora_shrink_backward<T>(d_x.data(), sc.ld_x, d_dh_in.data(), dl.slots, dl.segments, d_dA.data(),
                            d_dx.data(), ld_dx, partials.data(), scratch_bytes, stream.get());
  };

  expand_bw();
  shrink_bw();
  lora_shrink_backward<T>(d_x.data(), sc.ld_x, d_dh_in.data(), dl.slots, dl.segments,
                          d_dA_only.data(), nullptr, ld_dx, partials.data(), scratch_bytes,
                          stream.get());
  stream.synchronize();
  const std::vector<float> dB1 = d_dB.download();
  const std::vector<float> dA1 = d_dA.download();
  EXPECT_TRUE(all_close(label + "dh", d_dh.download(), dh_cpu, kGradRtol));
  EXPECT_TRUE(all_close(label + "dB", dB1, dB_cpu, kGradRtol));
  EXPECT_TRUE(all_close(label + "dA", dA1, dA_cpu, kGradRtol));
  EXPECT_TRUE(all_close(label + "dx", download_floats(d_dx), dx_cpu, dtype_rtol<T>()));
  EXPECT_TRUE(all_close(label + "dA (dx null)", d_dA_only.download(), dA1, 1e-7));

  // Accumulation: a second call adds the same gradients again (dh is overwritten, unchanged).
  expand_bw();
  shrink_bw();
  stream.synchronize();
  EXPECT_TRUE(all_close(label + "dh second call", d_dh.download(), dh_cpu, kGradRtol));
  EXPECT_TRUE(all_close(label + "dB doubled", d_dB.download(), times(dB1, 2.0f), 1e-6));
  EXPECT_TRUE(all_close(label + "dA doubled", d_dA.download(), times(dA1, 2.0f), 1e-6));
  EXPECT_TRUE(all_close(label + "dx twice", download_floats(d_dx), dx_cpu2, dtype_rtol<T>()));
}

TYPED_TEST(CudaLoraBackward, MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 500;
  for (const Scenario& sc :
       {mixed_scenario("odd", 133, 75, 128, 75), mixed_scenario("aligned", 256, 192, 64, 0),
        mixed_scenario("rank9", 20, 36, 9, 36), decode_scenario(1024, 1536, 64), wide_scenario()}) {
    check_backward<TypeParam>(sc, seed += 20);
  }
}

// Segments taller than a row chunk: the weight gradients go through per-chunk partial sums and
// the ordered reduction (and still accumulate).
TYPED_TEST(CudaLoraBackward, TallSegmentsMatchCpu) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 900;
  for (const char* name : {"train2048", "train_ragged", "train9000", "tiles"}) {
    check_backward<TypeParam>(tall_scenario(name), seed += 20);
  }
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
