#pragma once
// The two AllReduce implementations behind make_all_reduce (cluster/all_reduce.h), and what they
// share: the group's identity, a group of one summing nothing, and the failure rule (the first
// failure, as Error(io) naming the group and rank, breaks the group for good).

#include <fmt/format.h>

#include <memory>
#include <string>

#include "spindle/cluster/all_reduce.h"
#include "spindle/core/error.h"

namespace spindle::cluster::detail {

class GroupBase : public AllReduce {
 public:
  // transport: "gloo", "nccl on cuda:0", for messages.
  GroupBase(std::shared_ptr<RendezvousStore> store, GroupOptions options,
            const std::string& transport)
      : store_(std::move(store)), o_(std::move(options)) {
    who_ = fmt::format("data-parallel group '{}' (rank {} of {}, {})", o_.group, o_.rank, o_.size,
                       transport);
  }
  int rank() const override { return o_.rank; }
  int size() const override { return o_.size; }
  const std::string& group() const override { return o_.group; }

  void sum(std::span<const std::span<float>> buffers, void* stream) final {
    SPINDLE_CHECK(broken_.empty(), io, "{} is broken by an earlier failure: {}", who_, broken_);
    if (o_.size == 1) return;
    try {
      sum_on_transport(buffers, stream);
    } catch (const Error& e) {
      broken_ = e.what();
      throw;
    } catch (const std::exception& e) {  // gloo::Exception and its enforce failures; CudaError
      broken_ = e.what();
      SPINDLE_THROW(io, "{}: {}", who_, e.what());
    }
  }

 protected:
  // The sum of a group of two or more; connects on its first call.
  virtual void sum_on_transport(std::span<const std::span<float>> buffers, void* stream) = 0;

  std::shared_ptr<RendezvousStore> store_;
  GroupOptions o_;
  std::string who_;

 private:
  std::string broken_;  // "" = usable
};

std::unique_ptr<AllReduce> make_gloo(std::shared_ptr<RendezvousStore> store, GroupOptions options);
// Throws unsupported when this build has no CUDA.
std::unique_ptr<AllReduce> make_nccl(std::shared_ptr<RendezvousStore> store, GroupOptions options);

}  // namespace spindle::cluster::detail
