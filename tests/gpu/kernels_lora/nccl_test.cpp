// NCCL communicator with one rank on device 0: all_reduce (average and sum) and broadcast leave
// the data unchanged; bad ranks, roots and counts throw std::invalid_argument before NCCL runs.

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "gpu_test_util.h"
#include "spindle/kernels/cuda/nccl.h"

namespace spindle::kernels::cuda::test {
namespace {

// Host-side checks: no device and no NCCL call needed.
TEST(CudaNccl, BadRankThrowsBeforeNccl) {
  const NcclId id{};
  EXPECT_THROW(Communicator(id, 1, 1, 0), std::invalid_argument);
  EXPECT_THROW(Communicator(id, 2, 5, 0), std::invalid_argument);
  EXPECT_THROW(Communicator(id, 2, -1, 0), std::invalid_argument);
  EXPECT_THROW(Communicator(id, 0, 0, 0), std::invalid_argument);
  EXPECT_THROW(Communicator(id, 1, 0, -1), std::invalid_argument);
}

TEST(CudaNccl, SingleRankCollectivesLeaveDataUnchanged) {
  SPINDLE_REQUIRE_GPU();
  const NcclId id = nccl_unique_id();
  Communicator comm(id, /*n_ranks=*/1, /*rank=*/0, /*device=*/0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);

  const std::vector<float> host = random_floats(1001, 3);
  DeviceBuffer<float> buf(host.size());
  buf.upload(host);
  fence_uploads();
  Stream stream;
  comm.all_reduce(buf.data(), int64_t(host.size()), /*average=*/true, stream.get());
  stream.synchronize();
  EXPECT_EQ(buf.download(), host);
  comm.all_reduce(buf.data(), int64_t(host.size()), /*average=*/false, stream.get());
  comm.broadcast(buf.data(), int64_t(host.size() * sizeof(float)), /*root=*/0, stream.get());
  comm.all_reduce(buf.data(), 0, /*average=*/true, stream.get());  // no-op
  stream.synchronize();
  EXPECT_EQ(buf.download(), host);

  EXPECT_THROW(comm.broadcast(buf.data(), 4, /*root=*/1, stream.get()), std::invalid_argument);
  EXPECT_THROW(comm.broadcast(buf.data(), -1, /*root=*/0, stream.get()), std::invalid_argument);
  EXPECT_THROW(comm.all_reduce(buf.data(), -1, true, stream.get()), std::invalid_argument);
  EXPECT_THROW(comm.all_reduce(nullptr, 4, true, stream.get()), std::invalid_argument);
}

}  // namespace
}  // namespace spindle::kernels::cuda::test
