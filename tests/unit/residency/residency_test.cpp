// Residency manager over a real LoraSlotPool, a host cache and a loader with a fake slow
// source: cold work parks and resumes, the batch loop never blocks, eviction never takes a
// slot a batch holds, and the snapshot says where each revision sits.

#include <gtest/gtest.h>

#include <deque>

#include "../model/model_fixtures.h"
#include "residency_fixtures.h"
#include "spindle/adapters/residency.h"

namespace spindle::adapters {
namespace {

using engine::LoraTarget;
using testing::FakeSource;

const engine::ModelConfig kConfig = spindle::testing::tiny_config(engine::Arch::qwen3);

AdapterPtr random_adapter(const std::string& id) {
  const LoraTarget q[] = {LoraTarget::q};
  return std::make_shared<engine::LoraWeights>(engine::LoraWeights::random(
      kConfig, 2, 4.0f, q, std::hash<std::string>{}(id), 0.1f, 0.1f));
}

struct Fixture {
  explicit Fixture(int32_t slots)
      : pool(kConfig, {/*max_slots=*/slots, /*max_rank=*/4, {LoraTarget::q}}),
        cache(size_t(64) << 20),
        loader(cache, [this](const std::string& id) { return src.load(id); }, {/*threads=*/2}),
        manager(pool, cache, loader) {
    src.make = random_adapter;
  }
  ~Fixture() { src.release_all(); }  // so the loader's shutdown never waits on the source
  void warm(const std::string& id) { cache.insert(id, random_adapter(id)); }
  ResidencyTier tier_of(const std::string& id) {
    for (const auto& p : manager.snapshot())
      if (p.revision_id == id) return p.tier;
    return ResidencyTier::cold;
  }

  FakeSource src;
  engine::LoraSlotPool pool;
  HostCache cache;
  Loader loader;
  ResidencyManager manager;
};

TEST(Residency, ColdWorkParksAndResumesWhenItsLoadLands) {
  Fixture f(/*slots=*/2);
  EXPECT_EQ(f.manager.acquire("a"), std::nullopt);  // cold: parked, load started
  EXPECT_EQ(f.manager.acquire("a"), std::nullopt);  // still loading: no second load
  EXPECT_EQ(f.tier_of("a"), ResidencyTier::loading);
  EXPECT_TRUE(f.manager.take_landed().empty());
  f.src.release("a");
  f.loader.request("a").wait();  // the test (not the manager) waits for the landing
  const auto landed = f.manager.take_landed();
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].revision_id, "a");
  EXPECT_TRUE(landed[0].error.empty());
  const auto slot = f.manager.acquire("a");
  ASSERT_TRUE(slot.has_value());
  EXPECT_TRUE(f.pool.occupied(*slot));
  EXPECT_EQ(f.src.loads("a"), 1);
  EXPECT_EQ(f.tier_of("a"), ResidencyTier::device);
  f.manager.release(*slot);
  EXPECT_EQ(f.manager.acquire("a"), slot);  // device hit
  const auto s = f.manager.stats();
  EXPECT_EQ(s.cold_parks, 2u);
  EXPECT_EQ(s.host_hits, 1u);
  EXPECT_EQ(s.device_hits, 1u);
}

TEST(Residency, BatchLoopRunsWarmWorkWhileColdLoadsAreBlocked) {
  Fixture f(/*slots=*/4);
  f.warm("w1");
  f.warm("w2");
  std::deque<std::string> parked = {"w1", "c1", "w2", "c2", "w1", "c3"};
  std::vector<std::string> done;
  // Iterations with every cold load blocked: warm work completes, cold work stays parked.
  for (int iter = 0; iter < 3; ++iter) {
    std::deque<std::string> still;
    std::vector<int32_t> batch;
    for (const auto& id : parked) {
      if (auto slot = f.manager.acquire(id)) {
        batch.push_back(*slot);
        done.push_back(id);
      } else {
        still.push_back(id);
      }
    }
    for (int32_t s : batch) f.manager.release(s);
    parked = std::move(still);
  }
  EXPECT_EQ(done, (std::vector<std::string>{"w1", "w2", "w1"}));
  EXPECT_EQ(parked.size(), 3u);
  EXPECT_EQ(f.loader.stats().queue_depth + f.loader.stats().running, 3u);
  // Loads land; parked work resumes as take_landed reports it.
  f.src.release_all();
  while (!parked.empty()) {
    f.loader.request(parked.front()).wait();  // test-side wait instead of a sleep
    for (const auto& l : f.manager.take_landed()) EXPECT_TRUE(l.error.empty()) << l.error;
    std::deque<std::string> still;
    for (const auto& id : parked) {
      if (auto slot = f.manager.acquire(id)) {
        done.push_back(id);
        f.manager.release(*slot);
      } else {
        still.push_back(id);
      }
    }
    parked = std::move(still);
  }
  EXPECT_EQ(done.size(), 6u);
  for (const char* id : {"c1", "c2", "c3"}) EXPECT_EQ(f.src.loads(id), 1) << id;
}

