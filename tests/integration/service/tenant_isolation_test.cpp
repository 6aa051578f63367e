// Tenant isolation, table-driven over every op (issue 16). Alice owns a policy with a durable
// and a state revision, a live training session, a GRPO run and a subscription. Bob, with his
// own token, tries every op on each of them; each attempt must be refused exactly as for an
// object that does not exist (not_found: no existence oracle), listings must show him none of
// Alice's, and afterwards every one of Alice's objects must be as it was.
//
// scope_of() classifies every op in a switch without a default, compiled with -Werror=switch:
// an op added to the protocol does not compile here until it is classified, and a classified
// op without an attempt in the table fails the test.

#include <nlohmann/json.hpp>

#include <functional>
#include <map>

#include "daemon.h"

#pragma GCC diagnostic error "-Wswitch"

namespace spindle::testing {
namespace {

using namespace protocol;

enum class Scope {
  none,         // touches no tenant's object (handshake, capabilities, tokenizer ops, ...)
  own_tenant,   // lists or creates in the caller's own tenant only
  address,      // names a policy or revision address
  session,      // names a training session id
  run,          // names a run id
  subscription  // names a subscription of a connection
};

constexpr Scope scope_of(Op op) {
  switch (op) {
    case Op::handshake:
    case Op::capabilities:
    case Op::tokenize:
    case Op::detokenize:
    case Op::tokenizer_info:
    case Op::reward_plugins:
    case Op::plugin_rescan:
    case Op::datasets:
    case Op::cluster_status:
      return Scope::none;
    case Op::status:
    case Op::create_training:
    case Op::catalog_list:
    case Op::catalog_search:
    case Op::import_peft:
    case Op::run_start:
    case Op::run_list:
    case Op::subscribe:
    case Op::heartbeat:
      return Scope::own_tenant;
    case Op::create_training_from_state:
    case Op::sample:
    case Op::sample_stream:
    case Op::compute_logprobs:
    case Op::catalog_show:
    case Op::catalog_lineage:
    case Op::catalog_fork:
    case Op::catalog_rollback:
    case Op::catalog_tag:
    case Op::catalog_delete:
    case Op::catalog_promote:
    case Op::export_peft:
    case Op::reward_test:
      return Scope::address;
    case Op::forward:
    case Op::forward_backward:
    case Op::optim_step:
    case Op::save_weights:
    case Op::save_state:
    case Op::load_state:
    case Op::close_training:
      return Scope::session;
    case Op::run_status:
    case Op::run_stop:
    case Op::run_resume:
      return Scope::run;
    case Op::unsubscribe:
      return Scope::subscription;
  }
  return Scope::none;
}

std::string tiny_run_config() {
  nlohmann::json policy = {
      {"name", "secret-run"}, {"rank", 2}, {"alpha", 4}, {"learning_rate", 1e-2},
      {"dataset", {{"name", "inline"}, {"prompts", {"Once upon a time"}}}},
      {"reward", {{"terms", {{{"name", "cat"}, {"plugin", "keywords"}, {"weight", 1},
                              {"config", {{"present", {"cat"}}}}}}}}}};
  nlohmann::json c = {{"seed", 1}, {"steps", 1}, {"group_size", 2}, {"prompts_per_step", 1},
                      {"max_tokens", 4}, {"eval_every", 0}, {"save_every", 0},
                      {"eval_prompts", 0}};
  c["policies"] = {policy};
  return c.dump();
}

RewardTestRequest reward_test_of(const std::string& address) {
  RewardTestRequest r;
  r.spec_json = R"({"terms": [{"name": "cat", "plugin": "keywords", "weight": 1,
                              "config": {"present": ["cat"]}}]})";
  r.rows.push_back({"Once upon a time", "", ""});
  r.address = address;
  r.num_samples = 1;
  r.sampling_params.max_tokens = 4;
  return r;
}

bool names_alice(const std::string& text) { return text.find("alice") != std::string::npos; }

