// The main window against a real spindled: it connects and shows the views with a live status
// bar, the navigation signals of one view reach another, and the one-click embedded GRPO run
// starts the server's own default recipe (capabilities.default_run_config_json) as a new run.

#include <QAction>
#include <QLabel>
#include <QStatusBar>
#include <QTabWidget>

#include <nlohmann/json.hpp>

#include "studio_fixture.h"
#include "spindle/ui/main_window.h"
#include "spindle/ui/playground_view.h"
#include "spindle/ui/policy_view.h"
#include "spindle/ui/runs_model.h"
#include "spindle/ui/runs_view.h"

namespace spindle::testing {
namespace {

using namespace protocol;

class MainWindowTest : public StudioTest {
 protected:
  std::unique_ptr<ui::MainWindow> window() {
    ui::StudioOptions o;
    o.remote = options();
    auto w = std::make_unique<ui::MainWindow>(o);
    QSignalSpy connected(w.get(), &ui::MainWindow::connected);
    w->resize(1400, 900);
    w->show();
    EXPECT_TRUE(QTest::qWaitFor([&] { return connected.count() > 0; }, 15000)) << "never connected";
    return w;
  }
  static QString statusText(ui::MainWindow& w) {
    QStringList all;
    for (QLabel* l : w.statusBar()->findChildren<QLabel*>()) all << l->text();
    return all.join(" | ");
  }
};

TEST_F(MainWindowTest, ConnectsAndShowsEndpointTenantAndSlots) {
  auto w = window();
  ASSERT_EQ(w->views().size(), 6);
  EXPECT_TRUE(QTest::qWaitFor([&] { return statusText(*w).contains("slots "); }, 10000))
      << statusText(*w).toStdString();
  const QString text = statusText(*w);
  EXPECT_TRUE(text.contains(QString::fromStdString(ipc()))) << text.toStdString();
  EXPECT_TRUE(text.contains("tenant alice")) << text.toStdString();
  EXPECT_TRUE(text.contains("spindled")) << text.toStdString();
  // Ctrl+1..6 switch views.
  w->showView(4);
  EXPECT_EQ(w->findChild<QTabWidget*>()->currentWidget(), w->views()[4]);
}

TEST_F(MainWindowTest, OpenInPlaygroundFromAnyViewAddsAColumn) {
  auto w = window();
  auto* policy = qobject_cast<ui::PolicyView*>(w->views()[1]);
  auto* playground = qobject_cast<ui::PlaygroundView*>(w->views()[2]);
  ASSERT_TRUE(policy && playground);
  emit policy->openInPlayground("spindle://alice/someone@latest");
  EXPECT_EQ(w->findChild<QTabWidget*>()->currentWidget(), playground);
}

TEST_F(MainWindowTest, EmbeddedGrpoRunIsOneClickAway) {
  auto w = window();
  QAction* run = nullptr;
  for (QAction* a : w->findChildren<QAction*>())
    if (a->text().contains("embedded GRPO")) run = a;
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(run->isEnabled());
  auto* runs_view = qobject_cast<ui::RunsView*>(w->views()[4]);
  ASSERT_NE(runs_view, nullptr);
  run->trigger();
  // A new run whose config is the server's default recipe, under a fresh policy name.
  const std::string want = client()->capabilities().default_run_config_json;
  ASSERT_FALSE(want.empty());
  QString id;
  ASSERT_TRUE(QTest::qWaitFor([&] {
    ui::RunsModel* m = runs_view->runs();
    for (int i = 0; i < m->rowCount(); ++i) {
      const auto& r = m->runAt(i);
      if (QString::fromStdString(r.config_json).contains("arith-grpo-")) id = QString::fromStdString(r.id);
    }
    return !id.isEmpty();
  }, 30000)) << "no run started";
  EXPECT_EQ(w->findChild<QTabWidget*>()->currentWidget(), runs_view);
  auto c = client();
  const auto st = c->run_status(id.toStdString());
  const auto got = nlohmann::json::parse(st.run.config_json);
  const auto ref = nlohmann::json::parse(want);
  EXPECT_EQ(got["steps"], ref["steps"]);
  EXPECT_EQ(got["group_size"], ref["group_size"]);
  EXPECT_EQ(got["policies"][0]["dataset"]["name"], "arith");
  EXPECT_EQ(got["policies"][0]["reward"], ref["policies"][0]["reward"]);
  c->run_stop(id.toStdString());  // 60 steps of the arith recipe are not for a test
}

}  // namespace
}  // namespace spindle::testing
