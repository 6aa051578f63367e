// Data-parallel sums (backend/cluster/include/spindle/cluster/all_reduce.h): Gloo's ring
// all-reduce between ranks over loopback TCP, met through a rendezvous store; every rank gets
// the same bits; a rank that never arrives fails the others with Error(io) naming the group,
// and the group stays broken; options are checked by name.

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "spindle/cluster/all_reduce.h"
#include "spindle/core/error.h"

namespace spindle::cluster {
namespace {

GroupOptions options(const std::string& group, int rank, int size,
                     std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  GroupOptions o;
  o.group = group;
  o.rank = rank;
  o.size = size;
  o.host = "127.0.0.1";
  o.timeout = timeout;
  return o;
}

// rank r's buffer b element i: small integers, so every sum order gives the exact total.
float value(int rank, size_t b, size_t i) {
  return float((rank + 1) * 3 + int(b) * 7 + int(i % 13)) - 10.0f;
}

TEST(AllReduce, GlooSumsEveryBufferAcrossRanksAndEveryRankGetsTheSameBits) {
  constexpr int R = 3;
  const std::vector<size_t> sizes = {1, 1000, 0, 70001, 5};  // one segment and many
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::vector<std::vector<float>>> data(R);
  for (int r = 0; r < R; ++r) {
    for (size_t b = 0; b < sizes.size(); ++b) {
      std::vector<float> v(sizes[b]);
      for (size_t i = 0; i < v.size(); ++i) v[i] = value(r, b, i);
      data[size_t(r)].push_back(std::move(v));
    }
  }
  std::vector<std::thread> threads;
  std::vector<std::string> errors(R);
  for (int r = 0; r < R; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto group = make_all_reduce(store, options("g1", r, R));
        EXPECT_EQ(group->memory(), AllReduce::Memory::host);
        EXPECT_EQ(group->rank(), r);
        EXPECT_EQ(group->size(), R);
        for (int call = 0; call < 2; ++call) {  // the second reuses the connected mesh
          std::vector<std::span<float>> spans;
          for (auto& v : data[size_t(r)]) spans.emplace_back(v);
          group->sum(spans);
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < R; ++r) ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
  for (size_t b = 0; b < sizes.size(); ++b) {
    for (size_t i = 0; i < sizes[b]; ++i) {
      float once = 0.0f;
      for (int r = 0; r < R; ++r) once += value(r, b, i);
      const float twice = float(R) * once;  // the second call sums the first call's sums
      ASSERT_EQ(data[0][b][i], twice) << "buffer " << b << " element " << i;
      for (int r = 1; r < R; ++r) ASSERT_EQ(data[size_t(r)][b][i], data[0][b][i]);
    }
  }
}

TEST(AllReduce, AGroupOfOneLeavesTheBuffersAsTheyAre) {
  auto group = make_all_reduce(std::make_shared<MemoryStore>(), options("solo", 0, 1));
  std::vector<float> v = {1.5f, -2.0f};
  std::vector<std::span<float>> spans = {std::span<float>(v)};
  group->sum(spans);
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
}

TEST(AllReduce, ARankThatNeverArrivesFailsTheOthersWithTheGroupNamedAndBreaksTheGroup) {
  auto store = std::make_shared<MemoryStore>();
  auto group = make_all_reduce(store, options("lonely", 0, 2, std::chrono::milliseconds(300)));
  std::vector<float> v(16, 1.0f);
  std::vector<std::span<float>> spans = {std::span<float>(v)};
  try {
    group->sum(spans);
    FAIL() << "a sum without the other rank returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
    EXPECT_NE(std::string(e.what()).find("'lonely' (rank 0 of 2"), std::string::npos) << e.what();
  }
  try {
    group->sum(spans);
    FAIL() << "a broken group summed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
    EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
  }
  EXPECT_EQ(v, std::vector<float>(16, 1.0f));
}

TEST(AllReduce, OptionsAreCheckedByName) {
  auto store = std::make_shared<MemoryStore>();
  auto expect_invalid = [&](GroupOptions o, const std::string& part) {
    try {
      make_all_reduce(store, o);
      FAIL() << "accepted " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_invalid(options("", 0, 2), "group name");
  expect_invalid(options("a/b", 0, 2), "without '/'");
  expect_invalid(options("g", 2, 2), "rank 2 outside 0..1");
  expect_invalid(options("g", 0, 0), "size 0");
  expect_invalid(options("g", 0, 2, std::chrono::milliseconds(0)), "timeout");
}

TEST(AllReduce, MemoryStoreForgetsAGroupsKeysOnly) {
  MemoryStore s;
  s.set("g1/a", "1");
  s.set("g1/b", "2");
  s.set("g10/a", "3");
  s.erase_group("g1");
  EXPECT_FALSE(s.get("g1/a"));
  EXPECT_EQ(s.get("g10/a").value_or(""), "3");
  EXPECT_EQ(s.size(), 1u);
  try {
    wait_for_key(s, "g2/x", std::chrono::milliseconds(30), "rank 1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
    EXPECT_NE(std::string(e.what()).find("'g2/x'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spindle::cluster
