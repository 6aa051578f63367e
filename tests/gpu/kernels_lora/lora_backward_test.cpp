// GPU SGMV LoRA backward against the CPU kernels on the same inputs, both dtypes and both paths
// (the hand-written kernels; cuBLAS GEMMs for calls whose adapted segments are all tall, given
// host mirrors of the tables): dh overwritten only for adapted rows, dB/dA reduced over every
// segment of a slot (slots recurring in non-adjacent segments, decode batches), accumulation (a
// second call doubles the gradients and adds dx again), dx == nullptr, and bitwise-equal
// results run to run.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "spindle/kernels/cuda/gemm.h"
#include "spindle/kernels/lora_plan.h"

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

// Whether the GEMM path should take the call, from the contract (independent of plan_lora):
// some adapted rows, and every adapted segment at least kLoraGemmMinRows tall.
bool expect_gemm(const Scenario& sc) {
  bool any = false, all_tall = true;
  for (const LoraSegment& g : sc.segments) {
    if (g.slot < 0 || g.row_end == g.row_begin || sc.ranks[size_t(g.slot)] == 0) continue;
    any = true;
    all_tall = all_tall && g.row_end - g.row_begin >= kLoraGemmMinRows;
  }
  return any && all_tall;
}

// host_tables: give the call host mirrors (and a cuBLAS handle), so tall calls take the GEMM
// path; without them every call runs the kernels.
template <class T>
void check_backward(const Scenario& sc, uint32_t seed, bool host_tables) {
  const std::string label =
      sc.name + " " + dtype_name<T>() + (host_tables ? " (host tables) " : " (kernels) ");
  const HostLora hl = make_host_lora(sc, seed);
  DeviceLora dl = make_device_lora(sc, hl);
  Blas blas;
  Blas* blas_ptr = nullptr;
  if (host_tables) {
    dl.slots.host_rank = hl.rank.data();
    dl.slots.host_scale = hl.scale.data();
    dl.segments.host = sc.segments.data();
    blas_ptr = &blas;
  }
  EXPECT_EQ(lora_backward_uses_gemm(dl.slots, dl.segments), host_tables && expect_gemm(sc))
      << label;
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
  const size_t scratch_bytes = lora_backward_scratch_bytes<T>(dl.slots, dl.segments, host_tables);
  DeviceBuffer<unsigned char> partials(scratch_bytes);
  const auto expand_bw = [&] {
    lora_expand_backward<T>(d_h.data(), d_dy.data(), ld_dy, sc.col_offset, dl.slots, dl.segments,
                            d_dh.data(), d_dB.data(), partials.data(), scratch_bytes, stream.get(),
                            blas_ptr);
  };
  const auto shrink_bw = [&] {
    lora_shrink_backward<T>(d_x.data(), sc.ld_x, d_dh_in.data(), dl.slots, dl.segments, d_dA.data(),
                            d_dx.data(), ld_dx, partials.data(), scratch_bytes, stream.get(),
                            blas_ptr);
  };

  expand_bw();
  shrink_bw();
  lora_shrink_backward<T>(d_x.data(), sc.ld_x, d_dh_in.data(), dl.slots, dl.segments,
                          d_dA_only.data(), nullptr, ld_dx, partials.data(), scratch_bytes,
                          stream.get(), blas_ptr);
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

  // Run to run: the same call into fresh gradients gives the first call's bits.
  d_dB = upload_vec(std::vector<float>(dB_size, 0.0f));
  d_dA = upload_vec(std::vector<float>(dA_size, 0.0f));
  fence_uploads();
  expand_bw();
  shrink_bw();
  stream.synchronize();
  EXPECT_EQ(d_dB.download(), dB1) << label << "dB run to run";
  EXPECT_EQ(d_dA.download(), dA1) << label << "dA run to run";
}

TYPED_TEST(CudaLoraBackward, MatchesCpu) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 500;
  for (const Scenario& sc :
       {mixed_scenario("odd", 133, 75, 128, 75), mixed_scenario("aligned", 256, 192, 64, 0),
        mixed_scenario("rank9", 20, 36, 9, 36), decode_scenario(1024, 1536, 64), wide_scenario()}) {
    seed += 20;
    for (const bool host_tables : {false, true}) check_backward<TypeParam>(sc, seed, host_tables);
  }
}

// Segments taller than a row chunk: the kernels' weight gradients go through per-chunk partial
// sums and the ordered reduction (and still accumulate); with host tables the all-tall ones
// ("train2048", "train_ragged", "train9000") run as cuBLAS GEMMs, "tiles" (short segments)
// stays on the kernels.
TYPED_TEST(CudaLoraBackward, TallSegmentsMatchCpu) {
  SPINDLE_REQUIRE_GPU();
  uint32_t seed = 900;
  for (const char* name : {"train2048", "train_ragged", "train9000", "tiles"}) {
    seed += 20;
    for (const bool host_tables : {false, true}) {
      check_backward<TypeParam>(tall_scenario(name), seed, host_tables);
    }
  }
}

