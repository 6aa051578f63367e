// Plugins that misbehave (crash, hang, NaN, wrong ABI, leak memory without bound, fork and
// leave processes behind), unknown plugins and bad configs: each fails that call with a typed
// error, the host is restarted when it had to die, the next call succeeds.

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "reward_test_util.h"
#include "spindle/core/error.h"

namespace spindle::rewards {
namespace {

using testing::host_options;
using testing::item;
using testing::one_term;
namespace fs = std::filesystem;

// Runs f, expects a spindle::Error with `code`; returns its message.
std::string error_of(const std::function<void()>& f, ErrorCode code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << error_code_name(e.code()) << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::vector<RewardItem> kItems = {item("#### 1", "1"), item("#### 2", "3"),
                                        item("#### 4", "4")};

void expect_good_call(RewardScorer& scorer) {
  RewardBatch b = scorer.score(one_term("numeric_match"), kItems);
  EXPECT_EQ(b.total, (std::vector<double>{1, 0, 1}));
}

TEST(RewardHost, CrashingPluginFailsThatCallOnly) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  expect_good_call(scorer);
  const std::string msg =
      error_of([&] { scorer.score(one_term("crash"), kItems); }, ErrorCode::internal);
  EXPECT_TRUE(has(msg, "plugin crash")) << msg;
  EXPECT_TRUE(has(msg, "signal")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 1u);
}

TEST(RewardHost, HangingPluginTimesOutAndHostRestarts) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true, std::chrono::milliseconds(300)));
  expect_good_call(scorer);
  const std::string msg =
      error_of([&] { scorer.score(one_term("hang"), kItems); }, ErrorCode::resource);
  EXPECT_TRUE(has(msg, "plugin hang")) << msg;
  EXPECT_TRUE(has(msg, "300 ms")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 1u);
}

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

// A plugin that allocates without bound ends the host at its memory limit, whether its
// allocations throw (operator new) or return NULL that it then uses (malloc): resource naming the
// term and the limit; the next call gets a fresh host.
TEST(RewardHost, LeakingPluginStopsAtTheMemoryLimit) {
  if (kSanitized) GTEST_SKIP() << "sanitizer build: the host runs without a memory limit";
  RewardHostOptions o = host_options(/*with_test_plugins=*/true);
  o.memory_limit_mib = 256;
  RewardScorer scorer(o);
  expect_good_call(scorer);
  uint64_t restarts = 0;
  for (const char* mode : {"new", "malloc"}) {
    SCOPED_TRACE(mode);
    const std::string msg = error_of(
        [&] { scorer.score(one_term("leak", fmt::format(R"({{"mode": "{}"}})", mode)), kItems); },
        ErrorCode::resource);
    EXPECT_TRUE(has(msg, "term 'leak' (plugin leak): the reward host exceeded its memory limit "
                         "of 256 MiB"))
        << msg;
    expect_good_call(scorer);
    EXPECT_EQ(scorer.host_restarts(), ++restarts);
  }
}

TEST(RewardHost, MemoryLimitBounds) {
  RewardHostOptions o = host_options();
  o.memory_limit_mib = kMinRewardHostMemoryMib - 1;
  const std::string msg = error_of([&] { RewardScorer s(o); }, ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "at least 128 MiB")) << msg;
  // The smallest limit allowed runs every built-in plugin.
  o.memory_limit_mib = kMinRewardHostMemoryMib;
  RewardScorer scorer(o);
  EXPECT_GE(scorer.plugins().size(), 6u);
  expect_good_call(scorer);
}

// Pids a fork test plugin wrote, one per line.
std::vector<pid_t> read_pids(const fs::path& file) {
  std::vector<pid_t> out;
  std::ifstream in(file);
  for (long p; in >> p;) out.push_back(pid_t(p));
  return out;
}

// No such process, or a zombie waiting for a parent that never reaps (init in a container).
bool process_gone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

bool all_gone_soon(const std::vector<pid_t>& pids) {
  for (int i = 0; i < 200; ++i) {  // SIGKILL is prompt; a reaper may lag
    bool gone = true;
    for (pid_t p : pids) gone = gone && process_gone(p);
    if (gone) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

fs::path pid_file(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() /
                     fmt::format("spindle_fork_{}_{}_{}.pids", tag, getpid(), std::rand());
  fs::remove(p);
  return p;
}

// Processes a plugin leaves running (a lingering child, an orphaned grandchild in its own
// session, a child that returned into the host) are killed after the call, which fails naming
// them; the host survives. A plugin that waits for its child is fine.
TEST(RewardHost, ForkedProcessesLeftBehindAreKilledAndFailTheCall) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  const fs::path clean = pid_file("clean");
  const RewardBatch b = scorer.score(
      one_term("fork", fmt::format(R"({{"mode": "clean", "pid_file": "{}"}})", clean.string())),
      kItems);
  EXPECT_EQ(b.total, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(read_pids(clean).size(), 1u);
  fs::remove(clean);
  for (const char* mode : {"linger", "orphan", "return"}) {
    SCOPED_TRACE(mode);
    const fs::path file = pid_file(mode);
    const std::string msg = error_of(
        [&] {
          scorer.score(one_term("fork", fmt::format(R"({{"mode": "{}", "pid_file": "{}"}})", mode,
                                                    file.string())),
                       kItems);
        },
        ErrorCode::internal);
    EXPECT_TRUE(has(msg, "term 'fork' (plugin fork): the plugin left 1 process(es) behind"))
        << msg;
    EXPECT_TRUE(has(msg, "the reward host killed them")) << msg;
    const std::vector<pid_t> pids = read_pids(file);
    EXPECT_EQ(pids.size(), std::string(mode) == "orphan" ? 2u : 1u);
    EXPECT_TRUE(all_gone_soon(pids));
    fs::remove(file);
    expect_good_call(scorer);
  }
  EXPECT_EQ(scorer.host_restarts(), 0u);  // contained without losing the host
}

// A call that hangs on its child times out; the host and the child are killed together.
TEST(RewardHost, HangingForkIsKilledWithTheHost) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true, std::chrono::milliseconds(500)));
  const fs::path file = pid_file("wait");
  const std::string msg = error_of(
      [&] {
        scorer.score(one_term("fork", fmt::format(R"({{"mode": "wait", "pid_file": "{}"}})",
                                                  file.string())),
                     kItems);
      },
      ErrorCode::resource);
  EXPECT_TRUE(has(msg, "plugin fork")) << msg;
  EXPECT_TRUE(has(msg, "500 ms")) << msg;
  const std::vector<pid_t> pids = read_pids(file);
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_TRUE(all_gone_soon(pids));
  fs::remove(file);
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 1u);
}