TEST(TenantIsolation, EveryOpOnAnotherTenantsObjectsIsNotFound) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  Daemon daemon(two_tenant_dir("isolation"), {});
  RawClient alice(daemon.ipc(), kTokenA), bob(daemon.ipc(), kTokenB);

  // Alice's objects.
  const auto session = alice.ok<TrainingSessionReply>(Op::create_training, training_request("secret", 1));
  train_step(alice, session.session_id, {1, 2, 3, 4, 5}, 1e-2f);
  const auto weights = alice.ok<SaveReply>(Op::save_weights, SaveRequest{session.session_id, "w", ""});
  const auto state = alice.ok<SaveReply>(Op::save_state, SaveRequest{session.session_id, "s", ""});
  ASSERT_EQ(sample_greedy(alice, weights.address, {1, 2, 3}, 4).ok, true);  // resident now
  const auto run = alice.ok<RunStartReply>(Op::run_start, RunStartRequest{tiny_run_config(), false});
  const uint64_t alice_sub = alice.send(Op::subscribe, SubscribeRequest{});
  const auto shown_before = alice.ok<PolicyReply>(Op::catalog_show, AddressRequest{weights.address});

  // Bob's own session, for load_state of Alice's state into it.
  const auto bob_session = bob.ok<TrainingSessionReply>(Op::create_training, training_request("mine", 2));

  // One attempt per op that names an object, each on Alice's.
  using Attempt = std::function<Reply()>;
  std::map<Op, Attempt> attempts;
  const std::string& sid = session.session_id;
  attempts[Op::create_training_from_state] = [&] {
    return bob.call(Op::create_training_from_state, CreateTrainingFromStateRequest{state.address});
  };
  for (Op op : {Op::forward, Op::forward_backward}) {
    attempts[op] = [&, op] {
      Frames f;
      const auto req = fb_request(sid, {{1, 2, 3, 4}}, f);
      return bob.call(op, req, f);
    };
  }
  attempts[Op::optim_step] = [&] {
    return bob.call(Op::optim_step, OptimStepRequest{sid, AdamParamsMsg{}});
  };
  attempts[Op::save_weights] = [&] { return bob.call(Op::save_weights, SaveRequest{sid, "", ""}); };
  attempts[Op::save_state] = [&] { return bob.call(Op::save_state, SaveRequest{sid, "", ""}); };
  attempts[Op::load_state] = [&] {
    return bob.call(Op::load_state, LoadStateRequest{bob_session.session_id, state.address});
  };
  attempts[Op::close_training] = [&] { return bob.call(Op::close_training, SessionRequest{sid}); };
  for (Op op : {Op::sample, Op::sample_stream}) {
    attempts[op] = [&, op] {
      Frames f;
      const auto req = sample_request(weights.address, {1, 2, 3}, f, 4, 0.0f, 1);
      return bob.call(op, req, f);
    };
  }
  attempts[Op::compute_logprobs] = [&] {
    Frames f;
    ComputeLogprobsRequest req;
    req.address = weights.address;
    req.prompt = add_tensor(f, std::span<const int32_t>(std::vector<int32_t>{1, 2, 3}));
    return bob.call(Op::compute_logprobs, req, f);
  };
  for (Op op : {Op::catalog_show, Op::catalog_rollback, Op::catalog_delete, Op::catalog_promote,
                Op::export_peft}) {
    attempts[op] = [&, op] { return bob.call(op, AddressRequest{weights.address}); };
  }
  attempts[Op::catalog_lineage] = [&] {
    return bob.call(Op::catalog_lineage, LineageRequest{weights.address});
  };
  attempts[Op::catalog_fork] = [&] {
    return bob.call(Op::catalog_fork, ForkRequest{weights.address, "stolen"});
  };
  attempts[Op::catalog_tag] = [&] {
    return bob.call(Op::catalog_tag, TagRequest{weights.address, {"bob-was-here"}, {}});
  };
  attempts[Op::reward_test] = [&] { return bob.call(Op::reward_test, reward_test_of(weights.address)); };
  attempts[Op::run_status] = [&] { return bob.call(Op::run_status, RunStatusRequest{run.run_id, 0}); };
  for (Op op : {Op::run_stop, Op::run_resume}) {
    attempts[op] = [&, op] { return bob.call(op, RunIdRequest{run.run_id}); };
  }
  attempts[Op::unsubscribe] = [&] { return bob.call(Op::unsubscribe, UnsubscribeRequest{alice_sub}); };

  int attempted = 0;
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = Op(i);
    const Scope scope = scope_of(op);
    if (scope == Scope::none || scope == Scope::own_tenant) continue;
    ASSERT_TRUE(attempts.contains(op)) << op_name(op) << " names an object but has no attempt here";
    const Reply r = attempts.at(op)();
    EXPECT_FALSE(r.ok) << op_name(op) << " on Alice's object succeeded for Bob";
    EXPECT_EQ(r.error.code, errc::not_found) << op_name(op) << ": " << r.error.message;
    ++attempted;
  }
  EXPECT_EQ(attempted, int(attempts.size()));

  // Listings and own-tenant ops: nothing of Alice's, Bob's names are his own.
  const auto list = bob.ok<PolicyListReply>(Op::catalog_list, CatalogListRequest{});
  for (const auto& p : list.policies) EXPECT_FALSE(names_alice(p.address)) << p.address;
  for (const auto& p : bob.ok<PolicyListReply>(Op::catalog_search, CatalogSearchRequest{"secret", 20}).policies) {
    EXPECT_FALSE(names_alice(p.address)) << p.address;
  }
  for (const auto& r : bob.ok<RunListReply>(Op::run_list, RunListRequest{}).runs) {
    EXPECT_NE(r.id, run.run_id);
  }
  for (const auto& p : bob.ok<StatusReply>(Op::status, Empty{}).placements) {
    EXPECT_NE(p.revision_id, weights.revision_id) << "Bob's status shows Alice's placement";
  }
  const auto hb = bob.ok<HeartbeatReply>(Op::heartbeat, HeartbeatRequest{{sid}});
  EXPECT_EQ(hb.unknown, std::vector<std::string>{sid}) << "Bob's heartbeat renewed Alice's lease";
  const auto same_name = bob.ok<TrainingSessionReply>(Op::create_training, training_request("secret", 3));
  EXPECT_EQ(same_name.policy_address, "spindle://bob/secret");
  // Bob's subscription sees residency of his own revisions only.
  const uint64_t bob_sub = bob.send(Op::subscribe, SubscribeRequest{{"residency"}});
  ASSERT_TRUE(sample_greedy(alice, weights.address, {4, 5, 6}, 4).ok);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  while (std::chrono::steady_clock::now() < until) {
    const auto m = bob.receive(100);
    if (!m || m->request_id != bob_sub || !m->ok) continue;
    for (const auto& p : std::get<EventReply>(m->body).status.placements) {
      EXPECT_NE(p.revision_id, weights.revision_id) << "Bob's events show Alice's placement";
    }
  }

  // Alice's objects are as they were.
  const auto shown = alice.ok<PolicyReply>(Op::catalog_show, AddressRequest{weights.address});
  EXPECT_EQ(shown.policy.head, shown_before.policy.head);
  EXPECT_EQ(shown.policy.tags, shown_before.policy.tags);
  EXPECT_EQ(alice.ok<SaveReply>(Op::save_weights, SaveRequest{sid, "again", ""}).address.rfind("spindle://alice/secret", 0), 0u);
  EXPECT_EQ(alice.ok<RunStatusReply>(Op::run_status, RunStatusRequest{run.run_id, 0}).run.tenant, "alice");
  EXPECT_TRUE(alice.call(Op::unsubscribe, UnsubscribeRequest{alice_sub}).ok);
  EXPECT_EQ(daemon.terminate(), 0);
}

}  // namespace
}  // namespace spindle::testing
