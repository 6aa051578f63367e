// The status op's residency counters (StatusReply v4) on a real spindled with one serving slot:
// two adapters requested at once make the second wait for the slot (a busy park) and then take
// it (a slot eviction; a save_weights, which publishes into a slot, evicts too); after a restart, the first request of an adapter that is only on disk
// is a cold park. The counters start at zero with each daemon, `spindle status` prints them and
// /metrics exposes the same numbers.

#include <map>
#include <optional>

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

std::string saved_address(RawClient& c, const std::string& policy, uint64_t seed) {
  CreateTrainingRequest create;
  create.policy = policy;
  create.rank = 2;
  create.seed = seed;
  const auto s = c.ok<TrainingSessionReply>(Op::create_training, create);
  const auto saved = c.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "", ""});
  c.ok<Empty>(Op::close_training, SessionRequest{s.session_id});
  return saved.address;
}

std::pair<RequestBody, Frames> sample(const std::string& address, int32_t max_tokens,
                                      uint64_t seed) {
  Frames f;
  SampleRequest s = sample_request(address, {1, 400, 30}, f, max_tokens, 1.0f, seed);
  return {RequestBody{s}, std::move(f)};
}

TEST(ResidencyCounters, BusyAndColdParksAndEvictionsAreCountedSinceStart) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  const fs::path dir = fresh_dir("parks");
  std::string p1, p2;
  {
    Daemon d(dir, {"--serving-slots", "1"});
    RawClient c(d.ipc(), d.token());
    p1 = saved_address(c, "p1", 1);
    p2 = saved_address(c, "p2", 2);
    const auto fresh = c.ok<StatusReply>(Op::status, Empty{});
    EXPECT_EQ(fresh.busy_parks, 0u);
    // save_weights publishes its revision into a serving slot: p2's save took the one slot
    // from p1's.
    EXPECT_EQ(fresh.slot_evictions, 1u);
    // Long requests on p1 in flight, then p2: p2 waits for the one slot (both are in host
    // memory: a save puts its revision there), then takes it from p1.
    std::vector<uint64_t> ids;
    for (uint64_t k = 0; k < 3; ++k) {
      auto [body, frames] = sample(p1, 120, k + 1);
      ids.push_back(c.send(Op::sample, std::move(body), std::move(frames)));
    }
    {
      auto [body, frames] = sample(p2, 4, 9);
      ids.push_back(c.send(Op::sample, std::move(body), std::move(frames)));
    }
    std::map<uint64_t, Reply> got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (got.size() < ids.size() && std::chrono::steady_clock::now() < deadline) {
      if (auto r = c.receive(200)) got[r->request_id] = *r;
    }
    ASSERT_EQ(got.size(), ids.size());
    for (const auto& [id, r] : got) EXPECT_TRUE(r.ok) << r.error.message;
    const auto s = c.ok<StatusReply>(Op::status, Empty{});
    EXPECT_GE(s.busy_parks, 1u) << "p2 found the one slot taken";
    EXPECT_GE(s.slot_evictions, fresh.slot_evictions + 1) << "p2 took the slot from p1";
    EXPECT_EQ(s.cold_parks, 0u) << "both revisions were in host memory since their save";
    EXPECT_EQ(d.terminate(), 0);
  }
  // A new daemon on the same data: the counters start again, and p1 is only on disk.
  Daemon d(dir, {"--serving-slots", "1"});
  RawClient c(d.ipc(), d.token());
  auto [body, frames] = sample(p1, 4, 3);
  c.ok<SampleReply>(Op::sample, body, frames);
  const auto s = c.ok<StatusReply>(Op::status, Empty{});
  EXPECT_GE(s.cold_parks, 1u) << "p1's first request after the restart needed a load";
  EXPECT_EQ(s.busy_parks, 0u);
  EXPECT_EQ(d.terminate(), 0);
}

// The handoff: save_weights places the revision in a serving slot before it replies, so its
// first request is a device hit (no slot fill from host memory, no load); a save_state
// checkpoint takes no slot, so its first request fills one from host memory.
TEST(ResidencyCounters, SaveWeightsRevisionIsADeviceHitAtItsFirstRequest) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  Daemon d(fresh_dir("handoff-hit"), {});
  RawClient c(d.ipc(), d.token());
  const std::string weights = saved_address(c, "w", 1);
  {
    auto [body, frames] = sample(weights, 4, 1);
    c.ok<SampleReply>(Op::sample, body, frames);
  }
  auto s = c.ok<StatusReply>(Op::status, Empty{});
  EXPECT_EQ(s.device_hit_rate, 1.0) << "the saved revision was already in a slot";
  EXPECT_EQ(s.host_hit_rate, 0.0) << "the host cache was never asked";
  EXPECT_EQ(s.cold_parks, 0u);

  CreateTrainingRequest create;
  create.policy = "st";
  create.rank = 2;
  create.seed = 2;
  const auto session = c.ok<TrainingSessionReply>(Op::create_training, create);
  const auto state = c.ok<SaveReply>(Op::save_state, SaveRequest{session.session_id, "", ""});
  {
    auto [body, frames] = sample(state.address, 4, 2);
    c.ok<SampleReply>(Op::sample, body, frames);
  }
  s = c.ok<StatusReply>(Op::status, Empty{});
  EXPECT_EQ(s.device_hit_rate, 0.5) << "the checkpoint's first request filled a slot";
  EXPECT_EQ(s.host_hit_rate, 1.0) << "from host memory, where its save put it";
  EXPECT_EQ(s.cold_parks, 0u);
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace spindle::testing
