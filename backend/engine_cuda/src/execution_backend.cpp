// The CUDA execution backend (execution_backend.h): the interface's calls onto DeviceModel,
// DeviceLoraPool, DeviceKvCache and DeviceTrainer, each behind the error boundary.

#include "spindle/engine_cuda/execution_backend.h"

#include <fmt/format.h>

#include "spindle/core/error.h"
#include "spindle/engine_cuda/device_errors.h"
#include "spindle/engine_cuda/device_model.h"
#include "spindle/engine_cuda/trainer.h"

namespace spindle::engine_cuda {
namespace {

namespace cuda = kernels::cuda;

template <class T, class Base>
T* own(Base* p, const engine::Device& device, const char* what) {
  if (p == nullptr) return nullptr;
  auto* q = dynamic_cast<T*>(p);
  SPINDLE_CHECK(
      q != nullptr && p->device() == device, invalid_argument,
      "{}: the {} is on {}, this backend runs on {}", what,
      std::is_base_of_v<engine::KvPool, std::remove_const_t<Base>> ? "KV pool" : "slot pool",
      p->device().name(), device.name());
  return q;
}

class CudaRunner final : public engine::BatchRunner {
 public:
  CudaRunner(DeviceModel& model, engine::Device device, bool use_graph)
      : model_(model), device_(device), use_graph_(use_graph) {}

  engine::LogitsView forward(std::span<const engine::BatchSequence> batch, engine::KvPool& kv,
                             const engine::SlotPool* lora, engine::LogitsFor logits) override {
    SPINDLE_CHECK(logits != engine::LogitsFor::hidden_only, invalid_argument,
                  "BatchRunner::forward: hidden_only logits are for trainers");
    auto* cache = own<DeviceKvCache>(&kv, device_, "forward");
    const auto* pool = own<const DeviceLoraPool>(lora, device_, "forward");
    return device_call(
        device_, [&] { return fmt::format("running a forward over {} sequences", batch.size()); },
        [&] {
          model_.forward(batch, *cache, pool, state_,
                         {.logits = logits, .copy_logits = true, .use_graph = use_graph_});
          const Tensor& h = state_.host_logits;
          return engine::LogitsView{h.data(), h.dim(0), h.dim(1)};
        });
  }

 private:
  DeviceModel& model_;
  engine::Device device_;
  bool use_graph_;
  DeviceForwardState state_;
};

class CudaTrainer final : public engine::Trainer {
 public:
  CudaTrainer(DeviceModel& model, DeviceLoraPool& pool, engine::Device device)
      : device_(device), trainer_(device_call(device, "creating a trainer", [&] {
          return std::make_unique<DeviceTrainer>(model, pool);
        })) {}

  void attach(int32_t slot, engine::LoraWeights weights, engine::AdamW optimizer) override {
    device_call(
        device_,
        [&] {
          return fmt::format("attaching an adapter of rank {} to slot {}", weights.rank, slot);
        },
        [&] { trainer_->attach(slot, weights, optimizer); });
  }
  void detach(int32_t slot) override {
    device_call(
        device_, [&] { return fmt::format("detaching slot {}", slot); },
        [&] { trainer_->detach(slot); });
  }
  bool attached(int32_t slot) const override {
    return device_call(
        device_, [&] { return fmt::format("querying slot {}", slot); },
        [&] { return trainer_->attached(slot); });
  }
  engine::ForwardBackwardOutput forward_backward(std::span<const engine::TrainDatum> batch,
                                                 engine::LossFn fn,
                                                 const engine::LossConfig& config) override {
    return device_call(
        device_, [&] { return fmt::format("forward_backward over {} data", batch.size()); },
        [&] { return trainer_->forward_backward(batch, fn, config); });
  }
  engine::ForwardBackwardOutput forward(std::span<const engine::TrainDatum> batch,
                                        engine::LossFn fn,
                                        const engine::LossConfig& config) override {
    return device_call(
        device_, [&] { return fmt::format("a training forward over {} data", batch.size()); },
        [&] { return trainer_->forward(batch, fn, config); });
  }
  engine::OptimStepResult optim_step(int32_t slot, const engine::AdamParams& params) override {
    return device_call(
        device_, [&] { return fmt::format("optim_step of slot {}", slot); },
        [&] { return trainer_->optim_step(slot, params); });
  }
  void reduce_gradients(int32_t slot, AllReduce& group) override {
    device_call(
        device_, [&] { return fmt::format("the data-parallel gradient sum of slot {}", slot); },
        [&] { trainer_->reduce_gradients(slot, group); });
  }
  engine::LoraWeights weights(int32_t slot) const override {
    return device_call(
        device_, [&] { return fmt::format("downloading the weights of slot {}", slot); },
        [&] { return trainer_->weights(slot); });
  }
  engine::AdamW optimizer(int32_t slot) const override {
    return device_call(
        device_, [&] { return fmt::format("downloading the optimizer state of slot {}", slot); },
        [&] { return trainer_->optimizer(slot); });
  }
  int64_t step_count(int32_t slot) const override {
    return device_call(
        device_, [&] { return fmt::format("querying slot {}'s step", slot); },
        [&] { return trainer_->step_count(slot); });
  }

