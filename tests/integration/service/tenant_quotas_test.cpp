// Per-tenant quotas (backend/service/src/tenant_quotas.h, SessionTable): with two tenants, the
// one at its quota is refused with resource_exhausted naming the tenant, the quota and its flag,
// while the other is still served; the quota comes back when the work ends.
//   --tenant-max-sessions       (set through --config JSON: the key is the flag's name)
//   --tenant-max-queued-tokens
//   --tenant-max-serving-slots
// "In flight" is made by pipelining: requests sent back to back reach the front thread within
// microseconds, while each one's sampling takes hundreds of engine steps.

#include <map>

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Sends every request at once, then collects the replies by request id (in send order).
std::vector<Reply> pipelined(RawClient& c,
                             std::vector<std::pair<Op, std::pair<RequestBody, Frames>>> requests) {
  std::vector<uint64_t> ids;
  for (auto& [op, body] : requests)
    ids.push_back(c.send(op, std::move(body.first), std::move(body.second)));
  std::map<uint64_t, Reply> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (got.size() < ids.size() && std::chrono::steady_clock::now() < deadline) {
    if (auto r = c.receive(200)) got[r->request_id] = *r;
  }
  std::vector<Reply> out;
  for (uint64_t id : ids) {
    if (!got.count(id)) throw std::runtime_error("no reply to request " + std::to_string(id));
    out.push_back(got[id]);
  }
  return out;
}

std::pair<RequestBody, Frames> sample(const std::string& address, int32_t max_tokens,
                                      int32_t num_samples, uint64_t seed = 1) {
  Frames f;
  SampleRequest s = sample_request(address, {1, 400, 30}, f, max_tokens, 1.0f, seed, num_samples);
  return {RequestBody{s}, std::move(f)};
}

// A fresh policy; `seed` tells its initial weights apart (blobs are content-addressed: two
// policies with equal weights share one adapter, one residency key).
CreateTrainingRequest create(const std::string& policy, uint64_t seed = 0) {
  CreateTrainingRequest c;
  c.policy = policy;
  c.rank = 2;
  c.seed = seed;
  return c;
}

TEST(TenantQuotas, SessionsPerTenant) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  const fs::path dir = two_tenant_dir("quota_sessions");
  std::ofstream(dir / "quotas.json") << R"({"tenant-max-sessions": 1})";
  Daemon d(dir, {"--config", (dir / "quotas.json").string()});
  RawClient alice(d.ipc(), kTokenA), bob(d.ipc(), kTokenB);

  const auto s1 = alice.ok<TrainingSessionReply>(Op::create_training, create("a1"));
  const Reply refused = alice.call(Op::create_training, create("a2"));
  EXPECT_EQ(refused.error.code, errc::resource_exhausted) << refused.error.message;
  EXPECT_TRUE(has(refused.error.message, "tenant 'alice' holds 1 training session(s)"))
      << refused.error.message;
  EXPECT_TRUE(has(refused.error.message, "--tenant-max-sessions 1")) << refused.error.message;
  // Refused before anything was created: no policy a2.
  for (const auto& p : alice.ok<PolicyListReply>(Op::catalog_list, CatalogListRequest{}).policies) {
    EXPECT_NE(p.name, "a2");
  }
  // Bob is not alice: his session opens.
  const auto b1 = bob.ok<TrainingSessionReply>(Op::create_training, create("b1"));

  // Closing gives the place back. Three creates pipelined: exactly one opens (a create holds
  // its place from admission, before the engine thread opens the session).
  alice.ok<Empty>(Op::close_training, SessionRequest{s1.session_id});
  const std::vector<Reply> burst = pipelined(alice, {{Op::create_training, {create("a3"), {}}},
                                                     {Op::create_training, {create("a4"), {}}},
                                                     {Op::create_training, {create("a5"), {}}}});
  int opened = 0;
  for (const Reply& r : burst) {
    if (r.ok) {
      ++opened;
    } else {
      EXPECT_EQ(r.error.code, errc::resource_exhausted) << r.error.message;
    }
  }
  EXPECT_EQ(opened, 1);
  bob.ok<Empty>(Op::close_training, SessionRequest{b1.session_id});
  EXPECT_EQ(d.terminate(), 0);
  fs::remove_all(dir);
}

