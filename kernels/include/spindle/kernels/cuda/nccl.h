#pragma once
// NCCL communicator for data-parallel LoRA training and revision broadcast. The coordinator
// creates a unique id (nccl_unique_id) and hands its bytes to every rank; each rank constructs
// a Communicator with (id, n_ranks, rank) on its own device. Collectives are enqueued on the
// given stream (asynchronous). NCCL errors throw CudaError naming the call and ncclGetErrorString.

#include <array>
#include <cstdint>
#include <span>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::kernels::cuda {

using NcclId = std::array<char, 128>;  // ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES)

NcclId nccl_unique_id();

class Communicator {
 public:
  // Blocks until all n_ranks ranks have joined (ncclCommInitRank). device: CUDA device index.
  Communicator(const NcclId& id, int n_ranks, int rank, int device);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return n_ranks_; }

  // In-place sum (average = true divides by size()) of `count` fp32 elements: one policy's
  // LoRA gradients across data-parallel ranks.
  void all_reduce(float* data, int64_t count, bool average, cudaStream_t stream);
  // The same over several buffers in one NCCL group (one launch for a whole adapter's
  // gradients): buffers[i] holds counts[i] elements.
  void all_reduce_many(std::span<float* const> buffers, std::span<const int64_t> counts,
                       bool average, cudaStream_t stream);
  // In-place broadcast of `bytes` bytes from `root`: a fresh revision to serving GPUs.
  void broadcast(void* data, int64_t bytes, int root, cudaStream_t stream);

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int n_ranks_ = 0;
  int rank_ = 0;
};

}  // namespace spindle::kernels::cuda
