// The event stream and the Residency model against a real spindled: sampling a fresh policy
// puts its revision on a device slot, which the model shows (from `status` polls and from
// `residency` events); bob's stream never names alice's revision.

#include "studio_fixture.h"
#include "spindle/ui/event_stream.h"
#include "spindle/ui/residency_model.h"

namespace spindle::testing {
namespace {

using namespace protocol;

class ResidencyTest : public StudioTest {
 protected:
  // A policy of alice with one saved revision; returns (address, the revision's blob id: the
  // residency key that placements name).
  std::pair<std::string, std::string> saved_policy() {
    auto c = client();
    CreateTrainingRequest req;
    req.policy = unique("resid");
    req.rank = 4;
    const auto s = c->create_training(req);
    const auto saved = c->save_weights(s.session_id);
    c->close_training(s.session_id);
    const auto shown = c->catalog_show(saved.address);
    EXPECT_EQ(shown.revision.id, saved.revision_id);
    return {s.policy_address, shown.revision.blob};
  }
};

TEST_F(ResidencyTest, SampledRevisionShowsOnADeviceSlot) {
  auto conn = open_connection();
  ui::ResidencyModel model(conn.get());
  model.start(100);
  ASSERT_TRUE(QTest::qWaitFor([&] { return model.hasStatus(); }, 10000));
  const auto [address, revision] = saved_policy();
  const std::vector<int32_t> prompt = client()->tokenize("Once upon a time");
  SamplingParamsMsg p;
  p.max_tokens = 4;
  p.temperature = 0;
  client()->sample(address + "@latest", prompt, 1, p);
  auto shown = [&, rev = QString::fromStdString(revision)] {
    for (const ui::SlotCell& c : model.slotCells())
      if (c.revision == rev) return true;
    return false;
  };
  ASSERT_TRUE(QTest::qWaitFor(shown, 15000)) << "revision never on a slot in the model";
  EXPECT_EQ(model.slotCells().size(), int(model.status().device_slots));
  EXPECT_GE(model.status().device_slots_used, 0u);
  EXPECT_FALSE(model.tokensHistory().isEmpty());
  EXPECT_LE(model.tokensHistory().size(), ui::ResidencyModel::kHistory);
}

TEST_F(ResidencyTest, ResidencyEventsStayWithinTheirTenant) {
  auto alice = open_connection(kAliceToken);
  auto bob = open_connection(kBobToken);
  ASSERT_TRUE(QTest::qWaitFor([&] { return alice->events()->isLive() && bob->events()->isLive(); }, 15000))
      << "event streams never became live (subscribe op)";
  std::vector<StatusReply> alice_events, bob_events;
  QObject::connect(alice->events(), &ui::EventStream::residency,
                   [&](const StatusReply& s) { alice_events.push_back(s); });
  QObject::connect(bob->events(), &ui::EventStream::residency,
                   [&](const StatusReply& s) { bob_events.push_back(s); });
  const auto [address, revision] = saved_policy();
  const std::vector<int32_t> prompt = client()->tokenize("The cat");
  SamplingParamsMsg p;
  p.max_tokens = 4;
  client()->sample(address + "@latest", prompt, 1, p);
  auto names = [&](const std::vector<StatusReply>& events) {
    for (const auto& s : events)
      for (const auto& pl : s.placements)
        if (pl.revision_id == revision) return true;
    return false;
  };
  ASSERT_TRUE(QTest::qWaitFor([&] { return names(alice_events); }, 15000))
      << "alice never got a residency event naming her revision";
  QTest::qWait(1500);  // residency events come at most once a second
  EXPECT_FALSE(names(bob_events)) << "bob saw alice's revision";
}

}  // namespace
}  // namespace spindle::testing
