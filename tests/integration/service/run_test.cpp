// GRPO runs in spindled: run_start of a two-policy keywords run on stories260K, the metrics
// timeline in run_status and on the PUB socket ("metrics" events), revisions in the catalog,
// stop -> SIGKILL -> restart -> resume, a run killed while running comes back "stopped", and
// tenant isolation of every run op.

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>

#include "daemon.h"
#include "keyword_policy.h"
#include "spindle/catalog/catalog.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

std::string run_config(int64_t steps, int64_t save_every, const std::string& prefix) {
  json c = {{"seed", 3},          {"steps", steps},     {"group_size", 4},
            {"prompts_per_step", 2}, {"max_tokens", 12}, {"eval_every", 0},
            {"save_every", save_every}, {"eval_prompts", 0}};
  c["policies"] = {keyword_policy(prefix + "-cat", "cat"), keyword_policy(prefix + "-dog", "dog")};
  return c.dump();
}

// Polls run_status until `done(reply)` or the deadline (fails the test then).
RunStatusReply wait_for(RawClient& c, const std::string& run_id,
                        const std::function<bool(const RunStatusReply&)>& done,
                        int timeout_s = 300) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  RunStatusReply r;
  while (std::chrono::steady_clock::now() < deadline) {
    r = c.ok<RunStatusReply>(Op::run_status, RunStatusRequest{run_id, 0});
    if (done(r)) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "run " << run_id << " still " << r.run.status << " at step " << r.run.step
                << ": " << r.run.error;
  return r;
}

// Steps recorded per policy name.
std::map<std::string, std::set<int64_t>> steps_by_policy(const std::vector<RunMetricInfo>& m) {
  std::map<std::string, std::set<int64_t>> out;
  for (const auto& x : m) out[x.policy].insert(x.step);
  return out;
}

std::set<int64_t> range(int64_t from, int64_t to) {
  std::set<int64_t> s;
  for (int64_t i = from; i <= to; ++i) s.insert(i);
  return s;
}

TEST(ServiceRuns, RunFinishesWithMetricsRevisionsAndEvents) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = two_tenant_dir("runs");
  Daemon daemon(dir, {});
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "metrics");
  sub.connect("ipc://" + (dir / "spindled-events.sock").string());
  RawClient alice(daemon.ipc(), kTokenA);
  RawClient bob(daemon.ipc(), kTokenB);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the SUB joins

  const auto started = alice.ok<RunStartReply>(Op::run_start, RunStartRequest{run_config(3, 0, "a"), false});
  ASSERT_EQ(started.run_id.size(), 16u);
  EXPECT_EQ(started.policies,
            (std::vector<std::string>{"spindle://alice/a-cat", "spindle://alice/a-dog"}));
  const RunStatusReply fin =
      wait_for(alice, started.run_id, [](const RunStatusReply& r) {
        return r.run.status == "done" || r.run.status == "failed";
      });
  ASSERT_EQ(fin.run.status, "done") << fin.run.error << "\n" << daemon.log();
  EXPECT_EQ(fin.run.step, 3);
  EXPECT_EQ(fin.run.steps, 3);
  EXPECT_EQ(fin.run.tenant, "alice");
  EXPECT_EQ(json::parse(fin.run.config_json)["tenant"], "alice");
  // Every step (0 = before training) of both policies, each a JSON object of metrics.
  const auto by_policy = steps_by_policy(fin.metrics);
  ASSERT_EQ(by_policy.size(), 2u);
  EXPECT_EQ(by_policy.at("a-cat"), range(0, 3));
  EXPECT_EQ(by_policy.at("a-dog"), range(0, 3));
  for (const auto& m : fin.metrics) {
    const json j = json::parse(m.metrics_json);
    ASSERT_TRUE(j.is_object()) << m.metrics_json;
    if (m.step > 0) {
      EXPECT_TRUE(j.contains("reward_mean")) << m.metrics_json;
      EXPECT_GE(j["reward_mean"].get<double>(), 0.0);
      EXPECT_LE(j["reward_mean"].get<double>(), 1.0);
    }
  }
  // metrics_since_step pages the timeline.
  const auto tail = alice.ok<RunStatusReply>(Op::run_status, RunStatusRequest{started.run_id, 3});
  EXPECT_EQ(tail.metrics.size(), 2u);

  // The run's revisions are in the catalog, saved at its last step.
  {
    catalog::Catalog cat(dir);
    for (const char* p : {"a-cat", "a-dog"}) {
      const catalog::Resolved r = cat.get("alice", catalog::Address{"alice", p, ""});
      EXPECT_EQ(r.revision.step, 3) << p;
      EXPECT_TRUE(r.revision.state_blob.has_value()) << p;
    }
  }

  // The PUB socket carried every step's metrics (J-encoded run_status replies).
  std::map<std::string, std::set<int64_t>> published;
  bool saw_done = false;
  for (;;) {
    std::vector<zmq::message_t> msgs;
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(2000)) <= 0) break;
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(msgs)));
    ASSERT_EQ(msgs.size(), 2u);
    EXPECT_EQ(msgs[0].to_string(), "metrics");
    const std::vector<std::string> parts{msgs[1].to_string()};
    const Reply event = decode_reply(parts);
    EXPECT_EQ(event.encoding, Encoding::json);
    EXPECT_EQ(event.op, Op::run_status);
    const auto& body = std::get<RunStatusReply>(event.body);
    EXPECT_EQ(body.run.id, started.run_id);
    for (const auto& m : body.metrics) published[m.policy].insert(m.step);
    if (body.run.status == "done") saw_done = true;
  }
  EXPECT_EQ(published.at("a-cat"), range(0, 3));
  EXPECT_EQ(published.at("a-dog"), range(0, 3));
  EXPECT_TRUE(saw_done);

  // Tenant bob sees none of it: not_found exactly like a missing run.
  EXPECT_TRUE(bob.ok<RunListReply>(Op::run_list, RunListRequest{50, ""}).runs.empty());
  for (Op op : {Op::run_stop, Op::run_resume}) {
    const Reply r = bob.call(op, RunIdRequest{started.run_id});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error.code, errc::not_found);
  }
  const Reply theirs = bob.call(Op::run_status, RunStatusRequest{started.run_id, 0});
  const Reply missing = bob.call(Op::run_status, RunStatusRequest{"0123456789abcdef", 0});
  EXPECT_EQ(theirs.error.code, errc::not_found);
  EXPECT_EQ(theirs.error.message.find(started.run_id) != std::string::npos,
            missing.error.message.find("0123456789abcdef") != std::string::npos);
  const auto listed = alice.ok<RunListReply>(Op::run_list, RunListRequest{50, ""});
  ASSERT_EQ(listed.runs.size(), 1u);
  EXPECT_EQ(listed.runs[0].status, "done");

  // A finished run cannot be resumed; a second run may not reuse trained policies.
  EXPECT_EQ(alice.call(Op::run_resume, RunIdRequest{started.run_id}).error.code,
            errc::failed_precondition);
  EXPECT_EQ(alice.call(Op::run_start, RunStartRequest{run_config(3, 0, "a"), false}).error.code,
            errc::already_exists);
  EXPECT_EQ(alice.call(Op::run_start, RunStartRequest{R"({"steps": 3})", false}).error.code,
            errc::invalid_argument);
  EXPECT_EQ(daemon.terminate(), 0);
  fs::remove_all(dir);
}

