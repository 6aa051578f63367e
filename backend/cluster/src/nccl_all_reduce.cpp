// NCCL's all-reduce for CUDA ranks (cluster/all_reduce.h): rank 0 makes the unique id and
// publishes it in the group's store, the others wait for it, and every rank joins with
// ncclCommInitRank on its first sum(); a sum is one NCCL group over every buffer, on the
// caller's stream. Without SPINDLE_WITH_CUDA this file only refuses.

#include "all_reduce_impl.h"
#include "spindle/core/error.h"

#ifdef SPINDLE_HAVE_NCCL
#include <cstring>
#include <vector>

#include "spindle/kernels/cuda/nccl.h"
#endif

namespace spindle::cluster::detail {

#ifdef SPINDLE_HAVE_NCCL
namespace {

namespace cuda = kernels::cuda;

class NcclAllReduce final : public GroupBase {
 public:
  NcclAllReduce(std::shared_ptr<RendezvousStore> store, GroupOptions options)
      : GroupBase(std::move(store), options, fmt::format("nccl on cuda:{}", options.cuda_device)) {}
  Memory memory() const override { return Memory::cuda; }

 private:
  void sum_on_transport(std::span<const std::span<float>> buffers, void* stream) override {
    if (!comm_) connect();
    std::vector<float*> data;
    std::vector<int64_t> counts;
    for (const auto& b : buffers) {
      data.push_back(b.data());
      counts.push_back(int64_t(b.size()));
    }
    comm_->all_reduce_many(data, counts, /*average=*/false, static_cast<cudaStream_t>(stream));
  }
  void connect() {
    const std::string key = o_.group + "/nccl/unique_id";
    cuda::NcclId id{};
    if (o_.rank == 0) {
      id = cuda::nccl_unique_id();
      store_->set(key, std::string(id.data(), id.size()));
    } else {
      const std::string bytes = wait_for_key(*store_, key, o_.timeout, who_);
      SPINDLE_CHECK(bytes.size() == id.size(), io, "{}: the unique id has {} bytes, expected {}",
                    who_, bytes.size(), id.size());
      std::memcpy(id.data(), bytes.data(), id.size());
    }
    comm_ = std::make_unique<cuda::Communicator>(id, o_.size, o_.rank, o_.cuda_device);
  }

  std::unique_ptr<cuda::Communicator> comm_;
};

}  // namespace

std::unique_ptr<AllReduce> make_nccl(std::shared_ptr<RendezvousStore> store, GroupOptions options) {
  return std::make_unique<NcclAllReduce>(std::move(store), std::move(options));
}
#else
std::unique_ptr<AllReduce> make_nccl(std::shared_ptr<RendezvousStore>, GroupOptions options) {
  SPINDLE_THROW(unsupported,
                "data-parallel group '{}': NCCL (cuda:{}) needs a build with SPINDLE_WITH_CUDA",
                options.group, options.cuda_device);
}
#endif

}  // namespace spindle::cluster::detail
