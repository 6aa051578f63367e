// Host cache: LRU by bytes, pinning, refusal when only pinned entries could make room, stats.

#include <gtest/gtest.h>

#include "residency_fixtures.h"
#include "spindle/adapters/host_cache.h"
#include "spindle/core/error.h"

namespace spindle::adapters {
namespace {

using testing::adapter_of;

TEST(HostCache, EvictsLeastRecentlyUsedByBytes) {
  HostCache cache(/*capacity_bytes=*/300);
  cache.insert("a", adapter_of(10));  // 80 bytes each
  cache.insert("b", adapter_of(10));
  cache.insert("c", adapter_of(10));
  EXPECT_NE(cache.get("a"), nullptr);  // a is now most recent; b is the LRU
  cache.insert("d", adapter_of(10));   // 320 > 300: evicts b
  EXPECT_FALSE(cache.contains("b"));
  EXPECT_TRUE(cache.contains("a"));
  EXPECT_EQ(cache.ids(), (std::vector<std::string>{"d", "a", "c"}));
  EXPECT_EQ(cache.get("b"), nullptr);
  const auto s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.bytes, 240u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_DOUBLE_EQ(s.hit_rate(), 0.5);
}

TEST(HostCache, PinnedEntriesAreNeverEvicted) {
  HostCache cache(/*capacity_bytes=*/200);
  cache.insert("a", adapter_of(10));
  cache.insert("b", adapter_of(10));
  cache.pin("a");
  cache.insert("c", adapter_of(10));  // evicts b (a is pinned though older)
  EXPECT_TRUE(cache.contains("a"));
  EXPECT_FALSE(cache.contains("b"));
  cache.pin("c");
  try {
    cache.insert("d", adapter_of(10));
    FAIL() << "insert over budget with everything pinned must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::resource);
    EXPECT_NE(std::string(e.what()).find("cannot fit revision 'd' (80 bytes): 160 of 200 bytes are pinned"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cache.stats().entries, 2u);  // the refusal changed nothing
  cache.unpin("c");
  cache.insert("d", adapter_of(10));
  EXPECT_FALSE(cache.contains("c"));
  EXPECT_TRUE(cache.contains("a"));
  EXPECT_EQ(cache.stats().pinned, 1u);
}

TEST(HostCache, RefusesOversizedAndBadPins) {
  HostCache cache(/*capacity_bytes=*/100);
  EXPECT_THROW(cache.insert("big", adapter_of(20)), Error);
  EXPECT_THROW(cache.pin("nope"), Error);
  cache.insert("a", adapter_of(5));
  EXPECT_THROW(cache.unpin("a"), Error);
  cache.pin("a");
  cache.pin("a");
  cache.unpin("a");
  EXPECT_EQ(cache.stats().pinned, 1u);  // pins nest
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_EQ(cache.stats().bytes, 0u);
}

TEST(HostCache, ReplaceKeepsByteAccounting) {
  HostCache cache(/*capacity_bytes=*/100);
  cache.insert("a", adapter_of(5));
  cache.insert("a", adapter_of(10));
  EXPECT_EQ(cache.stats().bytes, 80u);
  EXPECT_EQ(cache.stats().entries, 1u);
}

}  // namespace
}  // namespace spindle::adapters