TEST(ServiceRuns, StoppedAndKilledRunsResumeAfterRestart) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = two_tenant_dir("runs_resume");
  constexpr int64_t kSteps = 40;
  std::string run_id;
  int64_t stopped_at = 0;
  {
    Daemon daemon(dir, {});
    RawClient alice(daemon.ipc(), kTokenA);
    run_id = alice.ok<RunStartReply>(Op::run_start,
                                     RunStartRequest{run_config(kSteps, 1, "r"), false}).run_id;
    wait_for(alice, run_id, [](const RunStatusReply& r) { return r.run.step >= 1; });
    const auto ack = alice.ok<RunStatusReply>(Op::run_stop, RunIdRequest{run_id});
    EXPECT_EQ(ack.run.id, run_id);
    const auto st = wait_for(alice, run_id, [](const RunStatusReply& r) {
      return r.run.status != "running";
    });
    ASSERT_EQ(st.run.status, "stopped") << st.run.error;
    stopped_at = st.run.step;
    ASSERT_LT(stopped_at, kSteps) << "the run finished before the stop arrived";
    daemon.kill_now();
  }
  {
    // As if the daemon had died between the two policies' saves of the next step: r-dog has a
    // revision one step ahead of r-cat. The resumed run rolls r-dog back to match.
    catalog::Catalog cat(dir);
    const catalog::Address dog{"alice", "r-dog", ""};
    const auto weights = cat.read_revision("alice", dog).weights;
    const auto adam = cat.read_optimizer_state("alice", dog);
    catalog::CommitOptions co;
    co.actor = "test";
    co.step = stopped_at + 1;
    co.optimizer_state = adam ? &*adam : nullptr;
    cat.commit_revision("alice", "r-dog", weights, co);
  }
  int64_t killed_after = 0;
  {
    Daemon daemon(dir, {});
    RawClient alice(daemon.ipc(), kTokenA);
    EXPECT_EQ(alice.ok<RunStatusReply>(Op::run_status, RunStatusRequest{run_id, 0}).run.status,
              "stopped");
    const auto resumed = alice.ok<RunStatusReply>(Op::run_resume, RunIdRequest{run_id});
    EXPECT_EQ(resumed.run.status, "running");
    const auto st = wait_for(alice, run_id, [&](const RunStatusReply& r) {
      return r.run.step > stopped_at || r.run.status != "running";
    });
    ASSERT_EQ(st.run.status, "running") << st.run.error;
    EXPECT_NE(daemon.log().find("r-dog rolled back from step"), std::string::npos);
    killed_after = st.run.step;
    daemon.kill_now();  // a crash while the run is running
  }
  {
    Daemon daemon(dir, {});
    RawClient alice(daemon.ipc(), kTokenA);
    const auto st = alice.ok<RunStatusReply>(Op::run_status, RunStatusRequest{run_id, 0});
    EXPECT_EQ(st.run.status, "stopped");  // interrupted
    EXPECT_NE(st.run.error.find("interrupted"), std::string::npos) << st.run.error;
    EXPECT_GE(st.run.step, killed_after);
    alice.ok<RunStatusReply>(Op::run_resume, RunIdRequest{run_id});
    const auto fin = wait_for(alice, run_id, [](const RunStatusReply& r) {
      return r.run.status == "done" || r.run.status == "failed";
    });
    ASSERT_EQ(fin.run.status, "done") << fin.run.error << "\n" << daemon.log();
    EXPECT_EQ(fin.run.step, kSteps);
    const auto by_policy = steps_by_policy(fin.metrics);
    EXPECT_EQ(by_policy.at("r-cat"), range(0, kSteps));
    EXPECT_EQ(by_policy.at("r-dog"), range(0, kSteps));
    EXPECT_EQ(daemon.terminate(), 0);
  }
  {
    catalog::Catalog cat(dir);
    const catalog::Resolved r = cat.get("alice", catalog::Address{"alice", "r-cat", ""});
    EXPECT_EQ(r.revision.step, kSteps);
  }
  fs::remove_all(dir);
}

