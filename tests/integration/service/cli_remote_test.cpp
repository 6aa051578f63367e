// The CLI against a real spindled: `spindle status`, `spindle sample` (server-side tokenize),
// `spindle catalog --endpoint` (same output format as the local catalog), and the tokenize op.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon.h"
#include "spindle/protocol/client.h"

namespace spindle::testing {
namespace {

using json = nlohmann::json;

TEST(CliRemote, StatusSampleAndCatalogThroughTheDaemon) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("cli");
  Daemon daemon(dir, {});
  const std::string dd = dir.string();

  const RunResult status = run_spindle({"status", "--data-dir", dd, "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const json st = json::parse(status.out);
  EXPECT_EQ(st["bases"][0]["id"], "stories260K");
  EXPECT_EQ(st["tenant"], "local");

  // Greedy sample of the base == `spindle generate` (stopping at BOS/EOS as generate does).
  const RunResult sample = run_spindle({"sample", "stories260K", "--prompt", "Once upon a time",
                                        "--max-tokens", "40", "--temperature", "0", "--data-dir", dd,
                                        "--json"});
  ASSERT_EQ(sample.exit_code, 0) << sample.err;
  const json sj = json::parse(sample.out);
  EXPECT_EQ(sj["prompt_tokens"], json::array({1, 403, 407, 261, 378}));  // tok512 ids
  const RunResult gen = run_spindle({"generate", "--model", stories_model().string(), "--prompt",
                                     "Once upon a time", "--max-tokens", "40", "--temperature", "0"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const std::string text = sj["sequences"][0]["text"];
  EXPECT_EQ(gen.out.substr(0, text.size()), text);

  // A policy created through the protocol shows up in the remote catalog commands.
  protocol::ClientOptions o;
  o.endpoint = daemon.ipc();
  o.token = daemon.token();
  protocol::Client client(o);
  EXPECT_EQ(client.tokenize("Once upon a time"), std::vector<int32_t>({1, 403, 407, 261, 378}));
  EXPECT_EQ(client.tokenize("Once", /*add_special_tokens=*/false), std::vector<int32_t>({403}));
  protocol::CreateTrainingRequest req;
  req.base_model = "stories260K";
  req.policy = "remote-cli";
  req.rank = 4;
  req.alpha = 8;
  const auto session = client.create_training(req);
  const auto saved = client.save_weights(session.session_id, "v1");

  const std::vector<std::string> remote = {"--endpoint", daemon.ipc(), "--token", daemon.token()};
  auto catalog = [&](std::vector<std::string> args) {
    std::vector<std::string> full = {"catalog"};
    full.insert(full.end(), args.begin(), args.end());
    full.insert(full.end(), remote.begin(), remote.end());
    return run_spindle(full);
  };
  const RunResult ls = catalog({"ls", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(json::parse(ls.out)["items"][0]["name"], "remote-cli");
  const RunResult show = catalog({"show", "remote-cli", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(json::parse(show.out)["revision"]["id"], saved.revision_id);
  EXPECT_EQ(catalog({"tag", "remote-cli", "prod"}).exit_code, 0);
  EXPECT_EQ(json::parse(catalog({"ls", "--tag", "prod", "--json"}).out)["items"].size(), 1u);
  const RunResult fork = catalog({"fork", "remote-cli@" + saved.revision_id, "remote-fork"});
  ASSERT_EQ(fork.exit_code, 0) << fork.err;
  EXPECT_NE(fork.out.find("spindle://local/remote-fork@" + saved.revision_id), std::string::npos);
  const RunResult lineage = catalog({"lineage", "remote-fork", "--json"});
  ASSERT_EQ(lineage.exit_code, 0) << lineage.err;
  EXPECT_EQ(catalog({"rm", "remote-fork"}).exit_code, 0);
  const RunResult gone = catalog({"show", "remote-fork"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("not_found"), std::string::npos) << gone.err;
  // $SPINDLE_ENDPOINT (and $SPINDLE_TOKEN) stand in for the flags, as for the other remote
  // commands; the local data directory given here has no catalog of its own.
  const fs::path empty_dir = fresh_dir("cli_remote_env");
  const RunResult by_env = run_spindle(
      {"catalog", "ls", "--json", "--data-dir", empty_dir.string()},
      "SPINDLE_ENDPOINT=" + shell_quote(daemon.ipc()) + " SPINDLE_TOKEN=" + daemon.token());
  ASSERT_EQ(by_env.exit_code, 0) << by_env.err;
  EXPECT_EQ(json::parse(by_env.out)["items"][0]["name"], "remote-cli");
  // Local-only commands say so instead of opening some other data directory.
  const RunResult gc = catalog({"gc"});
  EXPECT_EQ(gc.exit_code, 1);
  EXPECT_NE(gc.err.find("local data directory only"), std::string::npos) << gc.err;
  // A wrong token is the server's refusal, named.
  const RunResult bad = run_spindle({"status", "--endpoint", daemon.ipc(), "--token", "nope"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unauthenticated"), std::string::npos) << bad.err;
  EXPECT_EQ(daemon.terminate(), 0);
}

}  // namespace
}  // namespace spindle::testing

namespace spindle::testing {
namespace {

// `spindle reward test`: samples from the daemon, scores with a real plugin in a real host.
TEST(CliRemote, RewardTestSamplesFromThePolicyAndScores) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("reward_test");
  Daemon daemon(dir, {});
  const fs::path spec = dir / "spec.json", data = dir / "prompts.jsonl";
  std::ofstream(spec) << R"({"terms": [{"name": "girl", "plugin": "keywords", "weight": 2.0,
                                        "config": {"present": ["girl"]}}]})";
  std::ofstream(data) << "{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"The dog\"}\n";
  const RunResult r = run_spindle({"reward", "test", "--spec", spec.string(), "--data",
                                   data.string(), "--policy", "stories260K", "-n", "3",
                                   "--max-tokens", "24", "--temperature", "0", "--data-dir",
                                   dir.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n"], 6);  // 2 prompts x 3 samples
  ASSERT_EQ(j["terms"].size(), 1u);
  EXPECT_EQ(j["terms"][0]["name"], "girl");
  // Greedy: the 3 samples of a prompt are identical; the total is the weighted term.
  const double term_mean = j["terms"][0]["mean"], total_mean = j["total"]["mean"];
  EXPECT_NEAR(total_mean, 2.0 * term_mean, 1e-9);
  // stories260K's greedy continuation of "Once upon a time" names a girl ("...a little girl
  // named Lily"), so that prompt scores 1 on all three samples.
  EXPECT_GE(term_mean, 0.5);
  // A spec naming an unknown plugin fails before any sampling, naming it.
  std::ofstream(spec) << R"({"terms": [{"name": "x", "plugin": "no_such_plugin", "weight": 1}]})";
  const RunResult bad = run_spindle({"reward", "test", "--spec", spec.string(), "--data",
                                     data.string(), "--policy", "stories260K", "--data-dir",
                                     dir.string()});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("no_such_plugin"), std::string::npos) << bad.err;
  EXPECT_EQ(daemon.terminate(), 0);
}

}  // namespace
}  // namespace spindle::testing
