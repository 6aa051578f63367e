#pragma once
// Test support for the Studio suites (label gui): a real spindled serving stories260K on a fresh
// two-tenant data dir (alice, bob), and a Connection of spindle_ui opened on it. Qt runs with
// QT_QPA_PLATFORM=offscreen (set by gui_main.cpp unless the environment says otherwise).
//
// Waiting: tests never sleep a fixed time; they wait for a condition with QTest::qWaitFor, which
// spins the Qt event loop (replies arrive as queued calls) up to a generous bound.

#include <gtest/gtest.h>

#include <QSignalSpy>
#include <QTest>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shared_fixtures.h"
#include "spindled_process.h"
#include "spindle/protocol/client.h"
#include "spindle/ui/connection.h"

namespace spindle::testing {

inline const std::string kAliceToken = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
inline const std::string kBobToken = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

inline std::filesystem::path stories_model_path() {
  return shared_dir() / "models" / "stories260K" / "stories260K.bin";
}

inline std::filesystem::path fresh_gui_dir(const std::string& tag) {
  std::random_device rd;
  const auto d = std::filesystem::temp_directory_path() /
                 ("studio_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  std::ofstream(d / "tokens.json") << R"([{"token": ")" << kAliceToken
                                   << R"(", "tenant": "alice"}, {"token": ")" << kBobToken
                                   << R"(", "tenant": "bob"}])";
  return d;
}

// One daemon per test suite (starting one costs ~1 s); each test gets its own Connection.
class StudioTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(stories_model_path())) return;
    dir_ = fresh_gui_dir("suite");
    daemon_ = std::make_unique<SpindledProcess>(
        binary_dir() / "app" / "spindled", dir_,
        std::vector<std::string>{"--model", stories_model_path().string()},
        /*ready_timeout_s=*/60);
  }
  static void TearDownTestSuite() {
    if (daemon_) daemon_->terminate();
    daemon_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void SetUp() override {
    if (!daemon_) {
      GTEST_SKIP() << "fixture missing: " << stories_model_path().string()
                   << " (set SPINDLE_SHARED_DIR to the folder holding models/stories260K)";
    }
  }

  static std::string ipc() { return daemon_->endpoints().at(0); }
  static protocol::ClientOptions options(const std::string& token = kAliceToken) {
    protocol::ClientOptions o;
    o.endpoint = ipc();
    o.token = token;
    o.client_name = "studio-test";
    o.timeout_ms = 120000;
    return o;
  }
  // A blocking client for setting up data and computing expected values (never the GUI path).
  static std::unique_ptr<protocol::Client> client(const std::string& token = kAliceToken) {
    return std::make_unique<protocol::Client>(options(token));
  }
  // A Connection of spindle_ui, opened and handshaken (fails the test otherwise).
  std::unique_ptr<ui::Connection> open_connection(const std::string& token = kAliceToken) {
    auto c = std::make_unique<ui::Connection>();
    QSignalSpy opened(c.get(), &ui::Connection::opened);
    c->open(options(token));
    EXPECT_TRUE(QTest::qWaitFor([&] { return opened.count() > 0; }, 10000)) << "no handshake";
    return c;
  }
  // A unique policy name per call.
  static std::string unique(const std::string& stem) {
    static int n = 0;
    return stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
  }

  static inline std::filesystem::path dir_;
  static inline std::unique_ptr<SpindledProcess> daemon_;
};

}  // namespace spindle::testing
