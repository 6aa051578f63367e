// The rendezvous stores and the group factory (cluster/all_reduce.h). Gloo's and NCCL's sums are
// gloo_all_reduce.cpp and nccl_all_reduce.cpp.

#include "spindle/cluster/all_reduce.h"

#include <thread>

#include "all_reduce_impl.h"
#include "spindle/core/error.h"

namespace spindle::cluster {

void MemoryStore::set(const std::string& key, const std::string& value) {
  std::lock_guard lock(mutex_);
  values_[key] = value;
}

std::optional<std::string> MemoryStore::get(const std::string& key) {
  std::lock_guard lock(mutex_);
  const auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

void MemoryStore::erase_group(const std::string& group) {
  std::lock_guard lock(mutex_);
  const std::string prefix = group + "/";
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.starts_with(prefix);)
    it = values_.erase(it);
}

size_t MemoryStore::size() const {
  std::lock_guard lock(mutex_);
  return values_.size();
}

void GroupOptions::validate() const {
  SPINDLE_CHECK(!group.empty() && group.find('/') == std::string::npos, invalid_argument,
                "data-parallel group name '{}': must be non-empty and without '/'", group);
  SPINDLE_CHECK(size >= 1 && size <= 1024, invalid_argument,
                "data-parallel group '{}': size {} outside 1..1024", group, size);
  SPINDLE_CHECK(rank >= 0 && rank < size, invalid_argument,
                "data-parallel group '{}': rank {} outside 0..{}", group, rank, size - 1);
  SPINDLE_CHECK(timeout.count() > 0, invalid_argument,
                "data-parallel group '{}': timeout must be > 0 ms", group);
}

std::string wait_for_key(RendezvousStore& store, const std::string& key,
                         std::chrono::milliseconds timeout, const std::string& who) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (std::optional<std::string> v = store.get(key)) return std::move(*v);
    SPINDLE_CHECK(std::chrono::steady_clock::now() < deadline, io,
                  "{}: '{}' did not appear in the rendezvous store within {} ms (a rank of the "
                  "group never arrived)",
                  who, key, timeout.count());
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

std::unique_ptr<AllReduce> make_all_reduce(std::shared_ptr<RendezvousStore> store,
                                           GroupOptions options) {
  options.validate();
  SPINDLE_CHECK(store != nullptr, invalid_argument, "data-parallel group '{}': no rendezvous store",
                options.group);
  if (options.cuda_device < 0) return detail::make_gloo(std::move(store), std::move(options));
  return detail::make_nccl(std::move(store), std::move(options));
}

}  // namespace spindle::cluster
