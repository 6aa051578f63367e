// `spindle-studio --screenshot DIR` under a real X server (xvfb-run; the ImGui panel needs GL):
// with real data in the daemon (policies with a lineage and a fork, a finished GRPO run), every
// view is rendered to DIR/<view>.png, and no image is blank (pixel variance well above a flat
// fill). The images are also what a reviewer looks at.

#include <QImage>

#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "gui_images.h"
#include "studio_fixture.h"

namespace spindle::testing {
namespace {

using namespace protocol;
using json = nlohmann::json;

class StudioScreenshots : public StudioTest {
 protected:
  // Real data for every view: a policy with three revisions and a fork, and a finished run.
  void populate() {
    auto c = client();
    CreateTrainingRequest req;
    req.policy = "storyteller";
    req.rank = 4;
    req.description = "stories260K LoRA, three SFT steps";
    const auto s = c->create_training(req);
    const std::vector<int32_t> tokens = c->tokenize("Once upon a time there was a little cat");
    Datum d;
    d.model_input.assign(tokens.begin(), tokens.end() - 1);
    d.target_tokens.assign(tokens.begin() + 1, tokens.end());
    d.weights.assign(d.target_tokens.size(), 1.0f);
    std::string head;
    for (int step = 0; step < 3; ++step) {
      const auto fb = c->forward_backward(s.session_id, {d});
      AdamParamsMsg adam;
      adam.learning_rate = 1e-2f;
      c->optim_step(s.session_id, adam);
      head = c->save_weights(s.session_id, "", json{{"loss", fb.metric("loss:sum")}}.dump()).revision_id;
    }
    c->close_training(s.session_id);
    SamplingParamsMsg sp;
    sp.max_tokens = 8;
    c->sample(s.policy_address + "@latest", tokens, 2, sp);  // a resident adapter for Residency
    c->catalog_fork(s.policy_address + "@" + head, "storyteller-fork");
    c->catalog_tag(s.policy_address, {"demo", "sft"});
    json policy = {{"name", "cat-lover"},
                   {"rank", 4},
                   {"alpha", 8},
                   {"learning_rate", 1e-2},
                   {"dataset", {{"name", "inline"}, {"prompts", {"Once upon a time", "One day", "Lily saw"}}}},
                   {"reward", {{"terms", {{{"name", "cat"}, {"plugin", "keywords"}, {"weight", 1},
                                            {"config", {{"present", {"cat"}}}}}}}}}};
    json config = {{"seed", 1}, {"steps", 3}, {"group_size", 4}, {"prompts_per_step", 2},
                   {"max_tokens", 12}, {"eval_every", 0}, {"save_every", 0}, {"eval_prompts", 0},
                   {"policies", {policy}}};
    const auto run = c->run_start(config.dump());
    for (int i = 0; i < 3000; ++i) {
      const auto st = c->run_status(run.run_id);
      if (st.run.status != "running" && st.run.status != "queued") break;
      QTest::qWait(100);
    }
  }
};

TEST_F(StudioScreenshots, EveryViewRendersToANonBlankPng) {
  if (std::system("command -v xvfb-run > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "xvfb-run not found (Debian package xvfb): the GL panel needs a real X server";
  populate();
  const auto out = std::filesystem::temp_directory_path() / ("studio_shots_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  const std::string cmd = "QT_QPA_PLATFORM=xcb xvfb-run -a -s '-screen 0 1600x1000x24' " +
                          (binary_dir() / "app" / "spindle-studio").string() + " --screenshot " +
                          out.string() + " --endpoint " + ipc() + " --token " + kAliceToken +
                          " --screenshot-timeout 90 > " + (out.string() + ".log") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(out.string() + ".log");
  const std::string log_text((std::istreambuf_iterator<char>(log)), {});
  ASSERT_EQ(rc, 0) << log_text;
  for (const char* view : {"catalog", "policy", "playground", "rewards", "runs", "residency"}) {
    const auto file = out / (std::string(view) + ".png");
    ASSERT_TRUE(std::filesystem::exists(file)) << file << "\n" << log_text;
    QImage img(QString::fromStdString(file.string()));
    ASSERT_FALSE(img.isNull()) << file;
    EXPECT_GE(img.width(), 800) << file;
    EXPECT_GT(pixel_variance(img), 100.0) << file << " looks blank";
  }
  if (const char* keep = std::getenv("SPINDLE_KEEP_SCREENSHOTS"); keep && *keep) {
    std::filesystem::create_directories(keep);
    for (const auto& e : std::filesystem::directory_iterator(out))
      std::filesystem::copy_file(e.path(), std::filesystem::path(keep) / e.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
  }
}

}  // namespace
}  // namespace spindle::testing
