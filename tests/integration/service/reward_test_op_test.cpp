// The reward_test op against a real spindled on stories260K with the real keywords and length
// plugins: every returned sample's scores equal an independent scoring of the returned
// completion by a RewardScorer in this process, the summary equals summary.h's over those
// scores, the tokens equal a plain `sample` of the same row and parameters; a policy address
// reports its revision. Errors: a bad spec is refused before the address is even resolved,
// unknown and other tenants' policies are not_found, the rows x samples limit, and a plugin that
// crashes the daemon's reward host fails that call only (the next one succeeds).

#include <nlohmann/json.hpp>

#include <cstdlib>

#include "daemon.h"
#include "spindle/rewards/rewards.h"
#include "spindle/rewards/summary.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

const char* kSpec = R"({"terms": [
  {"name": "cat", "plugin": "keywords", "weight": 1.0, "config": {"present": ["cat", "dog"]}},
  {"name": "short", "plugin": "length", "weight": 0.5, "config": {"target": 10}}]})";

// One daemon for the suite: two tenants, a small reward_test limit, the test plugins (crash)
// on the daemon's plugin path beside the built-in ones.
class RewardTestOp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(stories_model())) return;
    const fs::path dir = two_tenant_dir("reward_test");
    ::setenv("SPINDLE_REWARD_PLUGIN_PATH", (binary_dir() / "tests" / "reward_plugins").c_str(), 1);
    daemon_ = new Daemon(dir, {"--max-reward-test-samples", "12"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    if (!daemon_) GTEST_SKIP() << "fixture missing: " << stories_model().string();
  }
  static Daemon* daemon_;
};
Daemon* RewardTestOp::daemon_ = nullptr;

RewardTestRequest request(const std::string& address) {
  RewardTestRequest r;
  r.spec_json = kSpec;
  r.rows = {{"Once upon a time", "", R"({"id": 1})"}, {"Lily saw a", "a cat", ""},
            {"One day, Tom", "", R"({"topic": "dogs"})"}};
  r.address = address;
  r.num_samples = 4;
  r.sampling_params.max_tokens = 16;
  r.sampling_params.temperature = 0.9f;
  r.sampling_params.seed = 7;
  r.bins = 5;
  return r;
}

void expect_distribution(const DistributionInfo& got, const rewards::Distribution& want,
                         const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.n, want.n);
  EXPECT_DOUBLE_EQ(got.mean, want.mean);
  EXPECT_DOUBLE_EQ(got.std, want.std);
  EXPECT_DOUBLE_EQ(got.min, want.min);
  EXPECT_DOUBLE_EQ(got.max, want.max);
  EXPECT_EQ(got.histogram, std::vector<uint64_t>(want.histogram.begin(), want.histogram.end()));
}

