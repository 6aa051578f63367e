// RunConfigForm: the config JSON it builds, the field paths of server messages, and a bad field
// refused by a real spindled's run_start highlighted on exactly that field.

#include <QSignalSpy>

#include "runs_test_util.h"
#include "spindle/ui/run_config_form.h"

namespace spindle::testing {
namespace {

using json = nlohmann::json;
using ui::RunConfigForm;

TEST(RunConfigFormModel, BuildsTheConfigJsonOfItsFields) {
  RunConfigForm form(nullptr);
  fill_tiny_run(form, "x", 5);
  form.setValue(RunConfigForm::policyPath(1, "loss"), "cispo");
  form.setValue(RunConfigForm::policyPath(1, "advantage"), "dr_grpo");
  form.setValue(RunConfigForm::policyPath(1, "targets"), "q, v");
  form.setValue(RunConfigForm::policyPath(1, "loss_config.clip_high_threshold"), 1.28);
  const json j = json::parse(form.configJson().toStdString());
  EXPECT_EQ(j["steps"], 5);
  EXPECT_EQ(j["group_size"], 4);
  EXPECT_EQ(j["eval_prompts"], 0);
  ASSERT_EQ(j["policies"].size(), 2u);
  const json& dog = j["policies"][1];
  EXPECT_EQ(dog["name"], "x-dog");
  EXPECT_EQ(dog["rank"], 4);
  EXPECT_DOUBLE_EQ(dog["learning_rate"].get<double>(), 1e-2);
  EXPECT_EQ(dog["loss"], "cispo");
  EXPECT_EQ(dog["advantage"], "dr_grpo");
  EXPECT_EQ(dog["targets"], json::array({"q", "v"}));
  EXPECT_DOUBLE_EQ(dog["loss_config"]["clip_high_threshold"].get<double>(), 1.28);
  EXPECT_EQ(dog["dataset"], (json{{"name", "inline"},
                                  {"prompts", {"Once upon a time", "One day", "Lily saw"}}}));
  EXPECT_EQ(dog["reward"], json::parse(keyword_reward("dog")));
  EXPECT_FALSE(dog.contains("eval_metric_term"));  // empty optional fields are left out
  EXPECT_FALSE(j["policies"][0].contains("targets"));  // empty = the server's default set

  // Loading a run's config back gives the same JSON (fork / relaunch).
  RunConfigForm again(nullptr);
  ASSERT_TRUE(again.loadConfigJson(QString::fromStdString(j.dump())));
  EXPECT_EQ(json::parse(again.configJson().toStdString()), j);

  // The reward designer's spec goes to every policy.
  form.setRewardSpec(QString::fromStdString(keyword_reward("sun")));
  const json k = json::parse(form.configJson().toStdString());
  EXPECT_EQ(k["policies"][0]["reward"], json::parse(keyword_reward("sun")));
  EXPECT_EQ(k["policies"][1]["reward"], json::parse(keyword_reward("sun")));
  // Every field has a doc for its tooltip.
  for (const auto& f : ui::runConfigFields()) EXPECT_FALSE(f.doc.isEmpty()) << f.key.toStdString();
  EXPECT_TRUE(form.toolTip("group_size").contains("[2, 256]"));
}

TEST(RunConfigFormModel, MapsServerFieldPathsToFormFields) {
  RunConfigForm form(nullptr);
  form.addPolicy();
  auto at = [&](const QString& message) {
    return form.formPathFor(RunConfigForm::errorPathOfMessage(message), message);
  };
  EXPECT_EQ(at("run_start config_json: policies[0].learning_rate: must be > 0, got -1"),
            "policies[0].learning_rate");
  EXPECT_EQ(at("run_start config_json: group_size: must be in [2, 256], got 0"), "group_size");
  EXPECT_EQ(at("run_start config_json: config.steps: wrong type (\"x\")"), "steps");
  EXPECT_EQ(at("run_start config_json: policies[1].reward: policies[1].reward: field 'terms' "
               "is missing"),
            "policies[1].reward");
  EXPECT_EQ(at("run_start config_json: policies[1].loss_config: loss config: "
               "clip_high_threshold must be finite and >= 1, got 0.5"),
            "policies[1].loss_config.clip_high_threshold");
  EXPECT_EQ(at("run_start config_json: policies[0].dataset.prompts: required for an inline "
               "dataset"),
            "policies[0].dataset.prompts");
  EXPECT_EQ(at("run_start config_json: policies: at least one policy is needed"), "");
  EXPECT_EQ(at("policies[7].rank: must be in [1, 256], got 0"), "");  // no such policy
}

class RunConfigFormTest : public StudioTest {};

// Launches `form` and waits for its answer; returns the failure's (code, message).
std::pair<QString, QString> launch_and_fail(RunConfigForm& form) {
  QSignalSpy failed(&form, &RunConfigForm::launchFailed);
  QSignalSpy launched(&form, &RunConfigForm::launched);
  form.launch();
  EXPECT_TRUE(QTest::qWaitFor([&] { return failed.count() + launched.count() > 0; }, 60000));
  EXPECT_EQ(launched.count(), 0) << "the daemon accepted a bad config";
  if (failed.isEmpty()) return {};
  return {failed.at(0).at(0).toString(), failed.at(0).at(1).toString()};
}

TEST_F(RunConfigFormTest, ServerRefusalHighlightsExactlyThatField) {
  auto conn = open_connection();
  RunConfigForm form(conn.get());
  fill_tiny_run(form, unique("bad"), 2);

  form.setValue(RunConfigForm::policyPath(1, "learning_rate"), -1);
  auto [code, message] = launch_and_fail(form);
  EXPECT_EQ(code, "invalid_argument");
  EXPECT_EQ(form.errorFields(), QStringList{"policies[1].learning_rate"}) << message.toStdString();
  EXPECT_EQ(form.fieldError("policies[1].learning_rate"), message);
  EXPECT_TRUE(message.contains("policies[1].learning_rate: must be > 0, got -1"))
      << message.toStdString();
  EXPECT_TRUE(form.toolTip("policies[1].learning_rate").contains("must be &gt; 0"));
  EXPECT_EQ(form.bannerError(), "invalid_argument: " + message);
  // Editing the field clears its highlight.
  form.setValue(RunConfigForm::policyPath(1, "learning_rate"), 1e-2);
  EXPECT_TRUE(form.errorFields().isEmpty());

  form.setValue("group_size", 0);
  std::tie(code, message) = launch_and_fail(form);
  EXPECT_EQ(code, "invalid_argument");
  EXPECT_EQ(form.errorFields(), QStringList{"group_size"}) << message.toStdString();
  EXPECT_TRUE(form.fieldError("group_size").contains("must be in [2, 256], got 0"));
  form.setValue("group_size", 4);

  // A loss_config member: the server names the group and the member in its message.
  form.setValue(RunConfigForm::policyPath(0, "loss_config.clip_low_threshold"), 1.5);
  std::tie(code, message) = launch_and_fail(form);
  EXPECT_EQ(form.errorFields(), QStringList{"policies[0].loss_config.clip_low_threshold"})
      << message.toStdString();
  form.setValue(RunConfigForm::policyPath(0, "loss_config.clip_low_threshold"), 0.8);

  // A reward spec that is not JSON is refused locally: nothing is sent.
  form.setValue(RunConfigForm::policyPath(0, "reward"), "{not json");
  const quint64 sent = conn->requestsSent();
  std::tie(code, message) = launch_and_fail(form);
  EXPECT_EQ(form.errorFields(), QStringList{"policies[0].reward"});
  EXPECT_EQ(conn->requestsSent(), sent);
}

}  // namespace
}  // namespace spindle::testing
