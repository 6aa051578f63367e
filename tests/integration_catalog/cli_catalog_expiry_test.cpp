// `spindle catalog` on ephemeral revisions and policy user metadata: show / lineage / ls mark
// ephemeral ("ephemeral, expires <UTC>") and expired revisions and print the metadata (their
// --json forms carry expires_ms, expired, user_metadata); promote makes a revision durable;
// gc collects what expired. The catalog is set up in-process (the CLI opens the same data dir);
// collection in-process runs on an injected clock, the CLI's gc on the real one.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "helper/commit_loop_common.h"
#include "run_spindle.h"
#include "spindle/catalog/catalog.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using spindle::testing::RunResult;
namespace durability = spindle::catalog::durability;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class CatalogCliExpiry : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("spindle_catalog_cli_exp_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path data() const { return root_ / "data"; }
  RunResult run(const std::vector<std::string>& args) {
    std::vector<std::string> full = {"catalog", "--data-dir", data().string()};
    full.insert(full.end(), args.begin(), args.end());
    return spindle::testing::run_spindle(full);
  }
  json run_json(std::vector<std::string> args) {
    args.push_back("--json");
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  }

  fs::path root_;
};

TEST_F(CatalogCliExpiry, ShowLineageListPromoteAndGc) {
  const int64_t t0 = now_ms();
  int64_t clock = t0;
  spindle::catalog::CatalogOptions o;
  o.clock_ms = [&] { return clock; };
  spindle::catalog::Catalog cat(data(), o);
  cat.register_base({.id = "Org/tiny", .arch = "qwen3"}, "test");
  spindle::catalog::PolicySpec s = durability::loop_spec();
  s.name = "rl";
  s.base_id = "Org/tiny";
  s.user_metadata_json = R"({"recipe": "rl_loop", "seed": 3})";
  cat.create_policy("local", s, "test");
  const auto durable = cat.commit_revision("local", "rl", durability::loop_adapter(1), {});
  const auto gone =
      cat.commit_revision("local", "rl", durability::loop_adapter(2), {.expires_ms = t0 + 60'000});
  const int64_t later = t0 + 86'400'000;  // a day: still ephemeral when the CLI runs
  const auto head =
      cat.commit_revision("local", "rl", durability::loop_adapter(3), {.expires_ms = later});
  clock = t0 + 120'000;
  ASSERT_EQ(cat.collect_expired("test").expired.size(), 1u);  // `gone`

  // show --json: the head is ephemeral, the policy carries its metadata.
  const json show = run_json({"show", "rl"});
  EXPECT_EQ(show["policy"]["base"], "Org/tiny");
  EXPECT_EQ(show["policy"]["user_metadata"], json::parse(s.user_metadata_json));
  EXPECT_EQ(show["revision"]["id"], head.id);
  EXPECT_EQ(show["revision"]["expires_ms"], later);
  EXPECT_EQ(show["revision"]["expired"], false);
  const RunResult human = run({"show", "rl"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("user meta    {\"recipe\":\"rl_loop\",\"seed\":3}"), std::string::npos)
      << human.out;
  EXPECT_NE(human.out.find("ephemeral, expires "), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("promote it to keep it"), std::string::npos) << human.out;

  // The expired one is still shown (not servable), by id.
  const json shown_gone = run_json({"show", "rl@" + gone.id});
  EXPECT_EQ(shown_gone["revision"]["id"], gone.id);
  EXPECT_EQ(shown_gone["revision"]["expired"], true);
  EXPECT_EQ(shown_gone["revision"]["expires_ms"], t0 + 60'000);
  const RunResult gone_human = run({"show", "rl@" + gone.id});
  EXPECT_NE(gone_human.out.find("lifetime   expired at "), std::string::npos) << gone_human.out;
  const json shown_durable = run_json({"show", "rl@" + durable.id});
  EXPECT_EQ(shown_durable["revision"]["expires_ms"], 0);
  EXPECT_NE(run({"show", "rl@" + durable.id}).out.find("lifetime   durable"), std::string::npos);

  // lineage: every revision with its lifetime.
  const json lin = run_json({"lineage", "rl"});
  ASSERT_EQ(lin["ancestors"].size(), 2u);
  EXPECT_EQ(lin["revision"]["expired"], false);
  EXPECT_EQ(lin["ancestors"][0]["revision"]["id"], gone.id);
  EXPECT_EQ(lin["ancestors"][0]["revision"]["expired"], true);
  EXPECT_EQ(lin["ancestors"][1]["revision"]["expires_ms"], 0);
  const RunResult lin_human = run({"lineage", "rl"});
  EXPECT_NE(lin_human.out.find(gone.id.substr(0, 12)), std::string::npos) << lin_human.out;
  EXPECT_NE(lin_human.out.find("[expired at "), std::string::npos) << lin_human.out;
  EXPECT_NE(lin_human.out.find("[ephemeral, expires "), std::string::npos) << lin_human.out;

  // ls: the metadata column, and the JSON field.
  const json ls = run_json({"ls", "--base", "Org/tiny"});
  ASSERT_EQ(ls["items"].size(), 1u);
  EXPECT_EQ(ls["items"][0]["user_metadata"]["recipe"], "rl_loop");
  const RunResult table = run({"ls"});
  EXPECT_NE(table.out.find("METADATA"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\"recipe\":\"rl_loop\""), std::string::npos) << table.out;

  // promote: the head becomes durable; the collected one is too late.
  const RunResult promoted = run({"promote", "rl"});
  ASSERT_EQ(promoted.exit_code, 0) << promoted.err;
  EXPECT_EQ(promoted.out, "spindle://local/rl@" + head.id + " is durable\n");
  EXPECT_EQ(run_json({"show", "rl"})["revision"]["expires_ms"], 0);
  EXPECT_EQ(run_json({"promote", "rl@" + durable.id})["expires_ms"], 0);  // no-op
  const RunResult late = run({"promote", "rl@" + gone.id});
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_NE(late.err.find("not_found"), std::string::npos) << late.err;
  EXPECT_NE(late.err.find("expired at"), std::string::npos) << late.err;

  // gc collects what expired by the real clock (a revision whose short TTL has passed).
  s.name = "short";
  s.user_metadata_json = "";
  cat.create_policy("local", s, "test");
  clock = now_ms();
  const auto brief = cat.commit_revision("local", "short", durability::loop_adapter(4),
                                         {.expires_ms = clock + 50});
  while (now_ms() <= brief.expires_ms) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const json gc = run_json({"gc", "--retention-days", "0", "--grace-seconds", "0"});
  EXPECT_EQ(gc["revisions_expired"], 1);
  EXPECT_EQ(gc["expired_blobs_deleted"], 1);
  EXPECT_EQ(gc["expired_bytes_freed"], brief.bytes);
  EXPECT_FALSE(fs::exists(cat.blobs().path_of(brief.blob)));
  EXPECT_EQ(run_json({"show", "short"})["revision"]["expired"], true);
  EXPECT_TRUE(run_json({"check"})["ok"].get<bool>());
  EXPECT_EQ(run_json({"show", "rl"})["policy"]["user_metadata"]["seed"], 3);
  EXPECT_TRUE(run_json({"show", "short"})["policy"]["user_metadata"].is_null());
}

}  // namespace