// Checks `reply` against an independent scoring of its own completions; `tokens` receives the
// tokens of every sample (row-major).
void check_against_local_scoring(const RewardTestRequest& req, const RewardTestReply& reply,
                                 const Frames& frames,
                                 std::vector<std::vector<int32_t>>* tokens_out = nullptr) {
  const size_t n = req.rows.size() * size_t(req.num_samples);
  EXPECT_EQ(reply.samples.size(), n);
  std::vector<rewards::RewardItem> items;
  std::vector<std::vector<int32_t>> tokens;
  for (size_t k = 0; k < reply.samples.size(); ++k) {
    const RewardSampleInfo& s = reply.samples[k];
    EXPECT_EQ(s.row, k / size_t(req.num_samples));  // row-major
    const RewardTestRow& row = req.rows.at(s.row);
    tokens.push_back(read_int32(s.tokens, frames, "tokens"));
    EXPECT_FALSE(tokens.back().empty());
    EXPECT_LE(tokens.back().size(), size_t(req.sampling_params.max_tokens));
    EXPECT_TRUE(s.stop_reason == "stop" || s.stop_reason == "length") << s.stop_reason;
    items.push_back({row.prompt, s.text, tokens.back(), row.reference,
                     row.metadata_json.empty() ? "{}" : row.metadata_json});
  }
  const rewards::RewardSpec spec = rewards::RewardSpec::parse(req.spec_json, "spec");
  rewards::RewardScorer scorer;
  const rewards::RewardBatch batch = scorer.score(spec, items);
  for (size_t k = 0; k < reply.samples.size(); ++k) {
    const RewardSampleInfo& s = reply.samples[k];
    ASSERT_EQ(s.scores.size(), spec.terms.size());
    ASSERT_EQ(s.infos.size(), spec.terms.size());
    for (size_t t = 0; t < spec.terms.size(); ++t) {
      EXPECT_EQ(s.scores[t], batch.per_term[t][k]) << "sample " << k << " term " << t;
      EXPECT_EQ(s.infos[t], batch.info[t][k]);
    }
    EXPECT_DOUBLE_EQ(s.total, batch.total[k]) << "sample " << k;
    // The total is the weighted sum of the term scores.
    EXPECT_NEAR(s.total, 1.0 * s.scores[0] + 0.5 * s.scores[1], 1e-12);
  }
  const rewards::RewardReport report = rewards::summarize(spec, batch, req.bins);
  EXPECT_EQ(reply.terms.size(), spec.terms.size());
  for (size_t t = 0; t < reply.terms.size() && t < spec.terms.size(); ++t) {
    EXPECT_EQ(reply.terms[t].name, spec.terms[t].name);
    EXPECT_EQ(reply.terms[t].plugin, spec.terms[t].plugin);
    EXPECT_EQ(reply.terms[t].weight, spec.terms[t].weight);
    expect_distribution(reply.terms[t].scores, report.terms[t], spec.terms[t].name);
  }
  expect_distribution(reply.total, report.total, "total");
  EXPECT_EQ(reply.total.histogram.size(), req.bins);
  if (tokens_out) *tokens_out = std::move(tokens);
}

TEST_F(RewardTestOp, ScoresMatchAnIndependentScoringOfTheReturnedCompletions) {
  RawClient alice(daemon_->ipc(), kTokenA);
  const RewardTestRequest req = request("stories260K");
  const auto reply = alice.ok<RewardTestReply>(Op::reward_test, req);
  const Frames frames = alice.last_frames;
  EXPECT_EQ(reply.revision_id, "");
  std::vector<std::vector<int32_t>> tokens;
  check_against_local_scoring(req, reply, frames, &tokens);
  ASSERT_EQ(tokens.size(), reply.samples.size());
  // Not a degenerate spec: the length term varies or some completion mentions a keyword.
  EXPECT_GT(reply.total.max, 0.0);

  // Each row is sampled exactly as a `sample` request of that row with the same parameters.
  for (size_t i = 0; i < req.rows.size(); ++i) {
    const auto prompt =
        alice.ok<TokenizeReply>(Op::tokenize, TokenizeRequest{"", req.rows[i].prompt, true});
    const auto ids = read_int32(prompt.tokens, alice.last_frames, "tokens");
    Frames f;
    const SampleRequest one =
        sample_request("stories260K", ids, f, req.sampling_params.max_tokens,
                       req.sampling_params.temperature, req.sampling_params.seed, req.num_samples);
    const auto s = alice.ok<SampleReply>(Op::sample, one, std::move(f));
    ASSERT_EQ(s.sequences.size(), size_t(req.num_samples));
    for (size_t j = 0; j < s.sequences.size(); ++j) {
      const size_t k = i * size_t(req.num_samples) + j;
      EXPECT_EQ(read_int32(s.sequences[j].tokens, alice.last_frames, "tokens"), tokens[k]);
      EXPECT_EQ(s.sequences[j].text, reply.samples[k].text);
    }
  }

  // The JSON encoding carries the same reply.
  const uint64_t id = alice.send(Op::reward_test, req, {}, Encoding::json);
  std::optional<Reply> j;
  while ((j = alice.receive(120000)) && j->request_id != id) {}
  ASSERT_TRUE(j && j->ok) << (j ? j->error.message : "no reply");
  EXPECT_EQ(std::get<RewardTestReply>(j->body).total, reply.total);
}

