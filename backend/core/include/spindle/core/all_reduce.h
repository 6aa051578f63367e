#pragma once
// A data-parallel group's sum (issue 17): the one interface the engine's trainers use to add up
// one policy's gradients across ranks before a step, with a CPU implementation over Gloo and a
// CUDA one over NCCL (cluster/all_reduce.h makes them). The engine never learns which runs.
//
// Contract:
//   - every rank of the group calls sum() the same number of times, in the same order, with
//     buffers of the same sizes (the trainer's gradient layout: the adapter's tensors in
//     for_each_lora_tensor order), else the group fails or hangs until its timeout;
//   - on return each buffer holds the elementwise sum over the ranks, and every rank holds the
//     same bits (the reduction order depends only on the ranks, so it is also the same run to
//     run);
//   - buffers live in memory() (host, or the CUDA device the group was made for); `stream` is
//     the CUDA stream the sum is ordered after (cudaStream_t, null on the host); sum() returns
//     when the result can be read on the host (host) or is ordered on `stream` (cuda);
//   - a peer that does not arrive within the group's timeout, or a broken connection, throws
//     spindle::Error(io) naming the group, this rank and what failed; the group is then broken
//     and every later sum() throws the same.
//
// Threading: one caller at a time (the engine thread of the rank's backend).

#include <cstdint>
#include <span>
#include <string>

namespace spindle {

class AllReduce {
 public:
  enum class Memory : uint8_t { host, cuda };
  virtual ~AllReduce() = default;
  virtual Memory memory() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& group() const = 0;  // the group's name, for messages
  virtual void sum(std::span<const std::span<float>> buffers, void* stream = nullptr) = 0;
};

}  // namespace spindle
