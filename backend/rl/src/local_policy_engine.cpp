// PolicyEngine over one process's scheduler (policy_engine.h): the session is a slot of its
// training pool, every call a scheduler job.

#include <atomic>
#include <memory>

#include "spindle/rl/policy_engine.h"

namespace spindle::rl {
namespace {

class LocalPolicyEngine final : public PolicyEngine {
 public:
  LocalPolicyEngine(scheduler::Scheduler& s, std::string tenant)
      : sched_(s), tenant_(std::move(tenant)) {}

  bool open(engine::LoraWeights weights, engine::AdamW adam, int64_t, Done<bool> done) override {
    sched_.open_session(std::move(weights), std::move(adam),
                        [id = id_, done = std::move(done)](scheduler::Outcome<scheduler::SessionId> o) {
                          if (!o.ok()) return done({std::nullopt, o.error});
                          *id = *o.value;
                          done({true, {}});
                        });
    return true;
  }
  bool close(Done<bool> done) override {
    sched_.close_session(id_->load(), std::move(done));
    return true;
  }
  bool sample(std::vector<int32_t> prompt, int32_t num_samples, engine::SamplingParams params,
              Done<Completions> done) override {
    scheduler::SampleJob job;
    job.tenant = tenant_;
    job.session = id_->load();
    job.prompt = std::move(prompt);
    job.num_samples = num_samples;
    job.params = std::move(params);
    job.done = std::move(done);
    return sched_.submit_sample(std::move(job));
  }
  bool base_logprobs(std::vector<int32_t> tokens, Done<std::vector<float>> done) override {
    scheduler::LogprobsJob job;
    job.tenant = tenant_;
    job.tokens = std::move(tokens);
    job.done = std::move(done);
    return sched_.submit_logprobs(std::move(job));
  }
  bool forward_backward(std::vector<engine::TrainDatum> data, engine::LossFn loss,
                        engine::LossConfig loss_config,
                        Done<scheduler::TrainBatchResult> done) override {
    return sched_.submit_forward_backward(id_->load(), std::move(data), loss, loss_config, true,
                                          std::move(done));
  }
  bool optim_step(engine::AdamParams params, Done<engine::OptimStepResult> done) override {
    return sched_.submit_optim_step(id_->load(), params, std::move(done));
  }
  bool snapshot(Done<scheduler::SessionSnapshot> done) override {
    return sched_.submit_snapshot(id_->load(), true, std::move(done));
  }
  std::string where() const override { return "this process"; }

 private:
  scheduler::Scheduler& sched_;
  std::string tenant_;
  // Set by open's callback (which may outlive this engine when the run gives up), read by
  // later calls: the run waits for open before making them.
  std::shared_ptr<std::atomic<scheduler::SessionId>> id_ =
      std::make_shared<std::atomic<scheduler::SessionId>>(0);
};

}  // namespace

std::unique_ptr<PolicyEngine> make_local_policy_engine(scheduler::Scheduler& scheduler,
                                                       std::string tenant) {
  return std::make_unique<LocalPolicyEngine>(scheduler, std::move(tenant));
}

}  // namespace spindle::rl
