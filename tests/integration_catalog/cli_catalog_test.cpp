// `spindle catalog` as a real process, in the forms the README gives.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "helper/commit_loop_common.h"
#include "run_spindle.h"
#include "shared_fixtures.h"
#include "spindle/adapters/optimizer_state.h"
#include "spindle/adapters/peft.h"
#include "spindle/engine/loader.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using spindle::testing::RunResult;
using spindle::testing::shell_quote;

class CatalogCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("spindle_catalog_cli_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Runs `spindle catalog --data-dir <root>/data <args...>`.
  RunResult run(const std::vector<std::string>& args, const std::string& env = "") {
    std::vector<std::string> full = {"catalog", "--data-dir", (root_ / "data").string()};
    full.insert(full.end(), args.begin(), args.end());
    return spindle::testing::run_spindle(full, env);
  }

  json run_json(const std::vector<std::string>& args) {
    std::vector<std::string> a = args;
    a.push_back("--json");
    const RunResult r = run(a);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  }

  fs::path peft_dir(uint64_t seed) {
    const fs::path d = root_ / ("peft" + std::to_string(seed));
    spindle::adapters::save_peft(spindle::catalog::durability::loop_adapter(seed), d,
                                 {.base_model_name_or_path = "org/tiny-base"});
    return d;
  }

  fs::path root_;
};

TEST_F(CatalogCli, ImportShowListSearchForkRollbackTagExportRmGc) {
  // import-peft creates the policy (spec from adapter_config.json) and commits revision 1.
  const RunResult imp = run({"import-peft", peft_dir(1).string(), "math-grpo", "--description",
                             "GRPO on grade school math", "--tag", "rl"});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_NE(imp.err.find("registered base model org/tiny-base"), std::string::npos) << imp.err;
  const std::string addr1 = imp.out.substr(0, imp.out.find('\n'));
  EXPECT_TRUE(addr1.starts_with("spindle://local/math-grpo@")) << addr1;
  const std::string rev1 = addr1.substr(addr1.find('@') + 1);
  const json r2 = run_json({"import-peft", peft_dir(2).string(), "math-grpo"});
  EXPECT_EQ(r2["parent"], rev1);
  EXPECT_EQ(r2["step"], 1);

  const json show = run_json({"show", "math-grpo"});
  EXPECT_EQ(show["policy"]["address"], "spindle://local/math-grpo");
  EXPECT_EQ(show["policy"]["base"], "org/tiny-base");  // a Hugging Face id is kept whole
  EXPECT_EQ(show["policy"]["lora"]["rank"], 8);
  EXPECT_EQ(show["revision"]["id"], r2["id"]);
  const RunResult human = run({"show", "spindle://local/math-grpo@" + rev1.substr(0, 10)});
  EXPECT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("revision     " + rev1), std::string::npos) << human.out;

  const json found = run_json({"search", "grade"});
  ASSERT_EQ(found["items"].size(), 1u);
  EXPECT_EQ(found["items"][0]["name"], "math-grpo");

  const json fork = run_json({"fork", "math-grpo@" + rev1, "explore"});
  EXPECT_EQ(fork["head"], rev1);
  const json lin = run_json({"lineage", "math-grpo@" + rev1});
  EXPECT_EQ(lin["descendants"].size(), 1u);
  EXPECT_NE(run({"lineage", "math-grpo"}).out.find(rev1.substr(0, 12)), std::string::npos);

  const RunResult rb = run({"rollback", "spindle://local/math-grpo@" + rev1});
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rb.out, "spindle://local/math-grpo@" + rev1 + "\n");

  EXPECT_EQ(run({"tag", "explore", "wip"}).out, "spindle://local/explore tags: wip\n");
  EXPECT_EQ(run({"tag", "explore", "wip", "--remove"}).out,
            "spindle://local/explore tags: (none)\n");

  const json page1 = run_json({"ls", "--limit", "1"});
  ASSERT_EQ(page1["items"].size(), 1u);
  EXPECT_EQ(page1["items"][0]["name"], "explore");
  const json page2 = run_json({"ls", "--limit", "1", "--cursor", page1["next_cursor"]});
  EXPECT_EQ(page2["items"][0]["name"], "math-grpo");
  EXPECT_EQ(page2["next_cursor"], "");
  const RunResult table = run({"ls"});
  EXPECT_NE(table.out.find("NAME"), std::string::npos);
  EXPECT_NE(table.out.find("math-grpo"), std::string::npos);

  // export-peft writes a directory PEFT (and load_peft) reads back bit for bit.
  const fs::path out = root_ / "exported";
  const RunResult ex = run({"export-peft", "math-grpo@" + rev1, out.string()});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  const auto back = spindle::adapters::load_peft(out, spindle::catalog::durability::loop_config());
  const auto want = spindle::catalog::durability::loop_adapter(1);
  const auto& a = back.modules[1][size_t(spindle::engine::LoraTarget::v)].B;
  const auto& b = want.modules[1][size_t(spindle::engine::LoraTarget::v)].B;
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.bytes()));

  EXPECT_EQ(run({"rm", "explore"}).exit_code, 0);
  EXPECT_EQ(run_json({"ls"})["items"].size(), 1u);
  const json gc = run_json({"gc", "--retention-days", "0", "--grace-seconds", "0"});
  EXPECT_EQ(gc["policies_purged"], 1);
  EXPECT_TRUE(run_json({"check"})["ok"].get<bool>());
}