// The path is chosen on the host from the mirrors alone (no device call), so this runs without
// a GPU: the GEMM path needs the host tables and all-tall adapted segments; base-only, empty
// and rank-0 segments do not count; its scratch is the widened rows in bf16 mode, none in fp32;
// host segments that break the contract are refused naming the kernel.
TYPED_TEST(CudaLoraBackward, GemmPathIsChosenOnTheHost) {
  using T = TypeParam;
  auto* fake_seg = reinterpret_cast<const LoraSegment*>(uintptr_t{0x1000});
  auto* fake_f = reinterpret_cast<float*>(uintptr_t{0x3000});
  const std::vector<int32_t> rank{16, 0, 4};
  const std::vector<float> scale{2.0f, 1.0f, 0.5f};
  DeviceLoraSlots slots{fake_f, fake_f, reinterpret_cast<const int32_t*>(fake_f), fake_f, 3, 16,
                        40,     24};
  const auto uses = [&](std::vector<LoraSegment> host, int64_t rows, bool mirrors = true) {
    DeviceLoraSlots s = slots;
    if (mirrors) {
      s.host_rank = rank.data();
      s.host_scale = scale.data();
    }
    const DeviceSegments segs{fake_seg, int32_t(host.size()), rows, host.data()};
    return lora_backward_uses_gemm(s, segs);
  };
  const int64_t tall = kLoraGemmMinRows;
  EXPECT_TRUE(uses({{0, tall, 0}}, tall));
  EXPECT_FALSE(uses({{0, tall, 0}}, tall, /*mirrors=*/false));
  EXPECT_FALSE(uses({{0, tall - 1, 0}}, tall));                       // one short segment
  EXPECT_FALSE(uses({{0, tall, 0}, {tall, tall + 1, 2}}, tall + 1));  // tall and short mixed
  // Short base-only, empty and rank-0 segments are no adapted work.
  EXPECT_TRUE(uses({{0, 3, -1}, {3, 3, 2}, {3, 5, 1}, {5, 5 + tall, 2}}, 5 + tall));
  EXPECT_FALSE(uses({{0, 3, -1}, {3, 9, 1}}, 9));  // no adapted rows: nothing to run
  {
    std::vector<LoraSegment> host{{0, tall, 0}};
    const DeviceSegments segs{fake_seg, 1, tall};  // no host segments
    DeviceLoraSlots s = slots;
    s.host_rank = rank.data();
    s.host_scale = scale.data();
    EXPECT_FALSE(lora_backward_uses_gemm(s, segs));
  }

  // Scratch: the GEMM path widens rows x max(d_in, d_out) in bf16 mode (one tile here); fp32
  // reads in place. Without a handle the same call runs the kernels and needs their partials.
  std::vector<LoraSegment> host{{0, 100, 0}, {100, 130, 2}};
  DeviceLoraSlots s = slots;
  s.host_rank = rank.data();
  s.host_scale = scale.data();
  const DeviceSegments segs{fake_seg, 2, 130, host.data()};
  ASSERT_TRUE(lora_backward_uses_gemm(s, segs));
  const size_t want = std::is_same_v<T, float> ? 0 : size_t{130} * 40 * sizeof(float);
  EXPECT_EQ(lora_backward_scratch_bytes<T>(s, segs, /*with_blas=*/true), want);
  EXPECT_EQ(lora_backward_scratch_bytes<T>(s, segs), lora_backward_scratch_bytes<T>(slots, segs));
  EXPECT_GT(lora_backward_scratch_bytes<T>(s, segs), 0u);
  // A vocabulary-wide bf16 call (the unembedding's d_out) widens bounded row tiles, not all rows.
  DeviceLoraSlots vocab = s;
  vocab.d_out = 151936;
  const DeviceSegments tall_rows{fake_seg, 2, 4096, host.data()};
  if (!std::is_same_v<T, float>) {
    EXPECT_LE(lora_backward_scratch_bytes<T>(vocab, tall_rows, true), size_t{64} << 20);
    EXPECT_GE(lora_backward_scratch_bytes<T>(vocab, tall_rows, true),
              size_t{kLoraGemmMinRows} * 151936 * sizeof(float));
  }

  // Host segments out of order, or a slot past the table, are refused (plan_lora's checks).
  std::vector<LoraSegment> bad{{50, 100, 0}, {0, 50, 2}};
  const DeviceSegments bad_segs{fake_seg, 2, 100, bad.data()};
  EXPECT_THROW(lora_backward_uses_gemm(s, bad_segs), std::invalid_argument);
  std::vector<LoraSegment> past{{0, 40, 3}};
  const DeviceSegments past_segs{fake_seg, 1, 40, past.data()};
  EXPECT_THROW(lora_backward_uses_gemm(s, past_segs), std::invalid_argument);
  const DeviceSegments short_rows{fake_seg, 2, 129, host.data()};  // ends at 130
  EXPECT_THROW(lora_backward_uses_gemm(s, short_rows), std::invalid_argument);
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
