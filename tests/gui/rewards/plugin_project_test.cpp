// "New plugin…": the generated project builds standalone with cmake against the SDK headers
// (slow: two cmake runs), and once copied into a folder of $SPINDLE_REWARD_PLUGIN_PATH and
// rescanned, a daemon lists it and reward_test scores with it. This test starts its own
// spindled with that variable set (SpindledProcess inherits the environment).

#include <QDir>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <cstdlib>

#include "studio_fixture.h"
#include "spindle/ui/plugin_project.h"
#include "spindle/ui/reward_designer_model.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

TEST(PluginProject, NamesAndTemplateText) {
  EXPECT_TRUE(ui::isValidPluginName("my_reward2"));
  EXPECT_FALSE(ui::isValidPluginName("My-Reward"));
  EXPECT_FALSE(ui::isValidPluginName(""));
  EXPECT_FALSE(ui::isValidPluginName("a b"));
  EXPECT_EQ(ui::pluginLibraryName("x"), "spindle_reward_x.so");
  EXPECT_TRUE(QFileInfo::exists(ui::defaultSdkIncludeDir() + "/spindle/reward_plugin.hpp"))
      << ui::defaultSdkIncludeDir().toStdString();
  const QString src = ui::pluginSourceText("abc", "say \"hi\"\\");
  EXPECT_TRUE(src.contains(R"(SPINDLE_REWARD_PLUGIN(Reward, "abc", "say \"hi\"\\", kConfigSchema)"));
  QTemporaryDir dir;
  EXPECT_FALSE(ui::writePluginProject(dir.path(), "Bad-Name", {}).isEmpty());
  EXPECT_EQ(ui::writePluginProject(dir.path(), "abc", {}), QString());
  EXPECT_TRUE(ui::writePluginProject(dir.path(), "abc", {}).contains("exists already"));
}

// "Slow" in the name: `ctest -E Slow` skips it (two cmake runs and a second daemon).
class PluginProjectSlowTest : public StudioTest {};

TEST_F(PluginProjectSlowTest, GeneratedPluginBuildsLoadsAndScores) {
  QTemporaryDir work;
  ASSERT_TRUE(work.isValid());
  const QString plugin_dir = work.filePath("plugins");
  ASSERT_TRUE(QDir().mkpath(plugin_dir));
  const QString project = work.filePath("studio_min_chars");
  const QString name = QStringLiteral("studio_min_chars");
  ASSERT_EQ(ui::writePluginProject(project, name, "at least min_chars characters"), QString());

  ui::PluginBuilder builder;
  QString log;
  QObject::connect(&builder, &ui::PluginBuilder::output, [&](const QString& t) { log += t; });
  QSignalSpy finished(&builder, &ui::PluginBuilder::finished);
  builder.start(project, name);
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() > 0; }, 300000)) << log.toStdString();
  ASSERT_TRUE(finished.last().at(0).toBool())
      << finished.last().at(2).toString().toStdString() << "\n" << log.toStdString();
  const QString library = finished.last().at(1).toString();
  EXPECT_TRUE(library.endsWith("/build/spindle_reward_studio_min_chars.so"));
  EXPECT_TRUE(log.contains("$ cmake -S")) << "the log streams both steps";
  EXPECT_TRUE(log.contains("$ cmake --build"));

  // A daemon that searches plugin_dir (empty for now).
  const auto data = fresh_gui_dir("plugins");
  ::setenv("SPINDLE_REWARD_PLUGIN_PATH", plugin_dir.toStdString().c_str(), 1);
  SpindledProcess daemon(binary_dir() / "app" / "spindled", data,
                         {"--model", stories_model_path().string()}, /*ready_timeout_s=*/60);
  ::unsetenv("SPINDLE_REWARD_PLUGIN_PATH");
  protocol::ClientOptions o = options();
  o.endpoint = daemon.endpoints().at(0);
  auto conn = std::make_unique<ui::Connection>();
  QSignalSpy opened(conn.get(), &ui::Connection::opened);
  conn->open(o);
  ASSERT_TRUE(QTest::qWaitFor([&] { return opened.count() > 0; }, 10000));

  ui::RewardDesignerModel model(conn.get());
  model.setAutosavePath({});
  QSignalSpy plugins(&model, &ui::RewardDesignerModel::pluginsChanged);
  model.refreshPlugins();
  ASSERT_TRUE(QTest::qWaitFor([&] { return plugins.count() > 0; }, 20000));
  EXPECT_EQ(model.plugin(name), nullptr);
  EXPECT_NE(model.plugin("length"), nullptr) << "the built-ins are still found";

  plugins.clear();
  ASSERT_EQ(model.installPlugin(library, plugin_dir), QString());  // copies, then plugin_rescan
  ASSERT_TRUE(QTest::qWaitFor([&] { return plugins.count() > 0; }, 20000));
  ASSERT_TRUE(model.error().isEmpty()) << model.error().toStdString();
  const auto* info = model.plugin(name);
  ASSERT_NE(info, nullptr) << "not listed after the rescan";
  EXPECT_EQ(info->version, "0.1.0");
  EXPECT_EQ(info->description, "at least min_chars characters");
  EXPECT_EQ(QFileInfo(QString::fromStdString(info->path)).absolutePath(),
            QFileInfo(plugin_dir).absoluteFilePath());

  // Usable: a term of it scores, with the form built from its schema.
  const int t = model.addTerm(name);
  ASSERT_NE(model.term(t).form.field("min_chars"), nullptr);
  EXPECT_EQ(model.term(t).form.value("min_chars"), json(8)) << "the schema's default";
  model.setTermValue(t, "min_chars", 1000000);  // no completion is that long: score = chars/1e6
  model.setAddress(QString::fromStdString(protocol::Client(o).capabilities().bases.at(0).id));
  model.rows()->setRows({{"Once upon a time", "", ""}});
  model.setNumSamples(2);
  QSignalSpy outcome(&model, &ui::RewardDesignerModel::outcomeChanged);
  model.run();
  ASSERT_TRUE(QTest::qWaitFor([&] { return outcome.count() > 0 || !model.error().isEmpty(); }, 60000));
  ASSERT_TRUE(model.error().isEmpty()) << model.error().toStdString();
  ASSERT_EQ(model.outcome().terms.size(), 1u);
  EXPECT_EQ(model.outcome().terms[0].plugin, name.toStdString());
  ASSERT_EQ(model.samples()->samples().size(), 2u);
  for (const auto& s : model.samples()->samples()) {
    EXPECT_DOUBLE_EQ(s.scores.at(0), double(s.text.toUtf8().size()) / 1e6);
    EXPECT_EQ(s.infos.at(0).toStdString(), std::to_string(s.text.toUtf8().size()) + " chars");
  }
  // The server validates it like a built-in: a value under the schema's minimum names the field.
  model.setTermValue(t, "min_chars", -1);
  model.run();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !model.error().isEmpty(); }, 60000));
  EXPECT_NE(model.term(t).form.error("min_chars").find("config.min_chars"), std::string::npos)
      << model.error().toStdString();
  conn.reset();
  daemon.terminate();
}

}  // namespace
}  // namespace spindle::testing
