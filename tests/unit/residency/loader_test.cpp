// Loader: coalescing, priority order, cancellation, failures, cache landing, stats. The fake
// source blocks each load until the test releases it, so every ordering here is forced.

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <unistd.h>

#include "../model/model_fixtures.h"
#include "residency_fixtures.h"
#include "spindle/adapters/revision_format.h"
#include "spindle/adapters/loader.h"

namespace spindle::adapters {
namespace {

using testing::FakeSource;

LoadFn fn_of(FakeSource& src) {
  return [&src](const std::string& id) { return src.load(id); };
}

TEST(Loader, ConcurrentRequestsCoalesceIntoOneLoad) {
  FakeSource src;
  HostCache cache(1 << 20);
  Loader loader(cache, fn_of(src), {/*threads=*/2});
  std::vector<LoadFuture> futures(8);
  std::vector<std::thread> clients;
  for (auto& f : futures) clients.emplace_back([&] { f = loader.request("a"); });
  for (auto& t : clients) t.join();
  src.release_all();
  for (auto& f : futures) EXPECT_EQ(f.get(), futures[0].get());
  EXPECT_EQ(src.loads("a"), 1);
  EXPECT_TRUE(cache.contains("a"));
  const auto s = loader.stats();
  EXPECT_EQ(s.requests, 8u);
  EXPECT_EQ(s.coalesced + s.cache_hits, 7u);
  EXPECT_EQ(s.loads_completed, 1u);
  // Landed in the host cache: the next request is ready at once and loads nothing.
  auto again = loader.request("a");
  EXPECT_EQ(again.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(src.loads("a"), 1);
}

TEST(Loader, HigherPriorityRunsFirstPrefetchLast) {
  FakeSource src;
  HostCache cache(1 << 20);
  Loader loader(cache, fn_of(src), {/*threads=*/1});
  auto blocker = loader.request("x");
  src.wait_started(1);  // the only thread is busy with x
  auto pre = loader.prefetch("pre");
  auto low = loader.request("low", /*priority=*/0);
  auto high = loader.request("high", /*priority=*/5);
  auto bumped = loader.request("bumped", /*priority=*/-1);
  loader.request("bumped", /*priority=*/9);  // raising a queued job's priority
  const auto s = loader.stats();
  EXPECT_EQ(s.queue_depth, 4u);
  EXPECT_EQ(s.running, 1u);
  EXPECT_TRUE(loader.in_flight("pre"));
  src.release_all();
  for (auto* f : {&blocker, &pre, &low, &high, &bumped}) f->get();
  EXPECT_EQ(src.started(), (std::vector<std::string>{"x", "bumped", "high", "low", "pre"}));
  EXPECT_EQ(loader.stats().loads_started, 5u);
  EXPECT_GE(loader.stats().wait_ms_max, 0.0);
}

TEST(Loader, CancelQueuedJobGivesWaitersTypedError) {
  FakeSource src;
  HostCache cache(1 << 20);
  Loader loader(cache, fn_of(src), {/*threads=*/1});
  auto x = loader.request("x");
  src.wait_started(1);
  auto y1 = loader.request("y");
  auto y2 = loader.request("y");
  EXPECT_TRUE(loader.cancel("y"));
  EXPECT_FALSE(loader.cancel("x"));  // running: not interrupted
  EXPECT_FALSE(loader.cancel("unknown"));
  EXPECT_THROW(y1.get(), LoadCancelled);
  try {
    y2.get();
    FAIL();
  } catch (const LoadCancelled& e) {
    EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos);
  }
  src.release_all();
  EXPECT_NE(x.get(), nullptr);
  EXPECT_EQ(src.loads("y"), 0);
  EXPECT_EQ(loader.stats().cancelled, 1u);
}

TEST(Loader, FailuresReachEveryWaiterAndAreNotCached) {
  FakeSource src;
  HostCache cache(1 << 20);
  Loader loader(cache, fn_of(src), {/*threads=*/2});
  auto a = loader.request("bad-1");
  auto b = loader.request("bad-1");
  src.release_all();
  EXPECT_THROW(a.get(), Error);
  EXPECT_THROW(b.get(), Error);
  EXPECT_FALSE(cache.contains("bad-1"));
  EXPECT_EQ(loader.stats().loads_failed, 1u);
  EXPECT_THROW(loader.request("bad-1").get(), Error);  // a new request retries
  EXPECT_EQ(src.loads("bad-1"), 2);
}

TEST(Loader, RefusedCacheInsertFailsTheWaiters) {
  FakeSource src;
  HostCache cache(/*capacity_bytes=*/40);
  cache.insert("pinned", testing::adapter_of(4));  // 32 bytes
  cache.pin("pinned");
  Loader loader(cache, fn_of(src), {/*threads=*/1});
  auto f = loader.request("x");  // another 32 bytes cannot fit next to the pinned entry
  src.release_all();
  try {
    f.get();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::resource);
    EXPECT_NE(std::string(e.what()).find("cannot fit revision 'x'"), std::string::npos);
  }
  EXPECT_EQ(loader.stats().loads_failed, 1u);
  EXPECT_THROW(Loader(cache, fn_of(src), {/*threads=*/0}), Error);
}

TEST(Loader, BlobStoreSourceDecodesRevisions) {
  const auto root = std::filesystem::temp_directory_path() /
                    ("spindle_loader_blobs_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  const engine::ModelConfig config = spindle::testing::tiny_config(engine::Arch::qwen3);
  const engine::LoraTarget targets[] = {engine::LoraTarget::q, engine::LoraTarget::down};
  const auto w = engine::LoraWeights::random(config, 2, 4.0f, targets, 5, 0.1f, 0.1f);
  BlobStore store(root);
  const std::string blob = store.put(encode_revision(w, revision_meta_for(w, {"base", "sum"})));
  HostCache cache(1 << 20);
  Loader loader(cache, blob_store_load_fn(store, config, [&](const std::string&) { return blob; }),
                {/*threads=*/1});
  const AdapterPtr got = loader.request("rev-1").get();
  ASSERT_EQ(got->modules.size(), w.modules.size());
  const auto& q = got->modules[0][size_t(engine::LoraTarget::q)];
  EXPECT_EQ(std::memcmp(q.A.data(), w.modules[0][0].A.data(), q.A.bytes()), 0);
  EXPECT_TRUE(cache.contains("rev-1"));
  engine::ModelConfig other = config;
  other.dim = 64;
  HostCache cache2(1 << 20);
  Loader wrong(cache2, blob_store_load_fn(store, other, [&](const std::string&) { return blob; }),
               {/*threads=*/1});
  try {
    wrong.request("rev-1").get();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("revision 'rev-1'"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(root);
}

TEST(Loader, ShutdownCancelsQueuedJobs) {
  FakeSource src;
  HostCache cache(1 << 20);
  LoadFuture queued;
  {
    Loader loader(cache, fn_of(src), {/*threads=*/1});
    auto running = loader.request("x");
    src.wait_started(1);
    queued = loader.request("y");
    std::thread releaser([&] { src.release("x"); });
    releaser.join();
    running.get();
    // y may have started after x finished; release it so shutdown never waits forever.
    src.release_all();
  }
  // Either y was cancelled at shutdown or it completed; both are valid, neither hangs.
  try {
    queued.get();
  } catch (const LoadCancelled&) {
  }
}

}  // namespace
}  // namespace spindle::adapters