TEST_F(RewardTestOp, PolicyAddressReportsItsRevision) {
  RawClient alice(daemon_->ipc(), kTokenA);
  CreateTrainingRequest c;
  c.base_model = "stories260K";
  c.policy = "rt-policy";
  c.rank = 4;
  const auto session = alice.ok<TrainingSessionReply>(Op::create_training, c);
  const auto saved = alice.ok<SaveReply>(Op::save_weights, SaveRequest{session.session_id, "v0", ""});
  alice.ok<Empty>(Op::close_training, SessionRequest{session.session_id});

  RewardTestRequest req = request("spindle://alice/rt-policy@latest");
  req.rows.resize(2);
  req.num_samples = 2;
  const auto reply = alice.ok<RewardTestReply>(Op::reward_test, req);
  EXPECT_EQ(reply.revision_id, saved.revision_id);
  check_against_local_scoring(req, reply, alice.last_frames);

  // Bob cannot test alice's policy: not_found, exactly like a missing one.
  RawClient bob(daemon_->ipc(), kTokenB);
  const Reply refused = bob.call(Op::reward_test, req);
  EXPECT_EQ(refused.error.code, errc::not_found) << refused.error.message;
  const Reply missing = alice.call(Op::reward_test, request("spindle://alice/nope@latest"));
  EXPECT_EQ(missing.error.code, errc::not_found) << missing.error.message;
  const Reply other_base = alice.call(Op::reward_test, request("not-a-base"));
  EXPECT_EQ(other_base.error.code, errc::not_found) << other_base.error.message;
}

TEST_F(RewardTestOp, InvalidSpecIsRefusedBeforeSampling) {
  RawClient alice(daemon_->ipc(), kTokenA);
  // The address does not exist either: the spec error comes first, so nothing was resolved
  // or sampled.
  RewardTestRequest req = request("spindle://alice/nope@latest");
  req.spec_json = R"({"terms": [{"name": "kw", "plugin": "keywords", "config": {"presnt": ["x"]}}]})";
  Reply r = alice.call(Op::reward_test, req);
  EXPECT_EQ(r.error.code, errc::invalid_argument);
  EXPECT_NE(r.error.message.find("term 'kw'"), std::string::npos) << r.error.message;
  EXPECT_NE(r.error.message.find("presnt"), std::string::npos) << r.error.message;

  req.spec_json = R"({"terms": [{"name": "x", "plugin": "no_such_plugin"}]})";
  r = alice.call(Op::reward_test, req);
  EXPECT_EQ(r.error.code, errc::not_found);
  EXPECT_NE(r.error.message.find("no_such_plugin"), std::string::npos) << r.error.message;

  req.spec_json = "{not json";
  r = alice.call(Op::reward_test, req);
  EXPECT_EQ(r.error.code, errc::invalid_argument);
  EXPECT_NE(r.error.message.find("spec_json"), std::string::npos) << r.error.message;

  req = request("stories260K");
  req.rows[1].metadata_json = "[1, 2]";
  r = alice.call(Op::reward_test, req);
  EXPECT_EQ(r.error.code, errc::invalid_argument);
  EXPECT_NE(r.error.message.find("rows[1].metadata_json"), std::string::npos) << r.error.message;
}

TEST_F(RewardTestOp, RowsTimesSamplesLimit) {
  RawClient alice(daemon_->ipc(), kTokenA);
  RewardTestRequest req = request("stories260K");  // 3 rows x 4 = 12: at the daemon's limit
  req.num_samples = 5;
  const Reply r = alice.call(Op::reward_test, req);
  EXPECT_EQ(r.error.code, errc::limit_exceeded);
  EXPECT_NE(r.error.message.find("15 completions, limit 12 (max_reward_test_samples)"),
            std::string::npos)
      << r.error.message;
}

