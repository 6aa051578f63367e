// RunsView: the screenshot state (the newest run's curves; the empty state for a tenant with no
// runs), the field highlight in the form widget, and the PNG/CSV exports. Renders the view to
// $SPINDLE_SCREENSHOT_DIR/runs.png (or the temp dir) to look at.

#include <QAction>
#include <QChartView>
#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTemporaryDir>

#include "gui_images.h"
#include "runs_test_util.h"
#include "spindle/ui/metrics_model.h"
#include "spindle/ui/runs_model.h"
#include "spindle/ui/run_chart.h"
#include "spindle/ui/runs_view.h"

namespace spindle::testing {
namespace {

using ui::RunConfigForm;
using ui::RunsView;

class RunsViewTest : public StudioTest {};

TEST_F(RunsViewTest, ScreenshotShowsTheNewestRunsCurves) {
  auto conn = open_connection();
  auto blocking = client();
  // Two finished runs: the newest is shown, the other can be compared with it.
  const std::string older = blocking->run_start(tiny_run_json(unique("old"), 4, /*seed=*/11)).run_id;
  ASSERT_EQ(wait_finished(*blocking, older).run.status, "done");
  const std::string newest = blocking->run_start(tiny_run_json(unique("shot"), 6)).run_id;
  const auto expected = wait_finished(*blocking, newest);
  ASSERT_EQ(expected.run.status, "done") << expected.run.error;

  RunsView view(conn.get());
  EXPECT_EQ(view.title(), "Runs");
  EXPECT_EQ(view.screenshotName(), "runs");
  view.resize(1500, 900);
  view.show();
  QSignalSpy ready(&view, &RunsView::readyForScreenshot);
  view.prepareScreenshot();
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, 30000));
  EXPECT_EQ(view.shownRun().toStdString(), newest);
  EXPECT_EQ(view.metrics()->rowCount(), int(expected.metrics.size()));
  EXPECT_EQ(view.chart()->seriesCount(), 2);  // one per policy

  // Compare with the older run: its two series join, dashed.
  const int row = view.chart()->compareBox()->findData(QString::fromStdString(older));
  ASSERT_GE(row, 0);
  view.chart()->compareBox()->setCurrentIndex(row);
  ASSERT_TRUE(QTest::qWaitFor([&] { return view.compareMetrics()->rowCount() == 2 * 5; }, 30000));
  ASSERT_TRUE(QTest::qWaitFor([&] { return view.chart()->seriesCount() == 4; }, 5000));

  // The shortcuts of the main actions.
  QStringList shortcuts;
  for (QAction* a : view.actions()) shortcuts << a->shortcut().toString();
  for (const char* k : {"Ctrl+R", "Ctrl+.", "F5"}) EXPECT_TRUE(shortcuts.contains(k)) << k;

  QTest::qWait(0);
  const QImage image = view.grab().toImage();
  EXPECT_GT(pixel_variance(image), 50.0);
  image.save(QDir(screenshot_dir()).filePath("runs.png"));
  QTemporaryDir dir;
  ASSERT_TRUE(view.exportChartPng(dir.filePath("chart.png")));
  const QImage chart(dir.filePath("chart.png"));
  ASSERT_FALSE(chart.isNull());
  EXPECT_GT(pixel_variance(chart), 20.0);
  ASSERT_TRUE(view.exportCsv(dir.filePath("m.csv")));
  EXPECT_GT(QFileInfo(dir.filePath("m.csv")).size(), 100);
}

TEST_F(RunsViewTest, EmptyStateWhenTheTenantHasNoRuns) {
  auto conn = open_connection(kBobToken);
  auto blocking = client(kBobToken);
  if (!blocking->run_list().runs.empty()) GTEST_SKIP() << "bob has runs in this suite";
  RunsView view(conn.get());
  view.resize(1200, 800);
  QSignalSpy ready(&view, &RunsView::readyForScreenshot);
  view.prepareScreenshot();
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, 30000));
  EXPECT_TRUE(view.shownRun().isEmpty());
  EXPECT_EQ(view.runs()->rowCount(), 0);
  EXPECT_EQ(view.chart()->seriesCount(), 0);
}

TEST_F(RunsViewTest, FormWidgetHighlightsTheRefusedField) {
  auto conn = open_connection();
  RunsView view(conn.get());
  view.resize(1400, 900);
  fill_tiny_run(*view.form(), unique("hl"), 2);
  view.form()->setValue("group_size", 0);
  QSignalSpy failed(view.form(), &RunConfigForm::launchFailed);
  view.form()->launch();
  ASSERT_TRUE(QTest::qWaitFor([&] { return failed.count() > 0; }, 30000));
  auto* editor = view.findChild<QLineEdit*>("group_size");
  ASSERT_NE(editor, nullptr);
  EXPECT_TRUE(editor->property("fieldError").toBool());
  EXPECT_TRUE(editor->toolTip().contains("must be in [2, 256], got 0")) << editor->toolTip().toStdString();
  EXPECT_FALSE(editor->styleSheet().isEmpty());
  auto* other = view.findChild<QLineEdit*>("steps");
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->property("fieldError").toBool());
  view.show();
  QTest::qWait(0);
  view.grab().save(QDir(screenshot_dir()).filePath("runs_form_error.png"));
  // Editing the field in the widget clears the highlight.
  editor->setText("4");
  emit editor->editingFinished();
  EXPECT_FALSE(editor->property("fieldError").toBool());
}

}  // namespace
}  // namespace spindle::testing
