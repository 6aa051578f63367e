#include "cluster_state.h"

#include "spindle/core/error.h"

namespace spindle::service {

Role role_from_name(const std::string& name) {
  if (name == "standalone") return Role::standalone;
  if (name == "coordinator") return Role::coordinator;
  if (name == "worker") return Role::worker;
  SPINDLE_THROW(invalid_argument, "--role '{}': expected standalone, coordinator or worker", name);
}

const char* role_name(Role role) {
  switch (role) {
    case Role::standalone: return "standalone";
    case Role::coordinator: return "coordinator";
    case Role::worker: return "worker";
  }
  return "?";
}

void ClusterState::set_live(uint32_t worker, const std::string& base, bool live) {
  std::lock_guard lock(mutex_);
  const auto it = live_.find(worker);
  if (live == (it != live_.end())) return;
  if (live) {
    live_.emplace(worker, base);
    ++served_[base];
  } else {
    if (--served_[it->second] == 0) served_.erase(it->second);
    live_.erase(it);
  }
}

bool ClusterState::serves(const std::string& base) const {
  std::lock_guard lock(mutex_);
  return served_.count(base) != 0;
}

bool ClusterState::alive(uint32_t worker) const {
  std::lock_guard lock(mutex_);
  return live_.count(worker) != 0;
}

void ClusterState::post(Forward f, ReplyChannel& wake) {
  {
    std::lock_guard lock(mutex_);
    forwards_.push_back(std::move(f));
  }
  wake.wake();
}

void ClusterState::post_all(std::vector<Forward> fs, ReplyChannel& wake) {
  {
    std::lock_guard lock(mutex_);
    for (Forward& f : fs) forwards_.push_back(std::move(f));
  }
  wake.wake();
}

std::deque<Forward> ClusterState::take_forwards() {
  std::lock_guard lock(mutex_);
  return std::exchange(forwards_, {});
}

std::string ClusterState::fetch_blob(const std::string& blob, ReplyChannel& wake,
                                     std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> future = promise->get_future();
  {
    std::lock_guard lock(mutex_);
    fetches_.push_back({next_fetch_++, blob, promise});
  }
  wake.wake();
  SPINDLE_CHECK(future.wait_for(timeout) == std::future_status::ready, resource,
                "blob {}: the coordinator did not send it within {} ms", blob, timeout.count());
  return future.get();
}

std::vector<ClusterState::BlobFetch> ClusterState::take_fetches() {
  std::lock_guard lock(mutex_);
  return std::exchange(fetches_, {});
}

std::optional<std::string> ClusterState::store_call(bool set, const std::string& key,
                                                    const std::string& value, ReplyChannel& wake,
                                                    std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<std::optional<std::string>>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(mutex_);
    store_calls_.push_back({next_fetch_++, set, key, value, promise});
  }
  wake.wake();
  SPINDLE_CHECK(future.wait_for(timeout) == std::future_status::ready, io,
                "the coordinator did not answer a rendezvous {} of '{}' within {} ms",
                set ? "set" : "lookup", key, timeout.count());
  return future.get();
}

std::vector<ClusterState::StoreCall> ClusterState::take_store_calls() {
  std::lock_guard lock(mutex_);
  return std::exchange(store_calls_, {});
}

}  // namespace spindle::service
