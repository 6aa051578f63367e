#pragma once
// The two AllReduce implementations behind make_all_reduce (cluster/all_reduce.h).

#include <memory>

#include "spindle/cluster/all_reduce.h"

namespace spindle::cluster::detail {

std::unique_ptr<AllReduce> make_gloo(std::shared_ptr<RendezvousStore> store, GroupOptions options);
// Throws unsupported when this build has no CUDA.
std::unique_ptr<AllReduce> make_nccl(std::shared_ptr<RendezvousStore> store, GroupOptions options);

}  // namespace spindle::cluster::detail