// SIGTERM with a run in progress: the run saves its step and is recorded "stopped" (not
// interrupted); the daemon still exits 0. Stopping a stopped run is a no-op.
TEST(ServiceRuns, SigtermStopsRunningRunsCleanly) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = two_tenant_dir("runs_term");
  std::string run_id;
  {
    Daemon daemon(dir, {});
    RawClient alice(daemon.ipc(), kTokenA);
    run_id = alice.ok<RunStartReply>(Op::run_start,
                                     RunStartRequest{run_config(400, 0, "t"), false}).run_id;
    wait_for(alice, run_id, [](const RunStatusReply& r) { return r.run.step >= 1; });
    EXPECT_EQ(daemon.terminate(), 0);
  }
  Daemon daemon(dir, {});
  RawClient alice(daemon.ipc(), kTokenA);
  const auto st = alice.ok<RunStatusReply>(Op::run_status, RunStatusRequest{run_id, 0});
  EXPECT_EQ(st.run.status, "stopped");
  EXPECT_EQ(st.run.error, "");
  EXPECT_GE(st.run.step, 1);
  EXPECT_LT(st.run.step, 400);
  {
    catalog::Catalog cat(dir);  // saved at the step it stopped after
    EXPECT_EQ(cat.get("alice", catalog::Address{"alice", "t-cat", ""}).revision.step, st.run.step);
  }
  EXPECT_EQ(alice.ok<RunStatusReply>(Op::run_stop, RunIdRequest{run_id}).run.status, "stopped");
  EXPECT_EQ(daemon.terminate(), 0);
  fs::remove_all(dir);
}

// `spindle run start|status --follow|ls|stop|resume` against the daemon, with --json.
TEST(ServiceRuns, CliStartFollowListStopResume) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const fs::path dir = fresh_dir("runs_cli");
  Daemon daemon(dir, {});
  const std::vector<std::string> remote = {"--endpoint", daemon.ipc(), "--token", daemon.token()};
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.end(), remote.begin(), remote.end());
    return run_spindle(args);
  };
  const fs::path config = dir / "run.json";
  std::ofstream(config) << run_config(2, 0, "cli");
  const RunResult start = cli({"run", "start", config.string(), "--json"});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const json started = json::parse(start.out);
  const std::string id = started["run_id"];
  EXPECT_EQ(started["policies"].size(), 2u);

  // --follow prints one JSON line per (step, policy) until the run ends, then the record.
  const RunResult follow = cli({"run", "status", id, "--follow", "--json"});
  ASSERT_EQ(follow.exit_code, 0) << follow.err;
  std::vector<json> lines;
  std::istringstream in(follow.out);
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u * 3u + 1u) << follow.out;
  std::map<std::string, std::set<int64_t>> seen;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    seen[lines[i]["policy"]].insert(lines[i]["step"].get<int64_t>());
    EXPECT_TRUE(lines[i]["metrics"].is_object());
  }
  EXPECT_EQ(seen.at("cli-cat"), range(0, 2));
  EXPECT_EQ(lines.back()["status"], "done");

  const RunResult ls = cli({"run", "ls", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  const json runs = json::parse(ls.out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["id"], id);
  EXPECT_EQ(runs[0]["step"], 2);

  const RunResult text = cli({"run", "status", id});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("step 2 cli-dog: reward"), std::string::npos) << text.out;

  // A finished run: stop and resume are refused with the server's reason.
  const RunResult resume = cli({"run", "resume", id});
  EXPECT_NE(resume.exit_code, 0);
  EXPECT_NE(resume.err.find("done"), std::string::npos) << resume.err;
  EXPECT_NE(cli({"run", "stop", id}).exit_code, 0);
  EXPECT_NE(cli({"run", "status", "0123456789abcdef"}).exit_code, 0);
  EXPECT_EQ(daemon.terminate(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::testing
