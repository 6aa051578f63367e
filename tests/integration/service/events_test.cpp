// Tenant-scoped events on the request socket (op subscribe): over IPC and over TCP with CURVE,
// alice's subscriptions see every metrics event of her GRPO run and bob's see none; residency
// events show a tenant only its own placements; unsubscribe ends the stream with its final
// "closed" message then an Empty reply, only on the subscribing connection; the per-tenant cap;
// and a daemon stop closes every subscription.

#include <zmq.h>

#include <nlohmann/json.hpp>

#include "stream_util.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

std::pair<std::string, std::string> keypair() {
  char pub[41], sec[41];
  EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
  return {pub, sec};
}

std::string small_run(const std::string& policy) {
  json p = {{"name", policy},
            {"rank", 4},
            {"alpha", 8},
            {"learning_rate", 1e-2},
            {"dataset", {{"name", "inline"}, {"prompts", {"Once upon a time", "One day"}}}},
            {"reward", {{"terms", {{{"name", "cat"}, {"plugin", "keywords"}, {"weight", 1},
                                     {"config", {{"present", {"cat"}}}}}}}}}};
  json c = {{"seed", 3},       {"steps", 2},      {"group_size", 2}, {"prompts_per_step", 2},
            {"max_tokens", 8}, {"eval_every", 0}, {"save_every", 0}, {"eval_prompts", 0}};
  c["policies"] = {p};
  return c.dump();
}

// Sends subscribe and reads its first message, which must be "subscribed".
uint64_t subscribe(RawClient& c, std::vector<std::string> topics,
                   Encoding encoding = Encoding::binary) {
  const uint64_t id = c.send(Op::subscribe, SubscribeRequest{std::move(topics)}, {}, encoding);
  const auto first = read_until(c, id, [](const Reply&) { return true; }, 10000);
  EXPECT_EQ(first.size(), 1u);
  if (first.empty()) return id;
  EXPECT_TRUE(first[0].ok) << first[0].error.code << ": " << first[0].error.message;
  if (first[0].ok) {
    EXPECT_EQ(std::get<EventReply>(first[0].body).topic, "subscribed");
    EXPECT_FALSE(std::get<EventReply>(first[0].body).final);
  }
  return id;
}

std::vector<EventReply> events_of(const std::vector<Reply>& replies, uint64_t id) {
  std::vector<EventReply> out;
  for (const Reply& r : replies) {
    if (r.request_id != id) continue;
    EXPECT_TRUE(r.ok) << r.error.message;
    if (r.ok) out.push_back(std::get<EventReply>(r.body));
  }
  return out;
}

TEST(ServiceEvents, TenantScopedOverIpcAndCurve) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = two_tenant_dir("events");
  const auto [alice_pub, alice_sec] = keypair();
  const auto [bob_pub, bob_sec] = keypair();
  fs::create_directories(dir / "curve");
  std::ofstream(dir / "curve" / "authorized_clients") << alice_pub << "\n" << bob_pub << "\n";
  Daemon daemon(dir, {"--tcp", "tcp://127.0.0.1:*"});
  std::string server_pub = read_text(dir / "curve" / "server.pub");
  server_pub.resize(40);

  RawClient alice_ipc(daemon.ipc(), kTokenA), bob_ipc(daemon.ipc(), kTokenB);
  RawClient alice_tcp(daemon.tcp(), kTokenA, CurveKeys{server_pub, alice_pub, alice_sec});
  RawClient bob_tcp(daemon.tcp(), kTokenB, CurveKeys{server_pub, bob_pub, bob_sec});
  const uint64_t a_ipc = subscribe(alice_ipc, {"metrics"});
  const uint64_t b_ipc = subscribe(bob_ipc, {"metrics"});
  const uint64_t a_tcp = subscribe(alice_tcp, {}, Encoding::json);  // both topics, J encoded
  const uint64_t b_tcp = subscribe(bob_tcp, {"metrics", "residency"});

  RawClient ctl(daemon.ipc(), kTokenA);
  const auto started = ctl.ok<RunStartReply>(Op::run_start, RunStartRequest{small_run("ev"), false});
  // The run's last event has its final status.
  auto is_done = [&](const Reply& r) {
    if (!r.ok) return true;
    const auto& e = std::get<EventReply>(r.body);
    return e.topic == "metrics" && e.run.run.id == started.run_id &&
           (e.run.run.status == "done" || e.run.run.status == "failed");
  };
  const auto got_ipc = events_of(read_until(alice_ipc, a_ipc, is_done, 300000), a_ipc);
  const auto got_tcp = events_of(read_until(alice_tcp, a_tcp, is_done, 60000), a_tcp);
  for (const auto* got : {&got_ipc, &got_tcp}) {
    size_t metrics = 0;
    std::set<int64_t> steps;
    for (const EventReply& e : *got) {
      if (e.topic != "metrics") continue;
      ++metrics;
      EXPECT_EQ(e.run.run.tenant, "alice");
      EXPECT_EQ(e.run.run.id, started.run_id);
      for (const auto& m : e.run.metrics) steps.insert(m.step);
    }
    EXPECT_GE(metrics, 3u);  // steps 0..2, then the final status
    EXPECT_EQ(steps, (std::set<int64_t>{0, 1, 2}));
    ASSERT_FALSE(got->empty());
    EXPECT_EQ(got->back().run.run.status, "done") << got->back().run.run.error;
  }
  // Bob's subscriptions carry none of it (his residency events may come, empty of placements).
  for (auto [c, id] : {std::pair{&bob_ipc, b_ipc}, std::pair{&bob_tcp, b_tcp}}) {
    for (const EventReply& e : events_of(drain(*c, 1500), id)) {
      EXPECT_NE(e.topic, "metrics") << "bob saw run " << e.run.run.id;
      EXPECT_TRUE(e.status.placements.empty());
    }
  }

  // Unsubscribe: only on the subscribing connection; the final "closed", then Empty.
  // (Every client numbers its requests from 1: the ids match, the connections do not.)
  const Reply foreign = ctl.call(Op::unsubscribe, UnsubscribeRequest{a_ipc});
  EXPECT_EQ(foreign.error.code, errc::not_found);
  const uint64_t u = alice_ipc.send(Op::unsubscribe, UnsubscribeRequest{a_ipc});
  const auto closing = read_until(alice_ipc, a_ipc, [](const Reply& r) { return is_final_reply(r); });
  ASSERT_FALSE(closing.empty());
  EXPECT_EQ(std::get<EventReply>(closing.back().body).topic, "closed");
  EXPECT_TRUE(std::get<EventReply>(closing.back().body).final);
  const auto done = read_until(alice_ipc, u, [](const Reply&) { return true; });
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].ok);
  EXPECT_TRUE(std::holds_alternative<Empty>(done[0].body));
  EXPECT_EQ(alice_ipc.call(Op::unsubscribe, UnsubscribeRequest{a_ipc}).error.code, errc::not_found);

  // Stopping the daemon closes the others.
  EXPECT_EQ(daemon.terminate(), 0);
  for (auto [c, id] : {std::pair{&alice_tcp, a_tcp}, std::pair{&bob_ipc, b_ipc},
                       std::pair{&bob_tcp, b_tcp}}) {
    const auto last = read_until(*c, id, [](const Reply& r) { return is_final_reply(r); }, 10000);
    ASSERT_FALSE(last.empty());
    EXPECT_EQ(std::get<EventReply>(last.back().body).topic, "closed");
  }
}

