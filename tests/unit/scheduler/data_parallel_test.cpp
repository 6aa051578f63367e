// Data-parallel sessions (Scheduler::open_session with a group): two schedulers stand for two
// workers, each holding one rank of two policies X and Y (real Gloo groups over loopback). Jobs
// reach both in one global order; X's step waits behind X's forward_backward on worker A while
// worker B, which got no data for X, has X's step at its head. Visiting sessions in id order
// would run Y's step on A and X's on B: each waiting on the other until the group timeout. The
// rule (a group step runs only when it is the oldest group job) makes both finish, and X's
// ranks end with the same bits: B's step applied A's gradient.

#include <gtest/gtest.h>

#include <random>

#include "scheduler_fixtures.h"
#include "spindle/cluster/all_reduce.h"

namespace spindle::scheduler {
namespace {

using spindle::testing::max_abs_diff;
using testing::Waiter;

std::shared_ptr<AllReduce> group(std::shared_ptr<cluster::MemoryStore> store,
                                 const std::string& name, int rank) {
  cluster::GroupOptions o;
  o.group = name;
  o.rank = rank;
  o.size = 2;
  o.host = "127.0.0.1";
  o.timeout = std::chrono::seconds(20);
  return cluster::make_all_reduce(std::move(store), o);
}

SessionId open(Scheduler& s, const engine::LoraWeights& w, std::shared_ptr<AllReduce> g) {
  Waiter<SessionId> opened;
  s.open_session(w.clone(), {}, opened.callback(), std::move(g));
  auto out = opened.get();
  EXPECT_TRUE(out.ok()) << out.error.message;
  return out.ok() ? *out.value : 0;
}

TEST(SchedulerDataParallel, GroupStepsRunInSubmissionOrderSoTwoWorkersNeverWaitOnEachOther) {
  if (!spindle::testing::testing_cpu()) GTEST_SKIP() << "host-memory groups: the CPU run covers it";
  auto a = testing::tiny_env();
  auto b = testing::tiny_env();  // the same seed: the same base
  const engine::ModelConfig& c = a->weights.config;
  const SchedulerOptions options{.training_slots = 2, .training_max_rank = 8};
  Scheduler wa(*a->backend, nullptr, a->pool, a->residency, options);
  Scheduler wb(*b->backend, nullptr, b->pool, b->residency, options);
  const engine::LoraWeights init_x =
      engine::LoraWeights::random(c, 4, 8.0f, testing::kAllTargets, 7, 0.2f, 0.1f);
  const engine::LoraWeights init_y =
      engine::LoraWeights::random(c, 4, 8.0f, testing::kAllTargets, 8, 0.2f, 0.1f);
  auto store = std::make_shared<cluster::MemoryStore>();
  // Both open X first: X has the lower session id on both workers.
  const SessionId xa = open(wa, init_x, group(store, "x", 0));
  const SessionId ya = open(wa, init_y, group(store, "y", 0));
  const SessionId xb = open(wb, init_x, group(store, "x", 1));
  const SessionId yb = open(wb, init_y, group(store, "y", 1));

  std::mt19937 rng(5);
  std::vector<engine::TrainDatum> data(3);
  for (auto& d : data) {
    for (int t = 0; t < 6; ++t) {
      d.input_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
      d.target_tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
    }
  }
  const engine::AdamParams adam{.learning_rate = 1e-2f};
  Waiter<TrainBatchResult> fb_x, fb_y;
  Waiter<engine::OptimStepResult> step_xa, step_xb, step_ya, step_yb;
  Waiter<SessionSnapshot> snap_xa, snap_xb;
  {
    testing::Gate gate_a(wa), gate_b(wb);  // every job below reaches each engine in one intake
    // The global order: X.fb (A's share; B has none), X.step (A, B), Y.fb (B's share), Y.step.
    ASSERT_TRUE(wa.submit_forward_backward(xa, data, engine::LossFn::cross_entropy, {}, true,
                                           fb_x.callback()));
    ASSERT_TRUE(wa.submit_optim_step(xa, adam, step_xa.callback()));
    ASSERT_TRUE(wb.submit_optim_step(xb, adam, step_xb.callback()));
    ASSERT_TRUE(wb.submit_forward_backward(yb, data, engine::LossFn::cross_entropy, {}, true,
                                           fb_y.callback()));
    ASSERT_TRUE(wa.submit_optim_step(ya, adam, step_ya.callback()));
    ASSERT_TRUE(wb.submit_optim_step(yb, adam, step_yb.callback()));
    ASSERT_TRUE(wa.submit_snapshot(xa, false, snap_xa.callback()));
    ASSERT_TRUE(wb.submit_snapshot(xb, false, snap_xb.callback()));
  }
  for (auto* w : {&step_xa, &step_xb, &step_ya, &step_yb}) {
    auto r = w->get();
    ASSERT_TRUE(r.ok()) << r.error.message;
    EXPECT_EQ(r.value->step, 1);
  }
  ASSERT_TRUE(fb_x.get().ok());
  ASSERT_TRUE(fb_y.get().ok());
  auto sa = snap_xa.get(), sb = snap_xb.get();
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(max_abs_diff(*sa.value->weights, *sb.value->weights), 0.0f);
  EXPECT_GT(max_abs_diff(*sa.value->weights, init_x), 1e-4f);  // it trained, on both ranks
}

}  // namespace
}  // namespace spindle::scheduler
