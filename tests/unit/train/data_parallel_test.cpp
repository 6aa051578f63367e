// Data-parallel LoRA training (issue 17): R ranks, each with its own trainer over the same base
// and its share of every batch, summing gradients through a real Gloo group (loopback TCP)
// before each step, end with the weights ONE trainer gets from the whole batch — within float
// rounding (the sums are taken in another order) — and every rank holds the same bits. A rank
// with no data in a step still joins the sum. Dense, Qwen3-MoE and DeepSeek (MLA) bases.

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "../model/model_fixtures.h"
#include "spindle/cluster/all_reduce.h"
#include "spindle/core/error.h"
#include "spindle/engine/trainer.h"

namespace spindle::engine {
namespace {

using spindle::testing::max_abs;
using spindle::testing::max_abs_diff;

std::vector<TrainDatum> batch(const ModelConfig& c, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TrainDatum> out;
  for (int d = 0; d < n; ++d) {
    TrainDatum datum;
    datum.slot = 0;
    const size_t len = 3 + size_t(rng() % 9);
    for (size_t t = 0; t < len; ++t) {
      datum.input_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      datum.target_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      datum.weights.push_back(t == 0 ? 0.0f : 1.0f);
    }
    out.push_back(std::move(datum));
  }
  return out;
}

void check_data_parallel_equals_whole_batch(Arch arch) {
  const ModelConfig config = testing::tiny_config(arch);
  const ModelWeights w = testing::random_weights(config, 5);
  const ModelConfig& c = w.config;
  const Model model(w);
  const std::vector<LoraTarget> targets(std::begin(kAllLoraTargets), std::end(kAllLoraTargets));
  const LoraWeights init = LoraWeights::random(c, 4, 8.0f, targets, 11, 0.2f, 0.1f);
  const AdamParams adam{.learning_rate = 1e-2f, .weight_decay = 0.01f, .grad_clip_norm = 0.5f};
  constexpr int R = 3;
  constexpr int kSteps = 3;
  // Step s's batch, and each rank's share of it: contiguous shards, as the coordinator cuts
  // them; step 1 has 2 data, so rank 2 gets none.
  const int sizes[kSteps] = {7, 2, 6};

  LoraSlotPool whole_pool(c, {.max_slots = 1, .max_rank = 4});
  LoraTrainer whole(model, whole_pool);
  whole.attach(0, init.clone());
  std::vector<double> whole_norms;
  for (int s = 0; s < kSteps; ++s) {
    whole.forward_backward(batch(c, sizes[s], 100 + s), LossFn::cross_entropy);
    whole_norms.push_back(whole.optim_step(0, adam).grad_norm);
  }

  auto store = std::make_shared<cluster::MemoryStore>();
  std::vector<std::unique_ptr<LoraSlotPool>> pools;
  std::vector<std::unique_ptr<LoraTrainer>> ranks;
  std::vector<std::unique_ptr<AllReduce>> groups;
  for (int r = 0; r < R; ++r) {
    pools.push_back(
        std::make_unique<LoraSlotPool>(c, LoraPoolOptions{.max_slots = 1, .max_rank = 4}));
    ranks.push_back(std::make_unique<LoraTrainer>(model, *pools.back()));
    ranks.back()->attach(0, init.clone());
    cluster::GroupOptions o;
    o.group = "dp-test";
    o.rank = r;
    o.size = R;
    o.host = "127.0.0.1";
    groups.push_back(cluster::make_all_reduce(store, o));
  }
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<TrainDatum> all = batch(c, sizes[s], 100 + s);
    for (int r = 0; r < R; ++r) {  // forwards one rank after the other (BLAS on one thread)
      const size_t lo = all.size() * size_t(r) / R, hi = all.size() * size_t(r + 1) / R;
      if (lo == hi) continue;
      ranks[size_t(r)]->forward_backward(std::span(all).subspan(lo, hi - lo),
                                         LossFn::cross_entropy);
    }
    std::vector<std::thread> threads;
    std::vector<double> norms(R);
    std::vector<std::string> errors(R);
    for (int r = 0; r < R; ++r) {  // the sum needs every rank at once
      threads.emplace_back([&, r] {
        try {
          ranks[size_t(r)]->reduce_gradients(0, *groups[size_t(r)]);
          norms[size_t(r)] = ranks[size_t(r)]->optim_step(0, adam).grad_norm;
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < R; ++r) {
      ASSERT_EQ(errors[size_t(r)], "") << "rank " << r << " step " << s;
      EXPECT_EQ(norms[size_t(r)], norms[0]) << "rank " << r << " step " << s;
    }
    EXPECT_NEAR(norms[0], whole_norms[size_t(s)], 1e-5 * whole_norms[size_t(s)]) << "step " << s;
  }
  const float scale = std::max(1.0f, max_abs(whole.weights(0)));
  EXPECT_LE(max_abs_diff(ranks[0]->weights(0), whole.weights(0)), 2e-5f * scale);
  EXPECT_GT(max_abs_diff(whole.weights(0), init), 1e-3f);  // it trained
  for (int r = 1; r < R; ++r) {
    EXPECT_EQ(max_abs_diff(ranks[size_t(r)]->weights(0), ranks[0]->weights(0)), 0.0f) << r;
  }
}

TEST(DataParallel, DenseRanksEqualOneTrainerWithTheWholeBatch) {
  check_data_parallel_equals_whole_batch(Arch::llama);
}

TEST(DataParallel, MoeRanksEqualOneTrainerWithTheWholeBatch) {
  check_data_parallel_equals_whole_batch(Arch::qwen3_moe);
}

TEST(DataParallel, MlaRanksEqualOneTrainerWithTheWholeBatch) {
  check_data_parallel_equals_whole_batch(Arch::deepseek_v3);
}

TEST(DataParallel, ADeviceGroupIsRefusedByTheCpuTrainer) {
  struct DeviceGroup final : AllReduce {
    std::string name = "cuda-group";
    Memory memory() const override { return Memory::cuda; }
    int rank() const override { return 0; }
    int size() const override { return 2; }
    const std::string& group() const override { return name; }
    void sum(std::span<const std::span<float>>, void*) override { ADD_FAILURE() << "summed"; }
  } device_group;
  const ModelWeights w = testing::random_weights(testing::tiny_config(Arch::llama), 5);
  const Model model(w);
  LoraSlotPool pool(w.config, {.max_slots = 1, .max_rank = 4});
  LoraTrainer t(model, pool);
  const std::vector<LoraTarget> q = {LoraTarget::q};
  t.attach(0, LoraWeights::random(w.config, 2, 2.0f, q, 1, 0.1f, 0.1f));
  try {
    t.reduce_gradients(0, device_group);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("cuda-group"), std::string::npos);
  }
}

}  // namespace
}  // namespace spindle::engine