TEST(ServiceEvents, ResidencyShowsOnlyOwnPlacements) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(two_tenant_dir("events_res"), {});
  RawClient alice(daemon.ipc(), kTokenA), alice_sub(daemon.ipc(), kTokenA);
  RawClient bob_sub(daemon.ipc(), kTokenB);
  const uint64_t a = subscribe(alice_sub, {"residency"});
  const uint64_t b = subscribe(bob_sub, {"residency"});
  CreateTrainingRequest create;
  create.policy = "res";
  create.rank = 2;
  const auto s = alice.ok<TrainingSessionReply>(Op::create_training, create);
  const auto saved = alice.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "", ""});
  Frames f;
  const SampleRequest sreq = sample_request(saved.address, {1, 2, 3}, f, 4, 0.0f, 0);
  alice.ok<SampleReply>(Op::sample, sreq, f);
  const auto mine = read_until(alice_sub, a, [](const Reply& r) {
    return !r.ok || !std::get<EventReply>(r.body).status.placements.empty();
  }, 20000);
  ASSERT_FALSE(mine.empty());
  ASSERT_TRUE(mine.back().ok);
  const StatusReply& st = std::get<EventReply>(mine.back().body).status;
  EXPECT_EQ(std::get<EventReply>(mine.back().body).topic, "residency");
  EXPECT_EQ(st.placements.size(), 1u);
  EXPECT_GT(st.device_slots, 0u);  // aggregate counters stay
  // Bob gets his (empty) view once and nothing of alice's.
  const auto theirs = events_of(drain(bob_sub, 2500), b);
  EXPECT_FALSE(theirs.empty());
  for (const EventReply& e : theirs) {
    EXPECT_EQ(e.topic, "residency");
    EXPECT_TRUE(e.status.placements.empty());
  }
  EXPECT_EQ(daemon.terminate(), 0);
}

TEST(ServiceEvents, CapPerTenantAndValidation) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(two_tenant_dir("events_cap"), {});
  RawClient bob(daemon.ipc(), kTokenB), alice(daemon.ipc(), kTokenA);
  for (int i = 0; i < 64; ++i) bob.send(Op::subscribe, SubscribeRequest{{"metrics"}});
  size_t subscribed = 0;
  for (const Reply& r : drain(bob, 2000)) subscribed += r.ok ? 1 : 0;
  EXPECT_EQ(subscribed, 64u);
  const Reply over = bob.call(Op::subscribe, SubscribeRequest{{"metrics"}});
  EXPECT_EQ(over.error.code, errc::resource_exhausted);
  // Another tenant is not affected; an unknown topic is refused.
  EXPECT_TRUE(std::get<EventReply>(alice.call(Op::subscribe, SubscribeRequest{}).body).topic ==
              "subscribed");
  EXPECT_EQ(alice.call(Op::subscribe, SubscribeRequest{{"gossip"}}).error.code,
            errc::invalid_argument);
  // Subscriptions are not requests in flight (draining does not wait for them).
  EXPECT_EQ(alice.ok<StatusReply>(Op::status, Empty{}).queue_depth, 0u);
  EXPECT_EQ(daemon.terminate(), 0);
  EXPECT_EQ(daemon.log().find("drain timeout"), std::string::npos);
}

}  // namespace
}  // namespace spindle::testing
