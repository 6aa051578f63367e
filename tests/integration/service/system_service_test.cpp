// What the system service (packaging/systemd/spindled.service) relies on: --group-access makes
// the IPC sockets 0660 and the token file 0640 (tokens.json stays 0600), and SIGHUP (systemctl
// reload) asks for a reward plugin rescan without stopping the daemon.

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

TEST(SystemService, GroupAccessOpensSocketAndTokenToTheGroupOnly) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  {
    Daemon d(fresh_dir("private"), {});
    EXPECT_EQ(mode_of(d.data_dir() / "spindled.sock"), 0600u);
    EXPECT_EQ(mode_of(d.data_dir() / "token"), 0600u);
    EXPECT_EQ(d.terminate(), 0);
  }
  Daemon d(fresh_dir("group"), {"--group-access", "true"});
  EXPECT_EQ(mode_of(d.data_dir() / "spindled.sock"), 0660u);
  EXPECT_EQ(mode_of(d.data_dir() / "spindled-events.sock"), 0660u);
  EXPECT_EQ(mode_of(d.data_dir() / "token"), 0640u);
  EXPECT_EQ(mode_of(d.data_dir() / "tokens.json"), 0600u) << "every tenant's token stays private";
  RawClient c(d.ipc(), d.token());
  c.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"group"});
  EXPECT_EQ(d.terminate(), 0);
}

TEST(SystemService, SighupRescansPluginsAndKeepsServing) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  Daemon d(fresh_dir("hup"), {});
  RawClient c(d.ipc(), d.token());
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  bool logged = false;
  for (int i = 0; i < 100 && !logged; ++i) {
    logged = d.log().find("SIGHUP: reward plugins will be rescanned") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(logged) << d.log();
  // Still serving, and the plugins are listed after the rescan.
  const auto plugins = c.ok<RewardPluginsReply>(Op::reward_plugins, Empty{});
  EXPECT_FALSE(plugins.plugins.empty());
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace spindle::testing
