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

// A fresh save is published into a slot before anyone asks: the first request is a device hit
// on exactly those weights, nothing is read from the source, and the slot is evictable (no
// batch holds it). Published while every slot is held, nothing changes; a published slot is
// the most recently used, so it evicts the LRU one; an adapter the pool refuses throws and
// leaves the slot free.
TEST(Residency, PublishedRevisionIsADeviceHitAndNeverTakesASlotInUse) {
  Fixture f(/*slots=*/2);
  f.warm("old");
  f.manager.release(*f.manager.acquire("old"));
  const AdapterPtr fresh = random_adapter("fresh");
  ASSERT_TRUE(f.manager.publish("fresh", fresh));
  const auto slot = f.manager.slot_of("fresh");
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(f.tier_of("fresh"), ResidencyTier::device);
  for (const auto& p : f.manager.snapshot())
    if (p.revision_id == "fresh") EXPECT_EQ(p.in_use, 0);
  EXPECT_TRUE(f.manager.publish("fresh", fresh));  // already resident: a no-op
  EXPECT_EQ(f.manager.acquire("fresh"), slot);
  EXPECT_EQ(f.src.loads("fresh"), 0);
  auto s = f.manager.stats();
  EXPECT_EQ(s.published, 1u);
  EXPECT_EQ(s.device_hits, 1u);
  EXPECT_EQ(s.host_hits, 1u);  // "old" only
  // The slot holds the published weights (rank 2 of a rank-4 pool; the rest zero).
  const auto view = f.pool.view(0, LoraTarget::q);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->rank[*slot], 2);
  const engine::LoraPair& q = fresh->modules[0][size_t(LoraTarget::q)];
  const float* a = view->A + *slot * view->max_rank * view->d_in;  // rows [0, 2) are A
  for (int64_t i = 0; i < q.A.numel(); ++i) ASSERT_EQ(a[i], q.A.data()[i]) << i;

  // Both slots held by batches: publish refuses without evicting anything.
  const auto held_old = f.manager.acquire("old");
  ASSERT_TRUE(held_old.has_value());
  EXPECT_FALSE(f.manager.publish("other", random_adapter("other")));
  EXPECT_EQ(f.manager.slot_of("fresh"), slot);
  EXPECT_FALSE(f.manager.slot_of("other").has_value());
  f.manager.release(*slot);
  f.manager.release(*held_old);

  // Published last, "next" evicts the least recently used of the two ("fresh", then "old").
  ASSERT_TRUE(f.manager.publish("next", random_adapter("next")));
  EXPECT_FALSE(f.manager.slot_of("fresh").has_value());
  EXPECT_TRUE(f.manager.slot_of("old").has_value());

  // A rank the pool cannot hold: refused naming the limit, the claimed slot left free.
  const LoraTarget qt[] = {LoraTarget::q};
  const auto too_big = std::make_shared<engine::LoraWeights>(
      engine::LoraWeights::random(kConfig, 8, 4.0f, qt, 1, 0.1f, 0.1f));
  EXPECT_THROW(f.manager.publish("too-big", too_big), Error);
  EXPECT_FALSE(f.manager.slot_of("too-big").has_value());
  s = f.manager.stats();
  EXPECT_EQ(s.published, 2u);
}

// A snapshot published before its blob id is known is renamed to the id once it is: the slot
// follows, the provisional key goes cold. A rename onto an id already resident, or to "" (the
// save failed), frees the slot; a key no longer resident is a no-op; a slot a batch holds is
// never renamed.
TEST(Residency, RekeyRenamesAPublishedSlotOrFreesIt) {
  Fixture f(/*slots=*/3);
  ASSERT_TRUE(f.manager.publish("pending-1", random_adapter("w1")));
  const auto slot = f.manager.slot_of("pending-1");
  ASSERT_TRUE(slot.has_value());
  f.manager.rekey("pending-1", "blob-1");
  EXPECT_EQ(f.manager.slot_of("blob-1"), slot);
  EXPECT_FALSE(f.manager.slot_of("pending-1").has_value());
  EXPECT_EQ(f.tier_of("pending-1"), ResidencyTier::cold);
  EXPECT_EQ(f.tier_of("blob-1"), ResidencyTier::device);
  EXPECT_EQ(f.manager.acquire("blob-1"), slot);  // a device hit, no load
  f.manager.release(*slot);
  EXPECT_EQ(f.src.loads("blob-1"), 0);

  ASSERT_TRUE(f.manager.publish("pending-2", random_adapter("w1")));  // same content again
  f.manager.rekey("pending-2", "blob-1");
  EXPECT_FALSE(f.manager.slot_of("pending-2").has_value());
  EXPECT_EQ(f.manager.slot_of("blob-1"), slot);
  ASSERT_TRUE(f.manager.publish("pending-3", random_adapter("w3")));
  const auto freed = f.manager.slot_of("pending-3");
  f.manager.rekey("pending-3", "");
  EXPECT_FALSE(f.manager.slot_of("pending-3").has_value());
  EXPECT_FALSE(f.pool.occupied(*freed));
  f.manager.rekey("never-published", "blob-9");  // a no-op
  EXPECT_FALSE(f.manager.slot_of("blob-9").has_value());

  ASSERT_TRUE(f.manager.publish("pending-4", random_adapter("w4")));
  const auto held = f.manager.acquire("pending-4");
  ASSERT_TRUE(held.has_value());
  EXPECT_THROW(f.manager.rekey("pending-4", "blob-4"), Error);
  EXPECT_EQ(f.manager.slot_of("pending-4"), held);
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