TEST(TenantQuotas, QueuedSamplingTokensPerTenant) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  const fs::path dir = two_tenant_dir("quota_tokens");
  Daemon d(dir, {"--tenant-max-queued-tokens", "1000"});
  RawClient alice(d.ipc(), kTokenA), bob(d.ipc(), kTokenB);

  // One request over the quota on its own: 3 prompt tokens + 4 x 300.
  auto [big, big_frames] = sample("stories260K", 300, 4);
  const Reply alone = alice.call(Op::sample, big, big_frames);
  EXPECT_EQ(alone.error.code, errc::resource_exhausted) << alone.error.message;
  EXPECT_TRUE(has(alone.error.message, "tenant 'alice': this request needs 1203 sampling tokens"))
      << alone.error.message;
  EXPECT_TRUE(has(alone.error.message, "quota of 1000 (--tenant-max-queued-tokens)"))
      << alone.error.message;

  // 803 tokens each: one fits, a second in flight would not. Bob's goes through meanwhile.
  std::vector<std::pair<Op, std::pair<RequestBody, Frames>>> burst;
  for (uint64_t i = 0; i < 5; ++i) burst.push_back({Op::sample, sample("stories260K", 200, 4, i)});
  const uint64_t bob_id = [&] {
    auto [body, frames] = sample("stories260K", 200, 4);
    return bob.send(Op::sample, std::move(body), std::move(frames));
  }();
  const std::vector<Reply> replies = pipelined(alice, std::move(burst));
  int served = 0, refused = 0;
  for (const Reply& r : replies) {
    if (r.ok) {
      ++served;
      continue;
    }
    ++refused;
    EXPECT_EQ(r.error.code, errc::resource_exhausted) << r.error.message;
    EXPECT_TRUE(has(r.error.message, "tenant 'alice': 803 sampling tokens already queued"))
        << r.error.message;
    EXPECT_TRUE(has(r.error.message, "--tenant-max-queued-tokens")) << r.error.message;
  }
  EXPECT_GE(served, 1);
  EXPECT_GE(refused, 1);
  std::optional<Reply> bob_reply;
  while ((bob_reply = bob.receive(120000)) && bob_reply->request_id != bob_id) {
  }
  ASSERT_TRUE(bob_reply.has_value());
  EXPECT_TRUE(bob_reply->ok) << bob_reply->error.message;

  // Everything answered: alice's quota is whole again.
  auto [again, again_frames] = sample("stories260K", 200, 4);
  EXPECT_EQ(alice.ok<SampleReply>(Op::sample, again, again_frames).sequences.size(), 4u);
  EXPECT_EQ(d.terminate(), 0);
  fs::remove_all(dir);
}

// A saved revision of a fresh policy of `c`'s tenant; its full address.
std::string saved_revision(RawClient& c, const std::string& tenant, const std::string& policy,
                           uint64_t seed) {
  const auto s = c.ok<TrainingSessionReply>(Op::create_training, create(policy, seed));
  const auto saved = c.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "", ""});
  c.ok<Empty>(Op::close_training, SessionRequest{s.session_id});
  return "spindle://" + tenant + "/" + policy + "@" + saved.revision_id;
}

TEST(TenantQuotas, ServingSlotsPerTenant) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  const fs::path dir = two_tenant_dir("quota_slots");
  Daemon d(dir, {"--tenant-max-serving-slots", "1"});
  RawClient alice(d.ipc(), kTokenA), bob(d.ipc(), kTokenB);
  const std::string p1 = saved_revision(alice, "alice", "p1", 1);
  const std::string p2 = saved_revision(alice, "alice", "p2", 2);
  const std::string b1 = saved_revision(bob, "bob", "b1", 3);
  // Resolve each once, so the burst below is admitted on the front thread in send order.
  for (const std::string& a : {p1, p2}) {
    auto [body, frames] = sample(a, 2, 1);
    alice.ok<SampleReply>(Op::sample, body, frames);
  }

  const uint64_t bob_id = [&] {
    auto [body, frames] = sample(b1, 200, 4);
    return bob.send(Op::sample, std::move(body), std::move(frames));
  }();
  // Three long requests on p1 ahead of p2's: p2 is admitted only if all three were done.
  const std::vector<Reply> r = pipelined(alice, {{Op::sample, sample(p1, 200, 4, 1)},
                                                 {Op::sample, sample(p1, 200, 4, 2)},
                                                 {Op::sample, sample(p1, 200, 4, 3)},
                                                 {Op::sample, sample(p2, 4, 1)},
                                                 {Op::sample, sample(p1, 4, 1)},
                                                 {Op::sample, sample("stories260K", 4, 1)}});
  for (int i : {0, 1, 2, 4})
    EXPECT_TRUE(r[i].ok) << "same adapter, one slot: " << r[i].error.message;
  EXPECT_EQ(r[3].error.code, errc::resource_exhausted) << r[3].error.message;
  EXPECT_TRUE(
      has(r[3].error.message, "tenant 'alice': sampling requests in flight on 1 adapter(s)"))
      << r[3].error.message;
  EXPECT_TRUE(has(r[3].error.message, "--tenant-max-serving-slots 1")) << r[3].error.message;
  EXPECT_TRUE(r[5].ok) << "the bare base needs no slot: " << r[5].error.message;
  std::optional<Reply> bob_reply;
  while ((bob_reply = bob.receive(120000)) && bob_reply->request_id != bob_id) {
  }
  ASSERT_TRUE(bob_reply.has_value());
  EXPECT_TRUE(bob_reply->ok) << bob_reply->error.message;

  // p1's requests are done: p2 gets its slot.
  auto [body, frames] = sample(p2, 4, 1);
  alice.ok<SampleReply>(Op::sample, body, frames);
  EXPECT_EQ(d.terminate(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::testing
