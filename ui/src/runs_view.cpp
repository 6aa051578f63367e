#include "spindle/ui/runs_view.h"

#include <QAction>
#include <QChartView>
#include <QFileDialog>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QToolBar>
#include <QVBoxLayout>

#include "spindle/ui/run_chart.h"
#include "run_form_widget.h"
#include "spindle/ui/connection.h"
#include "spindle/ui/metrics_model.h"
#include "spindle/ui/run_config_form.h"
#include "spindle/ui/runs_model.h"

namespace spindle::ui {

RunsView::RunsView(Connection* connection, QWidget* parent)
    : StudioView(connection, parent),
      form_(new RunConfigForm(connection, this)),
      runs_(new RunsModel(connection, this)),
      metrics_(new MetricsModel(connection, this)),
      compare_(new MetricsModel(connection, this)) {
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(4, 4, 4, 4);
  auto* bar = new QToolBar(this);
  bar->setToolButtonStyle(Qt::ToolButtonTextOnly);
  auto action = [&](const QString& text, const QKeySequence& key, const QString& tip) {
    auto* a = bar->addAction(text);
    a->setShortcut(key);
    a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    a->setToolTip(key.isEmpty() ? tip : QString("%1 (%2)").arg(tip, key.toString(QKeySequence::NativeText)));
    addAction(a);
    return a;
  };
  launch_ = action(tr("Launch"), QKeySequence(Qt::CTRL | Qt::Key_R), tr("Start a run from the form"));
  stop_ = action(tr("Stop"), QKeySequence(Qt::CTRL | Qt::Key_Period), tr("Stop the shown run after its step in progress"));
  resume_ = action(tr("Resume"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R), tr("Resume the shown run from its last saved revisions"));
  fork_ = action(tr("Fork policy…"), QKeySequence(Qt::CTRL | Qt::Key_K), tr("Fork a policy of the shown run at its head, optionally training it further"));
  auto* copy = action(tr("Edit as new"), QKeySequence(Qt::CTRL | Qt::Key_E), tr("Load the shown run's config into the form, to relaunch it changed"));
  bar->addSeparator();
  refresh_ = action(tr("Refresh"), QKeySequence(Qt::Key_F5), tr("Reload the run list and the shown run"));
  bar->addSeparator();
  auto* png = action(tr("Export PNG…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P), tr("Save the chart as a PNG image"));
  auto* csv = action(tr("Export CSV…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E), tr("Save the shown run's metrics as CSV (step, policy, metrics)"));
  column->addWidget(bar);

  banner_ = new QLabel(this);
  banner_->setWordWrap(true);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  banner_->setStyleSheet("color: #d32f2f;");
  banner_->hide();
  column->addWidget(banner_);

  auto* split = new QSplitter(Qt::Horizontal, this);
  form_widget_ = new RunFormWidget(form_, split);
  form_widget_->setMinimumWidth(380);
  auto* right = new QSplitter(Qt::Vertical, split);
  table_ = new QTableView(right);
  table_->setModel(runs_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setAlternatingRowColors(true);
  table_->setWordWrap(false);
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 8);
  chart_ = new RunChart(metrics_, compare_, right);
  right->addWidget(table_);
  right->addWidget(chart_);
  chart_->setMinimumHeight(320);  // also in the empty state, when the chart itself is hidden
  right->setStretchFactor(0, 1);
  right->setStretchFactor(1, 3);
  right->setSizes({180, 560});
  split->addWidget(form_widget_);
  split->addWidget(right);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 3);
  column->addWidget(split, 1);

  connect(launch_, &QAction::triggered, form_, &RunConfigForm::launch);
  connect(stop_, &QAction::triggered, this, &RunsView::stopShown);
  connect(resume_, &QAction::triggered, this, &RunsView::resumeShown);
  connect(fork_, &QAction::triggered, this, &RunsView::forkShown);
  connect(refresh_, &QAction::triggered, this, &RunsView::refresh);
  connect(copy, &QAction::triggered, this, [this] {
    if (const protocol::RunInfo* r = runs_->run(shownRun()))
      form_->loadConfigJson(QString::fromStdString(r->config_json));
  });
  connect(png, &QAction::triggered, this, &RunsView::exportPngInteractive);
  connect(csv, &QAction::triggered, this, &RunsView::exportCsvInteractive);

  connect(form_, &RunConfigForm::launched, this, [this](const QString& id, const QStringList&) {
    showBanner({});
    emit statusMessage(tr("Run %1 started").arg(id));
    runs_->refresh();
    showRun(id);
  });
  connect(form_, &RunConfigForm::launchFailed, this, [this](const QString& code, const QString& m) {
    emit statusMessage(tr("Launch failed: %1: %2").arg(code, m));
  });
  connect(runs_, &RunsModel::actionFailed, this, [this](const QString& what, const QString& e) {
    showBanner(tr("%1 failed: %2").arg(what, e));
  });
  connect(runs_, &RunsModel::forked, this, [this](const QString& address) {
    emit statusMessage(tr("Forked %1").arg(address));
  });
  connect(runs_, &RunsModel::forkRunStarted, this, &RunsView::showRun);
  connect(runs_, &RunsModel::refreshed, this, [this] {
    updateCompareChoices();
    if (shownRun().isEmpty() && runs_->rowCount() > 0) showRun(runs_->runAt(0).id.c_str());
    const int row = runs_->rowOf(shownRun());
    if (row >= 0) table_->selectRow(row);
    table_->resizeColumnsToContents();
    updateActions();
  });
  connect(runs_, &RunsModel::runChanged, this, &RunsView::updateActions);
  connect(metrics_, &MetricsModel::runUpdated, this, &RunsView::updateActions);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& i) {
            if (i.isValid()) showRun(runs_->data(i, RunsModel::RunIdRole).toString());
          });
  connect(chart_, &RunChart::compareRunChosen, this, &RunsView::compareWith);
  connect(metrics_, &MetricsModel::rowsAdded, this, [this] {
    if (!screenshot_pending_ || !metrics_->loaded()) return;
    screenshot_pending_ = false;
    chart_->flushRedraw();
    emit readyForScreenshot();
  });
  connect(metrics_, &MetricsModel::loadFailed, this, [this] {
    if (!screenshot_pending_) return;
    screenshot_pending_ = false;
    emit readyForScreenshot();
  });
  // The list and the dataset names load once the connection is up (now, or when it opens).
  auto load = [this] {
    runs_->refresh();
    form_->loadDatasets();
  };
  if (connection->isOpen()) load();
  connect(connection, &Connection::opened, this, load);
  updateActions();
}

QString RunsView::shownRun() const { return metrics_->runId(); }

void RunsView::refresh() {
  runs_->refresh();
  metrics_->catchUp();
  compare_->catchUp();
}

void RunsView::showRun(const QString& run_id) {
  if (run_id == shownRun()) return;
  metrics_->setRun(run_id);
  if (compare_->runId() == run_id) compareWith({});
  const int row = runs_->rowOf(run_id);
  if (row >= 0 && table_->currentIndex().row() != row) {
    const QSignalBlocker block(table_->selectionModel());
    table_->selectRow(row);
  }
  updateCompareChoices();
  updateActions();
}

void RunsView::setRewardSpec(const QString& json) { form_->setRewardSpec(json); }

void RunsView::compareWith(const QString& run_id) {
  if (compare_->runId() != run_id) compare_->setRun(run_id);
}

void RunsView::prepareScreenshot() {
  // The most recent run (run_list is newest first) with its curves; the empty state otherwise.
  auto* once = new QObject(this);
  connect(runs_, &RunsModel::refreshed, once, [this, once] {
    once->deleteLater();
    if (runs_->rowCount() == 0) {
      chart_->flushRedraw();
      emit readyForScreenshot();
      return;
    }
    const QString id = QString::fromStdString(runs_->runAt(0).id);
    if (shownRun() == id && metrics_->loaded()) {
      chart_->flushRedraw();
      emit readyForScreenshot();
      return;
    }
    screenshot_pending_ = true;
    metrics_->setRun({});
    showRun(id);
  });
  connect(runs_, &RunsModel::actionFailed, once, [this, once] {
    once->deleteLater();
    emit readyForScreenshot();  // the banner shows the error
  });
  runs_->refresh();
}

void RunsView::updateActions() {
  const protocol::RunInfo* r = runs_->run(shownRun());
  const std::string status = r ? r->status : metrics_->run().status;
  stop_->setEnabled(status == "running" || status == "queued");
  resume_->setEnabled(status == "stopped" || status == "failed");
  fork_->setEnabled(r && !r->policies.empty());
}

void RunsView::updateCompareChoices() {
  QList<QPair<QString, QString>> choices;
  for (int i = 0; i < runs_->rowCount(); ++i) {
    const auto& r = runs_->runAt(i);
    const QString id = QString::fromStdString(r.id);
    choices.append({id, QString("%1 · %2").arg(id.left(8),
                                               runs_->data(runs_->index(i, RunsModel::PoliciesColumn)).toString())});
  }
  chart_->setCompareChoices(choices);
}

void RunsView::stopShown() {
  if (!shownRun().isEmpty()) runs_->stop(shownRun());
}
void RunsView::resumeShown() {
  if (!shownRun().isEmpty()) runs_->resume(shownRun());
}

void RunsView::forkShown() {
  const protocol::RunInfo* r = runs_->run(shownRun());
  if (!r || r->policies.empty()) return;
  QStringList addresses;
  for (const auto& p : r->policies) addresses << QString::fromStdString(p);
  bool ok = false;
  const QString address =
      addresses.size() == 1 ? addresses.front()
                            : QInputDialog::getItem(this, tr("Fork a policy"), tr("Policy"),
                                                    addresses, 0, false, &ok);
  if (address.isEmpty() || (addresses.size() > 1 && !ok)) return;
  const QString name = QInputDialog::getText(this, tr("Fork a policy"),
                                             tr("New policy name (forked at the head of %1)").arg(address),
                                             QLineEdit::Normal, RunsModel::policyName(address) + "-fork", &ok);
  if (!ok || name.isEmpty()) return;
  const int steps = QInputDialog::getInt(this, tr("Fork a policy"),
                                         tr("Train the fork up to step (0 = only fork)"),
                                         int(r->steps * 2), 0, 1000000, 1, &ok);
  if (!ok) return;
  runs_->forkPolicy(shownRun(), address, name, steps);
}

bool RunsView::exportChartPng(const QString& path) const {
  chart_->flushRedraw();  // the newest points, not the last 10 Hz frame
  return chart_->chartView()->grab().save(path, "PNG");
}

bool RunsView::exportCsv(const QString& path, QString* error) const {
  return metrics_->writeCsv(path, error);
}

void RunsView::exportPngInteractive() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export chart"),
                                                    QString("run-%1.png").arg(shownRun()),
                                                    tr("PNG images (*.png)"));
  if (path.isEmpty()) return;
  if (!exportChartPng(path)) showBanner(tr("Could not write %1").arg(path));
  else emit statusMessage(tr("Chart saved to %1").arg(path));
}

void RunsView::exportCsvInteractive() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export metrics"),
                                                    QString("run-%1.csv").arg(shownRun()),
                                                    tr("CSV files (*.csv)"));
  if (path.isEmpty()) return;
  QString error;
  if (!exportCsv(path, &error)) showBanner(tr("Could not write %1: %2").arg(path, error));
  else emit statusMessage(tr("Metrics saved to %1").arg(path));
}

void RunsView::showBanner(const QString& text) {
  banner_->setText(text);
  banner_->setVisible(!text.isEmpty());
}

}  // namespace spindle::ui