TEST_F(RewardTestOp, PluginCrashFailsThatCallOnly) {
  RawClient alice(daemon_->ipc(), kTokenA);
  RewardTestRequest req = request("stories260K");
  req.spec_json = R"({"terms": [{"name": "boom", "plugin": "crash"}]})";
  const Reply r = alice.call(Op::reward_test, req);
  EXPECT_EQ(r.error.code, errc::internal);
  EXPECT_NE(r.error.message.find("term 'boom' (plugin crash)"), std::string::npos) << r.error.message;
  EXPECT_NE(r.error.message.find("crashed the reward host"), std::string::npos) << r.error.message;
  // The daemon and the worker's scorer carry on (a fresh host).
  for (int i = 0; i < 3; ++i) {
    const auto ok = alice.ok<RewardTestReply>(Op::reward_test, request("stories260K"));
    EXPECT_EQ(ok.samples.size(), 12u);
  }
}

TEST_F(RewardTestOp, CliPrintsTheTableFromTheDaemon) {
  const fs::path dir = fresh_dir("reward_test_cli");
  std::ofstream(dir / "spec.json") << kSpec;
  std::ofstream(dir / "data.jsonl") << R"({"prompt": "Once upon a time", "id": 1})" << "\n\n"
                                    << R"({"question": "Lily saw a", "answer": "a cat"})" << "\n";
  const std::vector<std::string> common = {
      "reward", "test", "--spec", (dir / "spec.json").string(), "--data",
      (dir / "data.jsonl").string(), "--policy", "stories260K", "-n", "3", "--max-tokens", "12",
      "--seed", "5", "--endpoint", daemon_->ipc(), "--token", kTokenA};
  std::vector<std::string> as_json = common;
  as_json.insert(as_json.end(), {"--json", "--samples"});
  const RunResult j = run_spindle(as_json);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json out = json::parse(j.out);
  EXPECT_EQ(out["n"], 6);
  ASSERT_EQ(out["terms"].size(), 2u);
  EXPECT_EQ(out["terms"][0]["name"], "cat");
  EXPECT_EQ(out["terms"][1]["weight"], 0.5);
  ASSERT_EQ(out["samples"].size(), 6u);
  EXPECT_EQ(out["samples"][3]["row"], 1);

  // The same request through the op: the CLI printed the daemon's distribution.
  RewardTestRequest req;
  req.spec_json = kSpec;
  req.rows = {{"Once upon a time", "", R"({"id":1,"prompt":"Once upon a time"})"},
              {"Lily saw a", "a cat", R"({"answer":"a cat","question":"Lily saw a"})"}};
  req.address = "stories260K";
  req.num_samples = 3;
  req.sampling_params.max_tokens = 12;
  req.sampling_params.seed = 5;
  RawClient alice(daemon_->ipc(), kTokenA);
  const auto reply = alice.ok<RewardTestReply>(Op::reward_test, req);
  EXPECT_DOUBLE_EQ(out["total"]["mean"].get<double>(), reply.total.mean);
  EXPECT_EQ(out["total"]["histogram"].get<std::vector<uint64_t>>(), reply.total.histogram);
  for (size_t k = 0; k < reply.samples.size(); ++k) {
    EXPECT_EQ(out["samples"][k]["completion"], reply.samples[k].text);
    EXPECT_DOUBLE_EQ(out["samples"][k]["total"].get<double>(), reply.samples[k].total);
  }

  const RunResult table = run_spindle(common);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("term "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\ncat "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\nshort "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\ntotal "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("total histogram"), std::string::npos) << table.out;

  // A bad spec is reported by the daemon with the term and field.
  std::ofstream(dir / "bad.json") << R"({"terms": [{"name": "kw", "plugin": "keywords", "config": {"presnt": []}}]})";
  std::vector<std::string> bad = common;
  bad[3] = (dir / "bad.json").string();
  const RunResult refused = run_spindle(bad);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("invalid_argument"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("presnt"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace spindle::testing