TEST(RewardHost, NonFiniteScoreNamesTheItem) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  const std::string msg =
      error_of([&] { scorer.score(one_term("nan"), kItems); }, ErrorCode::internal);
  EXPECT_TRUE(has(msg, "plugin nan")) << msg;
  EXPECT_TRUE(has(msg, "item 1")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 0u);  // the host survived: nothing to restart
}

TEST(RewardHost, AbiMismatchNamesFileAndBothVersions) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  const std::string msg =
      error_of([&] { scorer.validate(one_term("bad_abi")); }, ErrorCode::unsupported);
  EXPECT_TRUE(has(msg, "spindle_reward_bad_abi.so")) << msg;
  EXPECT_TRUE(has(msg, "version 999")) << msg;
  EXPECT_TRUE(has(msg, "version 1 ")) << msg;
  // The refused file is not listed; the good ones are.
  for (const PluginInfo& p : scorer.plugins()) EXPECT_NE(p.name, "bad_abi");
  expect_good_call(scorer);
}

// A plugin built before reward.h appended `version` (smaller struct_size) still loads; its
// version is "".
TEST(RewardHost, TableWithoutVersionLoads) {
  RewardScorer scorer(host_options(/*with_test_plugins=*/true));
  bool listed = false;
  for (const PluginInfo& p : scorer.plugins()) {
    if (p.name != "v1_table") continue;
    listed = true;
    EXPECT_EQ(p.version, "");
    EXPECT_EQ(p.abi_version, 1u);
  }
  EXPECT_TRUE(listed);
  const RewardBatch b = scorer.score(one_term("v1_table"), kItems);
  for (double s : b.per_term[0]) EXPECT_EQ(s, 1.0);
}

TEST(RewardHost, UnknownPluginIsNotFound) {
  RewardScorer scorer(host_options());
  const std::string msg =
      error_of([&] { scorer.score(one_term("no_such_reward"), kItems); }, ErrorCode::not_found);
  EXPECT_TRUE(has(msg, "no_such_reward")) << msg;
  EXPECT_TRUE(has(msg, "numeric_match")) << msg;  // lists what exists
}

TEST(RewardHost, BadConfigNamesTermAndField) {
  RewardScorer scorer(host_options());
  RewardSpec spec = RewardSpec::parse(
      R"({"terms": [{"name": "acc", "plugin": "numeric_match"},
                    {"name": "story", "plugin": "keywords", "config": {"present": "dog"}}]})",
      "spec");
  std::string msg = error_of([&] { scorer.validate(spec); }, ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "term 'story'")) << msg;
  EXPECT_TRUE(has(msg, "config.present")) << msg;
  // Unknown field (schema: additionalProperties false).
  msg = error_of([&] { scorer.validate(one_term("length", R"({"target": 3, "unit_": "x"})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "config.unit_")) << msg;
  // Enum and required (schema).
  msg = error_of([&] { scorer.validate(one_term("length", R"({"target": 3, "unit": "words"})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "config.unit")) << msg;
  msg = error_of([&] { scorer.validate(one_term("regex")); }, ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "config.pattern")) << msg;
  // Errors only create() can see: a pattern that does not compile, an empty keyword list.
  msg = error_of([&] { scorer.validate(one_term("regex", R"({"pattern": "(unclosed"})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "regex: config.pattern")) << msg;
  msg = error_of([&] { scorer.score(one_term("keywords"), kItems); }, ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "keywords")) << msg;
  // The plugin's own message when schema passes but create() refuses a value.
  msg = error_of([&] { scorer.validate(one_term("keywords", R"({"present": ["a", ""]})")); },
                 ErrorCode::invalid_argument);
  EXPECT_TRUE(has(msg, "empty")) << msg;
  expect_good_call(scorer);
  EXPECT_EQ(scorer.host_restarts(), 0u);
}

TEST(RewardHost, EmptyBatchNeedsNoHost) {
  RewardScorer scorer(host_options());
  RewardBatch b = scorer.score(one_term("numeric_match"), {});
  EXPECT_TRUE(b.total.empty());
  ASSERT_EQ(b.per_term.size(), 1u);
}

}  // namespace
}  // namespace spindle::rewards
