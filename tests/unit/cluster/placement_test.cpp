// Placement (backend/cluster/include/spindle/cluster/placement.h): rendezvous homes, cold loads
// to the shorter loader queue, hot spill, sessions, runs spread over workers, and what moves when
// a worker dies or comes back.

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "spindle/cluster/placement.h"
#include "spindle/core/error.h"

namespace spindle::cluster {
namespace {

std::string policy(int i) { return "local/policy-" + std::to_string(i); }

Placement with_workers(int n, PlacementOptions o = {}) {
  Placement p(o);
  for (int i = 0; i < n; ++i) p.add_worker("node" + std::to_string(i), "qwen3");
  return p;
}

TEST(Placement, AColdPolicyGoesToItsMostPreferredWorkerAndStaysThere) {
  PlacementOptions o;
  o.cold_candidates = 1;
  Placement p = with_workers(5, o);
  for (int i = 0; i < 200; ++i) {
    // route_sample's bounded top-k and preference()'s full sort are two codes for one order.
    const std::vector<WorkerId> pref = p.preference(policy(i), "qwen3");
    ASSERT_EQ(pref.size(), 5u);
    EXPECT_EQ(p.route_sample(policy(i), "qwen3"), pref[0]) << policy(i);
    EXPECT_EQ(p.route_sample(policy(i), "qwen3"), pref[0]) << "not sticky: " << policy(i);
    EXPECT_EQ(p.replicas(policy(i)), std::vector<WorkerId>{pref[0]});
  }
  EXPECT_EQ(p.placed_policies(), 200u);
}

TEST(Placement, HomesAreUniformOverWorkers) {
  PlacementOptions o;
  o.cold_candidates = 1;
  Placement p = with_workers(10, o);
  std::map<WorkerId, int> count;
  for (int i = 0; i < 20000; ++i) ++count[*p.route_sample(policy(i), "qwen3")];
  ASSERT_EQ(count.size(), 10u);
  for (const auto& [w, n] : count) {
    EXPECT_NEAR(n, 2000, 200) << "worker " << w;  // ~5 sigma of a binomial(20000, 0.1)
  }
}

TEST(Placement, AColdPolicyTakesTheShorterLoaderQueueAmongItsCandidates) {
  Placement p = with_workers(4);  // cold_candidates = 2
  int second = 0;
  for (int i = 0; i < 100; ++i) {
    const std::vector<WorkerId> pref = p.preference(policy(i), "qwen3");
    WorkerLoad busy;
    busy.loader_queue = 5;
    for (WorkerId w = 0; w < 4; ++w) p.update_load(w, WorkerLoad{});
    p.update_load(pref[0], busy);
    const WorkerId w = *p.route_sample(policy(i), "qwen3");
    EXPECT_EQ(w, pref[1]) << policy(i);
    second += w == pref[1];
    // Warm now: a later load change does not move it.
    p.update_load(pref[0], WorkerLoad{});
    p.update_load(pref[1], busy);
    EXPECT_EQ(p.route_sample(policy(i), "qwen3"), pref[1]);
  }
  EXPECT_EQ(second, 100);
}

TEST(Placement, RemovingAWorkerMovesOnlyItsPolicies) {
  PlacementOptions o;
  o.cold_candidates = 1;
  Placement p = with_workers(10, o);
  std::vector<WorkerId> before;
  for (int i = 0; i < 5000; ++i) before.push_back(*p.route_sample(policy(i), "qwen3"));
  const WorkerId dead = 3;
  const uint64_t on_dead = uint64_t(std::count(before.begin(), before.end(), dead));
  EXPECT_EQ(p.remove_worker(dead), on_dead);
  EXPECT_EQ(p.remove_worker(dead), 0u) << "a second remove is a no-op";
  EXPECT_EQ(p.live_workers(), 9u);
  for (int i = 0; i < 5000; ++i) {
    const WorkerId now = *p.route_sample(policy(i), "qwen3");
    if (before[i] != dead) {
      EXPECT_EQ(now, before[i]) << policy(i) << " moved off a live worker";
    } else {
      EXPECT_NE(now, dead);
      const std::vector<WorkerId> pref = p.preference(policy(i), "qwen3");
      EXPECT_EQ(now, pref[0]) << policy(i) << " did not go to its next preference";
    }
  }
}

TEST(Placement, AWorkerThatComesBackKeepsItsIdAndIsPreferredAgain) {
  PlacementOptions o;
  o.cold_candidates = 1;
  Placement p = with_workers(6, o);
  const std::vector<WorkerId> pref = p.preference(policy(7), "qwen3");
  p.remove_worker(pref[0]);
  EXPECT_EQ(p.route_sample(policy(7), "qwen3"), pref[1]);
  EXPECT_EQ(p.add_worker("node" + std::to_string(pref[0]), "qwen3"), pref[0]);
  EXPECT_TRUE(p.worker(pref[0]).alive);
  EXPECT_EQ(p.preference(policy(7), "qwen3"), pref);
  // Placed policies stay where they are; new ones prefer it as before.
  EXPECT_EQ(p.route_sample(policy(7), "qwen3"), pref[1]);
  const std::vector<WorkerId> other = p.preference(policy(8), "qwen3");
  EXPECT_EQ(p.route_sample(policy(8), "qwen3"), other[0]);
}

TEST(Placement, AHotPolicySpillsToItsNextPreferenceWhenItsQueuePassesTheBound) {
  PlacementOptions o;
  o.cold_candidates = 1;
  o.spill_queue = 32;
  o.max_replicas = 2;
  Placement p = with_workers(4, o);
  const std::vector<WorkerId> pref = p.preference(policy(1), "qwen3");
  ASSERT_EQ(p.route_sample(policy(1), "qwen3"), pref[0]);
  WorkerLoad at_bound;
  at_bound.queue_depth = 32;
  p.update_load(pref[0], at_bound);
  EXPECT_EQ(p.route_sample(policy(1), "qwen3"), pref[0]) << "at the bound is not past it";
  WorkerLoad past;
  past.queue_depth = 33;
  p.update_load(pref[0], past);
  EXPECT_EQ(p.route_sample(policy(1), "qwen3"), pref[1]);
  EXPECT_EQ(p.replicas(policy(1)), (std::vector<WorkerId>{pref[0], pref[1]}));
  // Both replicas now: the shorter queue wins; no third replica past max_replicas.
  WorkerLoad less;
  less.queue_depth = 40;
  p.update_load(pref[1], less);
  WorkerLoad more;
  more.queue_depth = 50;
  p.update_load(pref[0], more);
  EXPECT_EQ(p.route_sample(policy(1), "qwen3"), pref[1]);
  EXPECT_EQ(p.replicas(policy(1)).size(), 2u);
  // A replica's death leaves the other.
  p.remove_worker(pref[1]);
  EXPECT_EQ(p.replicas(policy(1)), std::vector<WorkerId>{pref[0]});
}

TEST(Placement, ASessionGoesToThePolicysPrimary) {
  Placement p = with_workers(3);
  const WorkerId w = *p.route_sample(policy(2), "qwen3");
  EXPECT_EQ(p.route_session(policy(2), "qwen3"), w);
  const std::optional<WorkerId> fresh = p.route_session(policy(3), "qwen3");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(p.replicas(policy(3)), std::vector<WorkerId>{*fresh}) << "placed cold";
}

TEST(Placement, ARunSpreadsItsPoliciesEvenlyOverWorkers) {
  Placement p = with_workers(3);
  std::vector<std::string> k8;
  for (int i = 0; i < 8; ++i) k8.push_back(policy(100 + i));
  const std::vector<WorkerId> at = p.spread(k8, "qwen3");
  ASSERT_EQ(at.size(), 8u);
  std::map<WorkerId, int> n;
  for (const WorkerId w : at) ++n[w];
  ASSERT_EQ(n.size(), 3u);
  for (const auto& [w, c] : n) EXPECT_TRUE(c == 2 || c == 3) << "worker " << w << ": " << c;
  for (size_t i = 0; i < k8.size(); ++i) {
    EXPECT_EQ(p.route_session(k8[i], "qwen3"), at[i]) << "the run's worker is the primary";
  }
  const std::vector<std::string> k2 = {policy(200), policy(201)};
  const std::vector<WorkerId> two = p.spread(k2, "qwen3");
  EXPECT_NE(two[0], two[1]);
}

TEST(Placement, OnlyWorkersOfTheBaseAreCandidates) {
  Placement p;
  const WorkerId a = p.add_worker("a", "qwen3");
  const WorkerId b = p.add_worker("b", "llama");
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(p.route_sample(policy(i), "qwen3"), a);
    EXPECT_EQ(p.route_sample("llama-" + policy(i), "llama"), b);
  }
  EXPECT_FALSE(p.route_sample(policy(1), "gemma")) << "no worker holds that base";
  EXPECT_TRUE(p.spread(std::vector<std::string>{policy(1)}, "gemma").empty());
  p.remove_worker(b);
  EXPECT_FALSE(p.route_session("llama-x", "llama")) << "its only worker is gone";
}

TEST(Placement, BadInputIsRefusedNamingWhatWasWrong) {
  Placement p;
  p.add_worker("node0", "qwen3");
  try {
    p.add_worker("node0", "llama");
    FAIL() << "a name rejoined with another base";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("node0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p.add_worker("", "qwen3"), Error);
  EXPECT_THROW(p.update_load(9, WorkerLoad{}), Error);
  EXPECT_THROW(p.worker(9), Error);
  PlacementOptions bad;
  bad.max_replicas = 0;
  EXPECT_THROW(Placement{bad}, Error);
}

}  // namespace
}  // namespace spindle::cluster
