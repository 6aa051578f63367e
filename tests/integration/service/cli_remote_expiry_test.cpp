// `spindle catalog --endpoint` on ephemeral revisions (save_weights with ttl_seconds) and user
// metadata: show / lineage mark them, promote goes through the daemon's catalog_promote, and a
// revision the daemon's sweep collected is shown as expired (not servable).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

#include "daemon.h"
#include "spindle/protocol/client.h"

namespace spindle::testing {
namespace {

using json = nlohmann::json;

protocol::SaveReply save(protocol::Client& c, const std::string& session, int64_t ttl_seconds) {
  protocol::SaveRequest q;
  q.session_id = session;
  q.ttl_seconds = ttl_seconds;
  return std::get<protocol::SaveReply>(c.call(protocol::Op::save_weights, q).body);
}

TEST(CliRemoteExpiry, ShowLineagePromoteAndCollectedThroughTheDaemon) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("cli_expiry");
  Daemon daemon(dir, {"--expiry-sweep-s", "0.2"});
  protocol::ClientOptions o;
  o.endpoint = daemon.ipc();
  o.token = daemon.token();
  protocol::Client client(o);
  protocol::CreateTrainingRequest req;
  req.base_model = "stories260K";
  req.policy = "eph-cli";
  req.rank = 4;
  req.alpha = 8;
  req.user_metadata_json = R"({"recipe": "rl_loop"})";
  const auto session = client.create_training(req);
  const auto brief = save(client, session.session_id, /*ttl_seconds=*/1);
  const auto durable = save(client, session.session_id, 0);
  const auto kept = save(client, session.session_id, /*ttl_seconds=*/3600);  // the head
  ASSERT_GT(brief.expires_ms, 0);
  ASSERT_EQ(durable.expires_ms, 0);
  ASSERT_GT(kept.expires_ms, brief.expires_ms);

  auto catalog = [&](std::vector<std::string> args) {
    std::vector<std::string> full = {"catalog"};
    full.insert(full.end(), args.begin(), args.end());
    for (const std::string& a :
         {std::string("--endpoint"), daemon.ipc(), std::string("--token"), daemon.token()})
      full.push_back(a);
    return run_spindle(full);
  };
  auto catalog_json = [&](std::vector<std::string> args) {
    args.push_back("--json");
    const RunResult r = catalog(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json();
  };

  const json show = catalog_json({"show", "eph-cli"});
  EXPECT_EQ(show["policy"]["user_metadata"]["recipe"], "rl_loop");
  EXPECT_EQ(show["revision"]["id"], kept.revision_id);
  EXPECT_EQ(show["revision"]["expires_ms"], kept.expires_ms);
  EXPECT_EQ(show["revision"]["expired"], false);
  EXPECT_NE(catalog({"show", "eph-cli"}).out.find("ephemeral, expires "), std::string::npos);

  // The daemon's sweep collects `brief` a second after its save: wait for that.
  bool collected = false;
  for (int i = 0; i < 200 && !collected; ++i) {
    const json s = catalog_json({"show", "eph-cli@" + brief.revision_id});
    collected = s["revision"]["expired"] == true;
    if (!collected) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(collected);
  const RunResult lin = catalog({"lineage", "eph-cli"});
  ASSERT_EQ(lin.exit_code, 0) << lin.err;
  EXPECT_NE(lin.out.find("[expired at "), std::string::npos) << lin.out;
  EXPECT_NE(lin.out.find("[ephemeral, expires "), std::string::npos) << lin.out;
  EXPECT_EQ(catalog_json({"lineage", "eph-cli"})["ancestors"][1]["revision"]["expired"], true);

  // promote through catalog_promote: the head becomes durable; the collected one is too late.
  const RunResult promoted = catalog({"promote", "eph-cli"});
  ASSERT_EQ(promoted.exit_code, 0) << promoted.err;
  EXPECT_EQ(promoted.out, "spindle://local/eph-cli@" + kept.revision_id + " is durable\n");
  EXPECT_EQ(catalog_json({"show", "eph-cli"})["revision"]["expires_ms"], 0);
  const RunResult late = catalog({"promote", "eph-cli@" + brief.revision_id});
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_NE(late.err.find("expired"), std::string::npos) << late.err;
  client.close_training(session.session_id);
  EXPECT_EQ(daemon.terminate(), 0);
}

}  // namespace
}  // namespace spindle::testing