TEST(Residency, EvictionNeverTakesASlotInUse) {
  Fixture f(/*slots=*/2);
  for (const char* id : {"a", "b", "c"}) f.warm(id);
  const auto sa = f.manager.acquire("a");
  const auto sb = f.manager.acquire("b");
  ASSERT_TRUE(sa && sb);
  EXPECT_EQ(f.manager.acquire("c"), std::nullopt);  // both slots held by batches
  EXPECT_EQ(f.manager.stats().busy_parks, 1u);
  EXPECT_EQ(f.manager.slot_of("a"), sa);
  EXPECT_EQ(f.manager.slot_of("b"), sb);
  f.manager.release(*sa);
  const auto sc = f.manager.acquire("c");  // takes a's slot, never b's
  EXPECT_EQ(sc, sa);
  EXPECT_EQ(f.manager.slot_of("b"), sb);
  EXPECT_EQ(f.tier_of("a"), ResidencyTier::host);
  EXPECT_EQ(f.manager.stats().slot_evictions, 1u);
  for (const auto& p : f.manager.snapshot())
    if (p.revision_id == "b") EXPECT_EQ(p.in_use, 1);
  EXPECT_THROW(f.manager.release(*sa + 100), Error);
}

TEST(Residency, EvictsLeastRecentlyUsedUnusedSlot) {
  Fixture f(/*slots=*/2);
  for (const char* id : {"a", "b", "c"}) f.warm(id);
  for (const char* id : {"a", "b", "a"}) f.manager.release(*f.manager.acquire(id));
  const auto sc = f.manager.acquire("c");
  ASSERT_TRUE(sc);
  EXPECT_TRUE(f.manager.slot_of("a").has_value());
  EXPECT_FALSE(f.manager.slot_of("b").has_value());
}

TEST(Residency, FailedLoadIsReported) {
  Fixture f(/*slots=*/2);
  EXPECT_EQ(f.manager.acquire("bad-rev"), std::nullopt);
  f.src.release_all();
  f.loader.request("bad-rev").wait();
  const auto landed = f.manager.take_landed();
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_NE(landed[0].error.find("cannot read bad-rev"), std::string::npos);
  EXPECT_EQ(f.manager.stats().load_failures, 1u);
  EXPECT_EQ(f.tier_of("bad-rev"), ResidencyTier::cold);
}

// Thousands of distinct revisions that all stay in host memory (a storm of cold loads on a big
// host cache): the manager keeps tracking them (the snapshot lists them), and its sweeps for
// cold ids to forget come once per doubling, not once per new id past the bound.
TEST(Residency, SweepsOfKnownIdsAreAmortised) {
  Fixture f(/*slots=*/2);
  const int n = 5000;  // past the bound (1024 + 4 x slots) about five times over
  for (int i = 0; i < n; ++i) {
    const std::string id = "rev-" + std::to_string(i);
    f.warm(id);
    f.manager.release(*f.manager.acquire(id));
  }
  EXPECT_GE(f.manager.stats().known_sweeps, 1u);
  EXPECT_LE(f.manager.stats().known_sweeps, 3u);  // 1032 -> 2064 -> 4128 -> (8256)
  EXPECT_EQ(f.manager.snapshot().size(), size_t(n));  // none was cold, so none was forgotten
}

}  // namespace
}  // namespace spindle::adapters
