// The client's data-dir rule (protocol/data_dir.h): the user's own daemon first, the system
// daemon (/var/lib/spindle, here a temp folder standing in for it) when only that one runs, and
// an explicit folder or $SPINDLE_DATA_DIR always as given.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "spindle/protocol/data_dir.h"

namespace spindle::protocol {
namespace {

namespace fs = std::filesystem;

class ClientDataDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    root_ = fs::temp_directory_path() / ("spindle_datadir_" + std::to_string(rd()));
    fs::create_directories(root_ / "xdg" / "spindle");
    fs::create_directories(root_ / "system");
    saved_data_ = getenv_or("SPINDLE_DATA_DIR");
    saved_xdg_ = getenv_or("XDG_DATA_HOME");
    ::unsetenv("SPINDLE_DATA_DIR");
    ::setenv("XDG_DATA_HOME", (root_ / "xdg").c_str(), 1);
  }
  void TearDown() override {
    restore("SPINDLE_DATA_DIR", saved_data_);
    restore("XDG_DATA_HOME", saved_xdg_);
    fs::remove_all(root_);
  }
  static std::string getenv_or(const char* k) {
    const char* v = std::getenv(k);
    return v ? v : "\x01";
  }
  static void restore(const char* k, const std::string& v) {
    if (v == "\x01") ::unsetenv(k);
    else ::setenv(k, v.c_str(), 1);
  }
  static void touch(const fs::path& p) { std::ofstream(p) << ""; }
  fs::path mine() const { return root_ / "xdg" / "spindle"; }
  fs::path system() const { return root_ / "system"; }
  fs::path root_;
  std::string saved_data_, saved_xdg_;
};

TEST_F(ClientDataDir, OwnDaemonWinsAndTheSystemDaemonIsTheFallback) {
  EXPECT_EQ(client_data_dir({}, system()), mine()) << "no daemon anywhere: the user's own dir";
  touch(system() / "spindled.sock");
  EXPECT_EQ(client_data_dir({}, system()), system()) << "only the system daemon runs";
  touch(mine() / "spindled.sock");
  EXPECT_EQ(client_data_dir({}, system()), mine()) << "the user's own daemon runs too";
}

TEST_F(ClientDataDir, ExplicitDirAndEnvironmentAreNeverRedirected) {
  touch(system() / "spindled.sock");
  EXPECT_EQ(client_data_dir(root_ / "explicit", system()), root_ / "explicit");
  ::setenv("SPINDLE_DATA_DIR", (root_ / "env").c_str(), 1);
  EXPECT_EQ(client_data_dir({}, system()), root_ / "env");
  EXPECT_EQ(default_data_dir(), root_ / "env");  // the daemon's own rule is unchanged
}

}  // namespace
}  // namespace spindle::protocol
