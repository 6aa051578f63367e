#pragma once
// Shared by the residency tests: small adapters of a known size.

#include <functional>
#include <memory>

#include "spindle/engine/lora.h"

namespace spindle::adapters::testing {

// An adapter of exactly 8·k bytes (q: A [1, k], B [k, 1]), values all `value`.
inline std::shared_ptr<const engine::LoraWeights> adapter_of(int64_t k, float value = 1.0f) {
  auto w = std::make_shared<engine::LoraWeights>();
  w->rank = 1;
  w->alpha = 1.0f;
  w->modules.resize(1);
  w->modules[0][0].A = Tensor({1, k});
  w->modules[0][0].A.fill(value);
  w->modules[0][0].B = Tensor({k, 1});
  w->modules[0][0].B.fill(value);
  return w;
}

}  // namespace spindle::adapters::testing

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "spindle/core/error.h"

namespace spindle::adapters::testing {

// A slow adapter source for the loader: each load blocks until the test releases its id (or
// everything), so tests order events with conditions, never sleeps. Ids starting with "bad"
// fail with an io error. `make` builds the adapter (default: adapter_of(4)).
class FakeSource {
 public:
  std::shared_ptr<const engine::LoraWeights> load(const std::string& id) {
    std::unique_lock lock(mutex_);
    ++loads_[id];
    started_.push_back(id);
    cv_.notify_all();
    cv_.wait(lock, [&] { return release_all_ || released_.count(id) != 0; });
    if (id.rfind("bad", 0) == 0) throw Error(ErrorCode::io, "fake source: cannot read " + id);
    return make ? make(id) : adapter_of(4);
  }
  void release(const std::string& id) {
    std::lock_guard lock(mutex_);
    released_.insert(id);
    cv_.notify_all();
  }
  void release_all() {
    std::lock_guard lock(mutex_);
    release_all_ = true;
    cv_.notify_all();
  }
  void wait_started(size_t n) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return started_.size() >= n; });
  }
  int loads(const std::string& id) {
    std::lock_guard lock(mutex_);
    return loads_[id];
  }
  std::vector<std::string> started() {
    std::lock_guard lock(mutex_);
    return started_;
  }
  std::function<std::shared_ptr<const engine::LoraWeights>(const std::string&)> make;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, int> loads_;
  std::set<std::string> released_;
  std::vector<std::string> started_;
  bool release_all_ = false;
};

}  // namespace spindle::adapters::testing
