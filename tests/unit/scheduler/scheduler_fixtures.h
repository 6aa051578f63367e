#pragma once
// Shared by the scheduler tests: a real engine (small random model or stories260K) on the
// execution backend under test, a serving pool behind a real HostCache + Loader +
// ResidencyManager whose load function hands out prepared adapters (optionally held back, or
// failing), and engine::Generator run alone ON THE CPU as the independent reference a scheduled
// request must match.
//
// One test body per behaviour, every backend: device_under_test.h.

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../model/model_fixtures.h"
#include "spindle/adapters/residency.h"
#include "spindle/core/error.h"
#include "spindle/engine/generator.h"
#include "device_under_test.h"
#include "spindle/scheduler/scheduler.h"

namespace spindle::scheduler::testing {

using namespace std::chrono_literals;

inline constexpr engine::LoraTarget kAllTargets[] = {
    engine::LoraTarget::q,    engine::LoraTarget::k,  engine::LoraTarget::v,
    engine::LoraTarget::o,    engine::LoraTarget::gate, engine::LoraTarget::up,
    engine::LoraTarget::down, engine::LoraTarget::lm_head};

// Adapters by id for the loader. Ids in `held` block until released; ids in `failing` throw
// Error(not_found) (after release, if also held); unknown ids throw not_found too.
class AdapterSource {
 public:
  void add(const std::string& id, engine::LoraWeights w) {
    std::lock_guard lock(mutex_);
    adapters_[id] = std::make_shared<const engine::LoraWeights>(std::move(w));
  }
  std::shared_ptr<const engine::LoraWeights> get(const std::string& id) {
    std::lock_guard lock(mutex_);
    return adapters_.at(id);
  }
  void hold(const std::string& id) {
    std::lock_guard lock(mutex_);
    held_.insert(id);
  }
  void release(const std::string& id) {
    std::lock_guard lock(mutex_);
    held_.erase(id);
    cv_.notify_all();
  }
  void release_all() {
    std::lock_guard lock(mutex_);
    held_.clear();
    cv_.notify_all();
  }
  // Blocks until a load of `id` has started (it is then waiting on its hold).
  bool wait_started(const std::string& id) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, 60s, [&] { return started_.count(id) != 0; });
  }
  adapters::AdapterPtr load(const std::string& id) {
    std::unique_lock lock(mutex_);
    started_.insert(id);
    cv_.notify_all();
    cv_.wait(lock, [&] { return held_.count(id) == 0; });
    auto it = adapters_.find(id);
    if (it == adapters_.end()) throw Error(ErrorCode::not_found, "no revision '" + id + "'");
    return it->second;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, adapters::AdapterPtr> adapters_;
  std::set<std::string> held_;
  std::set<std::string> started_;
};

struct EnvOptions {
  int32_t serving_slots = 4;
  int32_t max_rank = 8;
};

// Model + serving tiers. Construct in place (the model refers to the weights by address).
struct Env {
  Env(engine::ModelWeights weights_in, EnvOptions options = {})
      : weights(std::move(weights_in)),
        model(weights),
        backend(spindle::testing::backend_under_test(weights)),
        pool_options{.max_slots = options.serving_slots, .max_rank = options.max_rank},
        pool_ptr(backend->make_slot_pool(pool_options)),
        pool(*pool_ptr),
        cache(64u << 20),
        loader(cache, [this](const std::string& id) { return source.load(id); },
               {.threads = 2, .thread_nice = 0}),
        residency(pool, cache, loader) {}
  ~Env() { source.release_all(); }  // the loader's destructor waits for running loads

  // An adapter in the source (cold) and optionally the host cache (warm).
  const engine::LoraWeights& add_adapter(const std::string& id, int64_t rank, uint64_t seed,
                                         bool warm = false) {
    source.add(id, engine::LoraWeights::random(weights.config, rank, 2.0f * float(rank),
                                               kAllTargets, seed, 0.3f, 0.3f));
    if (warm) cache.insert(id, source.get(id));
    return *source.get(id);
  }

  // engine::Generator alone on a fresh cache, the adapter (if any) in a pool of the same shape.
  std::vector<engine::Completion> alone(const SampleJob& job,
                                        const engine::Tokenizer* tokenizer = nullptr) {
    engine::LoraSlotPool solo_pool(weights.config, pool_options);
    int32_t slot = -1;
    if (!job.adapter_key.empty()) {
      solo_pool.load(0, *source.get(job.adapter_key));
      slot = 0;
    }
    engine::KvCache kv(weights.config,
                       {.block_size = 16, .n_blocks = 0, .max_seqs = job.num_samples + 1});
    engine::Generator gen(model, kv, &solo_pool, tokenizer);
    engine::GenerationRequest r;
    r.prompt = job.prompt;
    r.slot = slot;
    r.num_samples = job.num_samples;
    r.params = job.params;
    return gen.generate({r}).at(0);
  }

