#pragma once
// Helpers of the Runs view suite: a tiny GRPO run on stories260K (two policies rewarded for the
// words "cat" and "dog" by the keywords plugin, inline prompts, a few steps: seconds on two
// cores), set up through the form model or as JSON for the blocking client.

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "spindle/ui/run_config_form.h"
#include "studio_fixture.h"

namespace spindle::testing {

inline std::string keyword_reward(const std::string& word) {
  return nlohmann::json{{"terms",
                         {{{"name", word},
                           {"plugin", "keywords"},
                           {"weight", 1},
                           {"config", {{"present", {word}}}}}}}}
      .dump();
}

// Fills `form` with the tiny run: policies "<prefix>-cat" and "<prefix>-dog".
inline void fill_tiny_run(ui::RunConfigForm& form, const std::string& prefix, int64_t steps,
                          int64_t save_every = 0) {
  using ui::RunConfigForm;
  const std::map<QString, QVariant> run = {
      {"seed", 3},        {"steps", qint64(steps)}, {"group_size", 4},
      {"prompts_per_step", 2}, {"max_tokens", 12},  {"eval_every", 0},
      {"save_every", qint64(save_every)}, {"eval_prompts", 0}};
  for (const auto& [k, v] : run) EXPECT_TRUE(form.setValue(k, v)) << k.toStdString();
  while (form.policyCount() < 2) form.addPolicy();
  const char* words[] = {"cat", "dog"};
  for (int i = 0; i < 2; ++i) {
    auto p = [&](const char* key) { return RunConfigForm::policyPath(i, key); };
    EXPECT_TRUE(form.setValue(p("name"), QString::fromStdString(prefix + "-" + words[i])));
    form.setValue(p("rank"), 4);
    form.setValue(p("alpha"), 8);
    form.setValue(p("learning_rate"), 1e-2);
    form.setValue(p("dataset.name"), "inline");
    form.setValue(p("dataset.prompts"), QStringList{"Once upon a time", "One day", "Lily saw"});
    form.setValue(p("reward"), QString::fromStdString(keyword_reward(words[i])));
  }
}

// The same run as JSON, for the blocking client.
inline std::string tiny_run_json(const std::string& prefix, int64_t steps, int64_t seed = 3) {
  nlohmann::json c = {{"seed", seed},          {"steps", steps},      {"group_size", 4},
                      {"prompts_per_step", 2}, {"max_tokens", 12}, {"eval_every", 0},
                      {"save_every", 0},    {"eval_prompts", 0}};
  for (const char* w : {"cat", "dog"}) {
    c["policies"].push_back(
        {{"name", prefix + "-" + w},
         {"rank", 4},
         {"alpha", 8},
         {"learning_rate", 1e-2},
         {"dataset", {{"name", "inline"}, {"prompts", {"Once upon a time", "One day", "Lily saw"}}}},
         {"reward", nlohmann::json::parse(keyword_reward(w))}});
  }
  return c.dump();
}

inline bool finished(const std::string& status) {
  return status == "done" || status == "failed" || status == "stopped";
}

// Polls the blocking client until the run is finished (the test's expected values).
inline protocol::RunStatusReply wait_finished(protocol::Client& c, const std::string& run_id,
                                              int timeout_ms = 300000) {
  protocol::RunStatusReply r;
  (void)QTest::qWaitFor(
      [&] {
        r = c.run_status(run_id, 0);
        return finished(r.run.status);
      },
      timeout_ms);
  return r;
}

}  // namespace spindle::testing
