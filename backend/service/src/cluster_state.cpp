#include "cluster_state.h"

#include "daemon_state.h"

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

std::vector<std::string> ClusterState::ask(std::string_view kind, std::vector<std::string> frames,
                                           const std::string& what, ErrorCode on_fail,
                                           ReplyChannel& wake, std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<std::vector<std::string>>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(mutex_);
    asks_.push_back({next_ask_++, std::string(kind), std::move(frames), what, on_fail, promise});
  }
  wake.wake();
  if (future.wait_for(timeout) != std::future_status::ready) {
    throw Error(on_fail, fmt::format("{}: the coordinator did not answer within {} ms", what,
                                     timeout.count()));
  }
  return future.get();
}

std::vector<ClusterState::Ask> ClusterState::take_asks() {
  std::lock_guard lock(mutex_);
  return std::exchange(asks_, {});
}

// The answer: [code][bytes | message], code "" = the blob.
std::string ClusterState::fetch_blob(const std::string& blob, ReplyChannel& wake,
                                     std::chrono::milliseconds timeout) {
  const std::string what = "blob " + blob;
  std::vector<std::string> a =
      ask(cluster_wire::kBlobGet, {blob}, what, ErrorCode::resource, wake, timeout);
  SPINDLE_CHECK(a.size() == 2, format, "{}: the coordinator's answer has {} frames, expected 2",
                what, a.size());
  if (!a[0].empty()) throw Error(error_code_of(a[0]), "the coordinator: " + a[1]);
  return std::move(a[1]);
}

// The answer: [found "1" | "0"][value].
std::optional<std::string> ClusterState::store_call(bool set, const std::string& key,
                                                    const std::string& value, ReplyChannel& wake,
                                                    std::chrono::milliseconds timeout) {
  std::vector<std::string> frames = {key};
  if (set) frames.push_back(value);
  const std::string what = fmt::format("rendezvous {} of '{}'", set ? "set" : "lookup", key);
  std::vector<std::string> a = ask(set ? cluster_wire::kStoreSet : cluster_wire::kStoreGet,
                                   std::move(frames), what, ErrorCode::io, wake, timeout);
  SPINDLE_CHECK(a.size() == 2, io, "{}: the coordinator's answer has {} frames, expected 2", what,
                a.size());
  if (a[0] != "1") return std::nullopt;
  return std::move(a[1]);
}

}  // namespace spindle::service
