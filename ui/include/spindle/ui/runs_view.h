#pragma once
// The Runs view (issue 14, view 5): the GRPO launch form (RunConfigForm), the run list
// (RunsModel) and live curves of the shown run (MetricsModel, a second one for "compare
// with"). Thin: every state and request is in those models; this binds them and forwards
// actions.
//
// Actions and shortcuts: Launch (Ctrl+R), Stop the shown run (Ctrl+.), Resume, Fork a policy
// of the run (catalog_fork of its head, optionally a run on the fork), Refresh (F5), export the
// chart as PNG and the metrics as CSV. Errors of an action show in the view's banner as the
// server's "code: message"; a launch's field error is highlighted in the form.
//
// Screenshot: prepareScreenshot() shows the most recent run with its curves, or the empty
// state when the daemon has no runs, then emits readyForScreenshot().

#include <QString>

#include "spindle/ui/studio_view.h"

class QAction;
class QLabel;
class QTableView;

namespace spindle::ui {

class MetricsModel;
class RunChart;
class RunConfigForm;
class RunFormWidget;
class RunsModel;

class RunsView : public StudioView {
  Q_OBJECT
 public:
  explicit RunsView(Connection* connection, QWidget* parent = nullptr);

  QString title() const override { return tr("Runs"); }
  QString screenshotName() const override { return "runs"; }
  void refresh() override;
  void prepareScreenshot() override;

  RunConfigForm* form() const { return form_; }
  RunsModel* runs() const { return runs_; }
  MetricsModel* metrics() const { return metrics_; }
  MetricsModel* compareMetrics() const { return compare_; }
  RunChart* chart() const { return chart_; }
  QString shownRun() const;

  bool exportChartPng(const QString& path) const;
  bool exportCsv(const QString& path, QString* error = nullptr) const;

 public slots:
  void showRun(const QString& run_id);
  void setRewardSpec(const QString& json);
  void compareWith(const QString& run_id);  // "" = none

 private:
  void stopShown();
  void resumeShown();
  void forkShown();
  void exportPngInteractive();
  void exportCsvInteractive();
  void updateActions();
  void updateCompareChoices();
  void showBanner(const QString& text);

  RunConfigForm* form_;
  RunsModel* runs_;
  MetricsModel* metrics_;
  MetricsModel* compare_;
  RunFormWidget* form_widget_ = nullptr;
  QTableView* table_ = nullptr;
  RunChart* chart_ = nullptr;
  QLabel* banner_ = nullptr;
  QAction* launch_ = nullptr;
  QAction* stop_ = nullptr;
  QAction* resume_ = nullptr;
  QAction* fork_ = nullptr;
  QAction* refresh_ = nullptr;
  bool screenshot_pending_ = false;
};

}  // namespace spindle::ui
