// Reward plugins that misbehave with resources, through a real spindled (--reward-host-memory-mib
// 256) and its reward hosts: a plugin that allocates without bound fails that reward_test, and a
// GRPO run using it fails, with resource_exhausted naming the term, the plugin and the limit; a
// plugin that forks and leaves a process running fails that call, and the process is gone. The
// daemon keeps serving and the next reward_test works (a fresh host). A limit below the host's
// floor is refused at start.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

class RewardContainment : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(stories_model())) return;
    ::setenv("SPINDLE_REWARD_PLUGIN_PATH", (binary_dir() / "tests" / "reward_plugins").c_str(), 1);
    daemon_ = new Daemon(two_tenant_dir("reward_containment"),
                         {"--reward-host-memory-mib", "256", "--reward-test-workers", "1"});
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
Daemon* RewardContainment::daemon_ = nullptr;

RewardTestRequest request(const std::string& spec_json) {
  RewardTestRequest r;
  r.spec_json = spec_json;
  r.rows = {{"Once upon a time", "", ""}, {"Lily saw a", "", ""}};
  r.address = "stories260K";
  r.num_samples = 2;
  r.sampling_params.max_tokens = 8;
  r.sampling_params.seed = 3;
  return r;
}

const char* kGoodSpec =
    R"({"terms": [{"name": "short", "plugin": "length", "config": {"target": 8}}]})";

void expect_serving(RawClient& c) {
  const auto ok = c.ok<RewardTestReply>(Op::reward_test, request(kGoodSpec));
  EXPECT_EQ(ok.samples.size(), 4u);
}

TEST_F(RewardContainment, LeakingPluginFailsThatCallAtTheMemoryLimit) {
  if (kSanitized) GTEST_SKIP() << "sanitizer build: reward hosts run without a memory limit";
  RawClient alice(daemon_->ipc(), kTokenA);
  expect_serving(alice);
  for (const char* mode : {"new", "malloc"}) {
    SCOPED_TRACE(mode);
    const std::string spec = fmt::format(
        R"({{"terms": [{{"name": "short", "plugin": "length", "config": {{"target": 8}}}},
                       {{"name": "hog", "plugin": "leak", "config": {{"mode": "{}"}}}}]}})",
        mode);
    const Reply r = alice.call(Op::reward_test, request(spec));
    EXPECT_EQ(r.error.code, errc::resource_exhausted) << r.error.message;
    EXPECT_NE(r.error.message.find(
                  "term 'hog' (plugin leak): the reward host exceeded its memory limit of 256 MiB"),
              std::string::npos)
        << r.error.message;
    // Still serving, for both tenants; the next reward test gets a fresh host.
    expect_serving(alice);
    RawClient bob(daemon_->ipc(), kTokenB);
    expect_serving(bob);
  }
  EXPECT_NE(daemon_->log().find("memory limit of 256 MiB reached"), std::string::npos);
}

// Pids the fork plugin wrote.
std::vector<pid_t> read_pids(const fs::path& file) {
  std::vector<pid_t> out;
  std::ifstream in(file);
  for (long p; in >> p;) out.push_back(pid_t(p));
  return out;
}

bool process_gone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

TEST_F(RewardContainment, ForkingPluginsProcessesAreKilledAndTheCallFails) {
  RawClient alice(daemon_->ipc(), kTokenA);
  for (const char* mode : {"linger", "orphan"}) {
    SCOPED_TRACE(mode);
    const fs::path pids = daemon_->data_dir() / fmt::format("fork-{}.pids", mode);
    const std::string spec = fmt::format(
        R"({{"terms": [{{"name": "spawner", "plugin": "fork",
                         "config": {{"mode": "{}", "pid_file": "{}"}}}}]}})",
        mode, pids.string());
    const Reply r = alice.call(Op::reward_test, request(spec));
    EXPECT_EQ(r.error.code, errc::internal) << r.error.message;
    EXPECT_NE(r.error.message.find("term 'spawner' (plugin fork): the plugin left 1 process(es) "
                                   "behind"),
              std::string::npos)
        << r.error.message;
    const std::vector<pid_t> started = read_pids(pids);
    EXPECT_FALSE(started.empty());
    for (pid_t p : started) EXPECT_TRUE(process_gone(p)) << "pid " << p;
    expect_serving(alice);
  }
  // A plugin that waits for its child is fine.
  const auto clean = alice.ok<RewardTestReply>(
      Op::reward_test,
      request(
          R"({"terms": [{"name": "spawner", "plugin": "fork", "config": {"mode": "clean"}}]})"));
  EXPECT_EQ(clean.total.mean, 1.0);
}

RunStatusReply wait_for_end(RawClient& c, const std::string& run_id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  RunStatusReply r;
  while (std::chrono::steady_clock::now() < deadline) {
    r = c.ok<RunStatusReply>(Op::run_status, RunStatusRequest{run_id, 0});
    if (r.run.status == "done" || r.run.status == "failed" || r.run.status == "stopped") return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "run " << run_id << " still " << r.run.status;
  return r;
}

TEST_F(RewardContainment, GrpoRunWithALeakingTermFailsNamingIt) {
  if (kSanitized) GTEST_SKIP() << "sanitizer build: reward hosts run without a memory limit";
  RawClient alice(daemon_->ipc(), kTokenA);
  json policy = {{"name", "leaky"},
                 {"rank", 2},
                 {"dataset", {{"name", "inline"}, {"prompts", {"Once upon a time", "One day"}}}},
                 {"reward", {{"terms", {{{"name", "hog"}, {"plugin", "leak"}, {"weight", 1}}}}}}};
  const json config = {
      {"seed", 1},           {"steps", 2},      {"group_size", 2}, {"prompts_per_step", 1},
      {"max_tokens", 6},     {"eval_every", 0}, {"save_every", 0}, {"eval_prompts", 0},
      {"policies", {policy}}};
  const auto started =
      alice.ok<RunStartReply>(Op::run_start, RunStartRequest{config.dump(), false});
  const RunStatusReply end = wait_for_end(alice, started.run_id);
  EXPECT_EQ(end.run.status, "failed");
  EXPECT_NE(end.run.error.find("term 'hog' (plugin leak): the reward host exceeded its memory "
                               "limit of 256 MiB"),
            std::string::npos)
      << end.run.error;
  expect_serving(alice);
}

TEST(RewardContainmentConfig, LimitBelowTheHostsFloorIsRefusedAtStart) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  try {
    Daemon d(fresh_dir("reward_memory_floor"), {"--reward-host-memory-mib", "64"});
    ADD_FAILURE() << "spindled started with --reward-host-memory-mib 64";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--reward-host-memory-mib 64: 0 (no limit) or at least 128"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace spindle::testing