  engine::ModelWeights weights;
  engine::Model model;  // the CPU reference
  std::unique_ptr<engine::ExecutionBackend> backend;  // under test
  engine::LoraPoolOptions pool_options;
  std::unique_ptr<engine::SlotPool> pool_ptr;
  engine::SlotPool& pool;  // the serving pool, on the backend's device
  AdapterSource source;
  adapters::HostCache cache;
  adapters::Loader loader;
  adapters::ResidencyManager residency;
};

// The tiny Qwen3 shape; head_dim 16 off the CPU (the CUDA attention kernels take multiples of
// 8), 12 on it (head_dim decoupled from dim, as the CPU tests have always run).
inline std::unique_ptr<Env> tiny_env(EnvOptions options = {}, uint64_t seed = 31) {
  engine::ModelConfig c = spindle::testing::tiny_config(engine::Arch::qwen3);
  if (!spindle::testing::testing_cpu()) c.head_dim = 16;
  return std::make_unique<Env>(spindle::testing::random_weights(c, seed), options);
}

// A job's outcome as a future: `done` fulfils it.
template <class T>
struct Waiter {
  std::shared_ptr<std::promise<Outcome<T>>> promise = std::make_shared<std::promise<Outcome<T>>>();
  std::future<Outcome<T>> future = promise->get_future();
  std::function<void(Outcome<T>)> callback() {
    auto p = promise;
    return [p](Outcome<T> o) { p->set_value(std::move(o)); };
  }
  // The outcome, or a failed test after a minute (never a hang).
  Outcome<T> get() {
    if (future.wait_for(60s) != std::future_status::ready) {
      ADD_FAILURE() << "job did not complete within 60 s";
      return Outcome<T>{std::nullopt, {ErrorCode::internal, "timeout"}};
    }
    return future.get();
  }
  bool ready() { return future.wait_for(0s) == std::future_status::ready; }
};

using SampleWaiter = Waiter<std::vector<engine::Completion>>;

// Holds the engine thread inside a completion callback until open(): jobs submitted meanwhile
// all reach the engine in one intake (so their admission order, or merging, is deterministic).
class Gate {
 public:
  explicit Gate(Scheduler& s) {
    LogprobsJob job;
    job.tenant = "gate";
    job.tokens = {1, 2};
    auto opened = opened_.get_future().share();
    auto entered = entered_;
    job.done = [opened, entered](Outcome<std::vector<float>>) {
      entered->set_value();
      opened.wait();
    };
    EXPECT_TRUE(s.submit_logprobs(std::move(job)));
    EXPECT_EQ(entered_->get_future().wait_for(60s), std::future_status::ready);
  }
  ~Gate() { open(); }
  void open() {
    if (!is_open_) opened_.set_value();
    is_open_ = true;
  }

 private:
  std::promise<void> opened_;
  std::shared_ptr<std::promise<void>> entered_ = std::make_shared<std::promise<void>>();
  bool is_open_ = false;
};

// Returns once the engine has published stats covering every job that completed before the
// call: stats() is refreshed after each loop iteration, and a job submitted now is taken in
// only at the start of a later iteration.
inline void settle(Scheduler& s) {
  Waiter<std::vector<float>> w;
  LogprobsJob job;
  job.tenant = "settle";
  job.tokens = {1};
  job.done = w.callback();
  EXPECT_TRUE(s.submit_logprobs(std::move(job)));
  w.get();
}

inline void expect_same(const std::vector<engine::Completion>& got,
                        const std::vector<engine::Completion>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t n = 0; n < want.size(); ++n) {
    EXPECT_EQ(got[n].tokens, want[n].tokens) << what << " sample " << n;
    EXPECT_EQ(got[n].stop_reason, want[n].stop_reason) << what << " sample " << n;
    EXPECT_EQ(got[n].text, want[n].text) << what << " sample " << n;
    ASSERT_EQ(got[n].logprobs.size(), want[n].logprobs.size()) << what;
    for (size_t t = 0; t < want[n].logprobs.size(); ++t)
      EXPECT_NEAR(got[n].logprobs[t], want[n].logprobs[t], 1e-4f) << what << " token " << t;
  }
}

}  // namespace spindle::scheduler::testing