TEST_F(CatalogCli, ErrorsAreClearAndTenantScoped) {
  ASSERT_EQ(run({"import-peft", peft_dir(3).string(), "secret", "--tenant", "a"}).exit_code, 0);
  const RunResult bad = run({"show", "spindle:/a/secret"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("malformed address 'spindle:/a/secret'"), std::string::npos) << bad.err;
  // Tenant b (and the default tenant) cannot see a's policy; the error is "not found".
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"show", "spindle://a/secret", "--tenant", "b"},
        std::vector<std::string>{"fork", "spindle://a/secret", "mine", "--tenant", "b"},
        std::vector<std::string>{"show", "secret"}}) {
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("not_found"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_json({"search", "secret", "--tenant", "b"})["items"].size(), 0u);
  EXPECT_EQ(run_json({"show", "secret", "--tenant", "a"})["policy"]["name"], "secret");
  // The data dir comes from SPINDLE_DATA_DIR when --data-dir is absent.
  const auto r = spindle::testing::run_spindle(
      {"catalog", "--tenant", "a", "ls", "--json"},
      "SPINDLE_DATA_DIR=" + shell_quote((root_ / "data").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string out = r.out;
  EXPECT_EQ(json::parse(out)["items"].size(), 1u);
}

TEST_F(CatalogCli, ImportValidatesAgainstARealBase) {
  SPINDLE_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  const fs::path hf = root_ / "stories-hf";
  const auto converted =
      spindle::testing::run_spindle({"convert", "--from", bin.string(), "--to", hf.string()});
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  const auto base = spindle::engine::load_model(hf);
  const spindle::engine::LoraTarget t[] = {spindle::engine::LoraTarget::q,
                                           spindle::engine::LoraTarget::up};
  const auto w = spindle::engine::LoraWeights::random(base.config, 4, 8.0f, t, 5, 0.1f, 0.1f);
  spindle::adapters::save_peft(w, root_ / "ok", {.base_model_name_or_path = "x"});
  const RunResult ok = run({"import-peft", (root_ / "ok").string(), "story", "--base",
                            "stories260K", "--base-path", hf.string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const json b = run_json({"show", "story"});
  EXPECT_EQ(b["policy"]["base"], "stories260K");
  // An adapter made for another shape is refused, naming the module.
  auto other_cfg = base.config;
  other_cfg.hidden_dim += 8;
  const auto bad = spindle::engine::LoraWeights::random(other_cfg, 4, 8.0f, t, 6, 0.1f, 0.1f);
  spindle::adapters::save_peft(bad, root_ / "bad", {.base_model_name_or_path = "x"});
  const RunResult r =
      run({"import-peft", (root_ / "bad").string(), "story", "--base", "stories260K"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("up_proj"), std::string::npos) << r.err;
}

}  // namespace

namespace {

TEST_F(CatalogCli, OptimizerStateTravelsThroughImportAndExport) {
  const fs::path dir = peft_dir(3);
  // An adapter directory as `spindle sft` leaves it: weights plus optimizer state.
  spindle::engine::LoraWeights w = spindle::catalog::durability::loop_adapter(3);
  spindle::engine::LoraWeights g = w.clone();
  std::vector<spindle::engine::ParamRef> refs;
  for (size_t l = 0; l < w.modules.size(); ++l)
    for (size_t t = 0; t < w.modules[l].size(); ++t) {
      if (w.modules[l][t].empty()) continue;
      const std::string key =
          spindle::engine::lora_module_key(int64_t(l), spindle::engine::LoraTarget(t));
      refs.push_back({key + ".lora_A.weight", &w.modules[l][t].A, &g.modules[l][t].A});
      refs.push_back({key + ".lora_B.weight", &w.modules[l][t].B, &g.modules[l][t].B});
    }
  spindle::engine::AdamW adam;
  for (int i = 0; i < 2; ++i) adam.step(refs, {.learning_rate = 1e-3f});
  spindle::adapters::save_optimizer_state(adam, dir);

  const RunResult imp = run({"import-peft", dir.string(), "resumable"});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  const fs::path out = root_ / "exported";
  const RunResult exp = run({"export-peft", "resumable", out.string()});
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  ASSERT_TRUE(spindle::adapters::has_optimizer_state(out));
  EXPECT_EQ(spindle::adapters::load_optimizer_state(out).serialize(), adam.serialize());
}

}  // namespace
