// The CPU execution backend (backend_cpu.h): thin adapters from the interface onto Model,
// LoraSlotPool, KvCache and LoraTrainer.

#include "spindle/engine/backend_cpu.h"

#include <fstream>
#include <string>
#include <tuple>

#include "spindle/core/error.h"
#include "spindle/engine/kv_cache.h"
#include "spindle/kernels/cpu_features.h"

namespace spindle::engine {
namespace {

// The interface's pools, as this backend's own classes (a pool of another device is the
// caller's error, named).
const LoraSlotPool* cpu_pool(const SlotPool* pool, const char* what) {
  if (pool == nullptr) return nullptr;
  const auto* p = dynamic_cast<const LoraSlotPool*>(pool);
  SPINDLE_CHECK(p != nullptr, invalid_argument,
                "{}: the slot pool is on {}, this backend runs on the cpu", what,
                pool->device().name());
  return p;
}

// "AMD EPYC 9B45" from /proc/cpuinfo's first "model name"; "cpu" where there is none.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "cpu";
}

class CpuRunner final : public BatchRunner {
 public:
  explicit CpuRunner(const Model& model) : model_(model) {}

  LogitsView forward(std::span<const BatchSequence> batch, KvPool& kv, const SlotPool* lora,
                     LogitsFor logits) override {
    SPINDLE_CHECK(logits != LogitsFor::hidden_only, invalid_argument,
                  "BatchRunner::forward: hidden_only logits are for trainers");
    auto* cache = dynamic_cast<KvCache*>(&kv);
    SPINDLE_CHECK(cache != nullptr, invalid_argument,
                  "forward: the KV pool is on {}, this backend runs on the cpu",
                  kv.device().name());
    model_.forward(batch, *cache, cpu_pool(lora, "forward"), state_, {.logits = logits});
    return {state_.logits.data(), state_.logits.dim(0), state_.logits.dim(1)};
  }

 private:
  const Model& model_;
  ForwardState state_;
};

class CpuTrainer final : public Trainer {
 public:
  CpuTrainer(const Model& model, LoraSlotPool& pool) : trainer_(model, pool) {}

  void attach(int32_t slot, LoraWeights weights, AdamW optimizer) override {
    trainer_.attach(slot, std::move(weights), std::move(optimizer));
  }
  void detach(int32_t slot) override { trainer_.detach(slot); }
  bool attached(int32_t slot) const override { return trainer_.attached(slot); }
  ForwardBackwardOutput forward_backward(std::span<const TrainDatum> batch, LossFn fn,
                                         const LossConfig& config) override {
    return trainer_.forward_backward(batch, fn, config);
  }
  ForwardBackwardOutput forward(std::span<const TrainDatum> batch, LossFn fn,
                                const LossConfig& config) override {
    return trainer_.forward(batch, fn, config);
  }
  OptimStepResult optim_step(int32_t slot, const AdamParams& params) override {
    return trainer_.optim_step(slot, params);
  }
  void reduce_gradients(int32_t slot, AllReduce& group) override {
    trainer_.reduce_gradients(slot, group);
  }
  LoraWeights weights(int32_t slot) const override { return trainer_.weights(slot).clone(); }
  std::shared_ptr<const LoraWeights> share_weights(int32_t slot) override {
    return trainer_.share_weights(slot);
  }
  AdamW optimizer(int32_t slot) const override { return trainer_.optimizer(slot).clone(); }
  int64_t step_count(int32_t slot) const override {
    return trainer_.optimizer(slot).step_count();
  }

 private:
  LoraTrainer trainer_;
};

class CpuBackend final : public ExecutionBackend {
 public:
  explicit CpuBackend(const ModelWeights& weights)
      : model_(weights),
        base_bytes_(weights.bytes()),
        device_name_(fmt::format("{} ({})", cpu_model_name(),
                                 kernels::simd_level_name(kernels::simd_level()))) {}

  Device device() const override { return {}; }
  DType dtype() const override { return DType::f32; }
  const ModelConfig& config() const override { return model_.config(); }

  MemoryReport memory() const override {
    MemoryReport r;
    r.device_name = device_name_;
    r.base_bytes = base_bytes_;
    std::tie(r.free_bytes, r.total_bytes) = host_memory_available_total();
    return r;
  }

  std::unique_ptr<SlotPool> make_slot_pool(const LoraPoolOptions& options) override {
    return std::make_unique<LoraSlotPool>(model_.config(), options);
  }
  std::unique_ptr<KvPool> make_kv_pool(const KvCacheOptions& options) override {
    return std::make_unique<KvCache>(model_.config(), options);
  }
  std::unique_ptr<BatchRunner> make_runner() override {
    return std::make_unique<CpuRunner>(model_);
  }
  std::unique_ptr<Trainer> make_trainer(SlotPool& pool) override {
    auto* p = dynamic_cast<LoraSlotPool*>(&pool);
    SPINDLE_CHECK(p != nullptr, invalid_argument,
                  "make_trainer: the slot pool is on {}, this backend runs on the cpu",
                  pool.device().name());
    return std::make_unique<CpuTrainer>(model_, *p);
  }

 private:
  Model model_;
  size_t base_bytes_;        // fixed: the base is never modified
  std::string device_name_;  // read once from /proc/cpuinfo
};

}  // namespace

std::unique_ptr<ExecutionBackend> make_cpu_backend(const ModelWeights& weights) {
  return std::make_unique<CpuBackend>(weights);
}

std::pair<size_t, size_t> host_memory_available_total() {
  std::ifstream in("/proc/meminfo");
  size_t avail = 0, total = 0;
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemAvailable:") avail = kib * 1024;
  }
  return {avail, total};
}

}  // namespace spindle::engine
