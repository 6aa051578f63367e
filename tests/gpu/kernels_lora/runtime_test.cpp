// CUDA runtime helpers: device_count never throws, bf16 conversion rounds to nearest even,
// DeviceBuffer round trips, errors surface as CudaError.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda::test {
namespace {

TEST(CudaRuntime, DeviceCountDoesNotThrow) {
  int n = -1;
  EXPECT_NO_THROW(n = device_count());
  EXPECT_GE(n, 0);
  // A second call sees the same answer (no sticky error left behind by the first).
  EXPECT_EQ(device_count(), n);
}

// Host-only: bf16 conversion needs no device.
TEST(CudaRuntime, Bf16RoundsToNearestEven) {
  const float one = 1.0f;
  const float ulp = std::ldexp(1.0f, -7);            // bf16 spacing in [1, 2)
  const std::vector<float> in = {one + ulp / 2,      // tie, rounds to even (1)
                                 one + 3 * ulp / 2,  // tie, rounds to even (1 + 2 ulp)
                                 one + ulp / 4,      // below half: 1
                                 -2.5f,
                                 0.0f,
                                 65280.0f};
  const std::vector<float> want = {one, one + 2 * ulp, one, -2.5f, 0.0f, 65280.0f};
  const std::vector<bf16> b = to_bf16(in);
  const std::vector<float> back = to_float(b);
  ASSERT_EQ(back.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(back[i], want[i]) << "index " << i;
  const std::vector<float> nan_in = {std::nanf("")};
  const std::vector<bf16> nan_b = to_bf16(nan_in);
  EXPECT_TRUE(std::isnan(to_float(nan_b)[0]));
}

TEST(CudaRuntime, DeviceBufferRoundTrip) {
  SPINDLE_REQUIRE_GPU();
  EXPECT_FALSE(device_name(0).empty());
  const std::vector<float> host = random_floats(1000, 7);
  DeviceBuffer<float> buf(host.size());
  EXPECT_EQ(buf.bytes(), host.size() * sizeof(float));
  buf.upload(host);
  EXPECT_EQ(buf.download(), host);

  DeviceBuffer<float> moved = std::move(buf);
  EXPECT_TRUE(buf.empty());
  EXPECT_EQ(moved.download(), host);

  Stream stream;
  moved.zero(stream.get());
  stream.synchronize();
  EXPECT_EQ(moved.download(), std::vector<float>(host.size(), 0.0f));

  const std::vector<bf16> hb = to_bf16(host);
  DeviceBuffer<bf16> bb(hb.size() + 5);
  bb.upload(hb);
  const std::vector<float> back = to_float(bb.download());
  const std::vector<float> rounded = to_float(hb);
  for (size_t i = 0; i < hb.size(); ++i) EXPECT_EQ(back[i], rounded[i]) << "index " << i;

  DeviceBuffer<int> empty;
  EXPECT_TRUE(empty.download().empty());
  const std::vector<float> too_many(2000, 1.0f);
  EXPECT_THROW(moved.upload(too_many), std::invalid_argument);
}

TEST(CudaRuntime, FailingCallThrowsCudaErrorNamingIt) {
  SPINDLE_REQUIRE_GPU();
  try {
    check(cudaSetDevice(device_count() + 3), "cudaSetDevice(bad)");
    FAIL() << "no CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaSetDevice(bad): "), std::string::npos) << e.what();
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  EXPECT_NO_THROW(check_launch("nothing launched"));
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
