// Data-parallel LoRA training on the CUDA engine (issue 17): ranks with their own
// DeviceTrainer and a share of the batch, summing gradients before each step, end where the CPU
// engine's trainer ends with the whole batch (fp32 mode), every rank with the same bits.
//  - one GPU: two ranks on the same device summing through a Gloo group (the host-staged path
//    of DeviceTrainer::reduce_gradients);
//  - two GPUs or more: two ranks on devices 0 and 1 summing with NCCL on the device (skips with
//    the reason on a machine with one GPU: NCCL refuses two ranks on one device).

#include <gtest/gtest.h>

#include <thread>

#include "spindle/cluster/all_reduce.h"
#include "train_fixtures.h"

namespace spindle::engine_cuda {
namespace {

using namespace spindle::engine_cuda::testing;
using spindle::testing::max_abs;

void check_two_ranks(bool nccl) {
  constexpr int R = 2;
  const std::vector<size_t> lens = {7, 4, 9, 5, 6};
  const engine::AdamParams adam{.learning_rate = 1e-2f, .grad_clip_norm = 0.5f};
  const engine::ModelConfig c0 = gpu_tiny_config(Arch::qwen3);
  const LoraWeights init = LoraWeights::random(spindle::testing::random_weights(c0, 3).config, 4,
                                               8.0f, kAllTargets, 9, 0.2f, 0.1f);
  // The reference: the CPU engine with the whole batch, three steps.
  Rig ref(Arch::qwen3, 3, Precision::fp32, {.max_slots = 1, .max_rank = 4});
  ref.cpu_trainer->attach(0, init.clone());
  for (int s = 0; s < 3; ++s) {
    ref.cpu_trainer->forward_backward(make_batch(ref.config(), lens, {0, 0, 0, 0, 0}, 20 + s),
                                      LossFn::cross_entropy);
    ref.cpu_trainer->optim_step(0, adam);
  }
  auto store = std::make_shared<cluster::MemoryStore>();
  std::vector<LoraWeights> out(R);
  std::vector<std::string> errors(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r) {
    threads.emplace_back([&, r] {
      try {
        if (nccl) kernels::cuda::check(cudaSetDevice(r), "cudaSetDevice");
        Rig rig(Arch::qwen3, 3, Precision::fp32, {.max_slots = 1, .max_rank = 4});
        rig.dev_trainer->attach(0, init.clone());
        cluster::GroupOptions o;
        o.group = nccl ? "gpu-nccl" : "gpu-gloo";
        o.rank = r;
        o.size = R;
        o.host = "127.0.0.1";
        o.cuda_device = nccl ? r : -1;
        auto group = cluster::make_all_reduce(store, o);
        for (int s = 0; s < 3; ++s) {
          const auto batch = make_batch(rig.config(), lens, {0, 0, 0, 0, 0}, 20 + s);
          const size_t lo = batch.size() * size_t(r) / R, hi = batch.size() * size_t(r + 1) / R;
          rig.dev_trainer->forward_backward(std::span(batch).subspan(lo, hi - lo),
                                            LossFn::cross_entropy);
          rig.dev_trainer->reduce_gradients(0, *group);
          rig.dev_trainer->optim_step(0, adam);
        }
        out[size_t(r)] = rig.dev_trainer->weights(0);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < R; ++r) ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
  const LoraWeights& want = ref.cpu_trainer->weights(0);
  EXPECT_LE(spindle::testing::max_abs_diff(out[0], want), 1e-4f * std::max(1.0f, max_abs(want)));
  EXPECT_EQ(spindle::testing::max_abs_diff(out[1], out[0]), 0.0f);
}

TEST(GpuDataParallel, TwoRanksOnOneDeviceThroughGlooEqualTheCpuWithTheWholeBatch) {
  SPINDLE_REQUIRE_GPU();
  check_two_ranks(/*nccl=*/false);
}

TEST(GpuDataParallel, TwoRanksOnTwoDevicesThroughNcclEqualTheCpuWithTheWholeBatch) {
  SPINDLE_REQUIRE_GPU();
  if (kernels::cuda::device_count() < 2)
    GTEST_SKIP() << "NCCL ranks need two CUDA devices; this machine has one";
  check_two_ranks(/*nccl=*/true);
}

}  // namespace
}  // namespace spindle::engine_cuda