 private:
  engine::Device device_;
  std::unique_ptr<DeviceTrainer> trainer_;
};

class CudaBackend final : public engine::ExecutionBackend {
 public:
  CudaBackend(const engine::ModelWeights& weights, const CudaBackendOptions& o)
      : device_{engine::DeviceKind::cuda, o.device},
        options_(o),
        device_name_(device_call(device_, "reading the device's properties",
                                 [&] { return cuda::device_name(device_.index); })),
        weights_(
            device_call(device_, "uploading the base weights",
                        [&] { return std::make_unique<DeviceWeights>(weights, o.precision); })),
        model_(device_call(device_, "creating the device model",
                           [&] { return std::make_unique<DeviceModel>(*weights_); })) {}

  engine::Device device() const override { return device_; }
  DType dtype() const override {
    return options_.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  }
  const engine::ModelConfig& config() const override { return weights_->config(); }

  engine::MemoryReport memory() const override {
    return device_call(device_, "reading device memory", [&] {
      engine::MemoryReport r;
      r.device_name = device_name_;
      r.base_bytes = weights_->bytes();
      cuda::check(cudaMemGetInfo(&r.free_bytes, &r.total_bytes), "cudaMemGetInfo");
      return r;
    });
  }

  std::unique_ptr<engine::SlotPool> make_slot_pool(const engine::LoraPoolOptions& o) override {
    return device_call(
        device_,
        [&] {
          return fmt::format("allocating a slot pool of {} slots × rank {}", o.max_slots,
                             o.max_rank);
        },
        [&] { return std::make_unique<DeviceLoraPool>(config(), o, device_); });
  }
  std::unique_ptr<engine::KvPool> make_kv_pool(const engine::KvCacheOptions& o) override {
    return device_call(
        device_, [&] { return fmt::format("allocating a KV cache of {} blocks", o.n_blocks); },
        [&] { return std::make_unique<DeviceKvCache>(config(), o, options_.precision, device_); });
  }
  std::unique_ptr<engine::BatchRunner> make_runner() override {
    return std::make_unique<CudaRunner>(*model_, device_, options_.use_graph);
  }
  std::unique_ptr<engine::Trainer> make_trainer(engine::SlotPool& pool) override {
    return std::make_unique<CudaTrainer>(
        *model_, *own<DeviceLoraPool>(&pool, device_, "make_trainer"), device_);
  }

 private:
  engine::Device device_;
  CudaBackendOptions options_;
  std::string device_name_;  // cudaGetDeviceProperties is slow: asked once
  std::unique_ptr<DeviceWeights> weights_;
  std::unique_ptr<DeviceModel> model_;
};

}  // namespace

std::unique_ptr<engine::ExecutionBackend> make_cuda_backend(const engine::ModelWeights& weights,
                                                            const CudaBackendOptions& options) {
  const int n = cuda::device_count();
  SPINDLE_CHECK(options.device >= 0 && options.device < n, unsupported,
                "device cuda:{} does not exist: this machine has {} CUDA device(s)", options.device,
                n);
  return std::make_unique<CudaBackend>(weights, options);
}

std::unique_ptr<engine::SlotPool> make_cuda_slot_pool(const engine::ModelConfig& config,
                                                      const engine::LoraPoolOptions& options,
                                                      int32_t device) {
  const int n = cuda::device_count();
  SPINDLE_CHECK(device >= 0 && device < n, unsupported,
                "device cuda:{} does not exist: this machine has {} CUDA device(s)", device, n);
  const engine::Device d{engine::DeviceKind::cuda, device};
  return device_call(
      d,
      [&] {
        return fmt::format("allocating a slot pool of {} slots × rank {}", options.max_slots,
                           options.max_rank);
      },
      [&]() -> std::unique_ptr<engine::SlotPool> {
        return std::make_unique<DeviceLoraPool>(config, options, d);
      });
}

}  // namespace spindle::engine_cuda
