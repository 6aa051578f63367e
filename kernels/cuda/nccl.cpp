// NCCL communicator: one per (rank, device); collectives enqueue on the caller's stream.

#include "spindle/kernels/cuda/nccl.h"

#include <nccl.h>

#include <cstring>
#include <string>

#include "spindle/kernels/kernel_error.h"

namespace spindle::kernels::cuda {
namespace {

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclId>,
              "NcclId must hold exactly ncclUniqueId's bytes");

void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) {
    throw CudaError(std::string(what) + ": " + ncclGetErrorString(status));
  }
}

ncclComm_t comm_of(void* comm) {
  return static_cast<ncclComm_t>(comm);
}

}  // namespace

NcclId nccl_unique_id() {
  ncclUniqueId uid;
  check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  NcclId id{};
  std::memcpy(id.data(), &uid, sizeof(uid));
  return id;
}

Communicator::Communicator(const NcclId& id, int n_ranks, int rank, int device)
    : n_ranks_(n_ranks), rank_(rank) {
  SPINDLE_KERNEL_REQUIRE(n_ranks >= 1, "cuda::Communicator", "n_ranks >= 1");
  SPINDLE_KERNEL_REQUIRE(rank >= 0 && rank < n_ranks, "cuda::Communicator",
                         "rank must lie in [0, n_ranks)");
  SPINDLE_KERNEL_REQUIRE(device >= 0, "cuda::Communicator", "device >= 0");
  check(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, n_ranks, uid, rank), "ncclCommInitRank");
  comm_ = comm;
}

Communicator::~Communicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_of(comm_));
}

void Communicator::all_reduce(float* data, int64_t count, bool average, cudaStream_t stream) {
  SPINDLE_KERNEL_REQUIRE(count >= 0, "cuda::Communicator::all_reduce", "count >= 0");
  if (count == 0) return;
  SPINDLE_KERNEL_REQUIRE(data != nullptr, "cuda::Communicator::all_reduce",
                         "data must be non-null");
  check_nccl(ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32,
                           average ? ncclAvg : ncclSum, comm_of(comm_), stream),
             "ncclAllReduce");
}

void Communicator::all_reduce_many(std::span<float* const> buffers, std::span<const int64_t> counts,
                                   bool average, cudaStream_t stream) {
  SPINDLE_KERNEL_REQUIRE(buffers.size() == counts.size(), "cuda::Communicator::all_reduce_many",
                         "one count per buffer");
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  try {
    for (size_t i = 0; i < buffers.size(); ++i) all_reduce(buffers[i], counts[i], average, stream);
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void Communicator::broadcast(void* data, int64_t bytes, int root, cudaStream_t stream) {
  SPINDLE_KERNEL_REQUIRE(bytes >= 0, "cuda::Communicator::broadcast", "bytes >= 0");
  SPINDLE_KERNEL_REQUIRE(root >= 0 && root < n_ranks_, "cuda::Communicator::broadcast",
                         "root must lie in [0, size())");
  if (bytes == 0) return;
  SPINDLE_KERNEL_REQUIRE(data != nullptr, "cuda::Communicator::broadcast", "data must be non-null");
  check_nccl(
      ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclChar, root, comm_of(comm_), stream),
      "ncclBroadcast");
}

}  // namespace spindle::kernels::cuda
