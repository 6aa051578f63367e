#include "spindle/ui/run_chart.h"

#include <vector>

#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QValueAxis>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "spindle/ui/metrics_model.h"

namespace spindle::ui {

namespace {

QColor series_colour(int i) {
  // Okabe-Ito: distinguishable for colour-blind readers, readable on dark and light.
  static const QColor c[] = {QColor(0, 114, 178), QColor(230, 159, 0), QColor(0, 158, 115),
                             QColor(204, 121, 167), QColor(86, 180, 233), QColor(213, 94, 0),
                             QColor(240, 228, 66)};
  return c[i % 7];
}

}  // namespace

RunChart::RunChart(MetricsModel* primary, MetricsModel* compare, QWidget* parent)
    : QWidget(parent), primary_(primary), compare_(compare) {
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout();
  bar->addWidget(new QLabel(tr("Metric"), this));
  metric_ = new QComboBox(this);
  metric_->setMinimumContentsLength(16);
  metric_->setToolTip(tr("The metric drawn, one curve per policy (Alt+M)"));
  bar->addWidget(metric_);
  bar->addSpacing(12);
  bar->addWidget(new QLabel(tr("Compare with"), this));
  compare_box_ = new QComboBox(this);
  compare_box_->setMinimumContentsLength(24);
  compare_box_->setToolTip(tr("Overlay another run's curves (dashed)"));
  compare_box_->addItem(tr("(none)"), QString());
  bar->addWidget(compare_box_);
  bar->addStretch(1);
  column->addLayout(bar);

  chart_ = new QChart();
  chart_->legend()->setAlignment(Qt::AlignBottom);
  chart_->setMargins(QMargins(4, 4, 4, 4));
  x_ = new QValueAxis(chart_);
  x_->setTitleText(tr("step"));
  x_->setLabelFormat("%d");
  y_ = new QValueAxis(chart_);
  chart_->addAxis(x_, Qt::AlignBottom);
  chart_->addAxis(y_, Qt::AlignLeft);
  view_ = new QChartView(chart_, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumHeight(220);
  column->addWidget(view_, 1);
  empty_ = new QLabel(this);
  empty_->setAlignment(Qt::AlignCenter);
  empty_->setWordWrap(true);
  column->addWidget(empty_);

  connect(metric_, &QComboBox::currentIndexChanged, this, &RunChart::redraw);
  connect(compare_box_, &QComboBox::currentIndexChanged, this,
          [this] { emit compareRunChosen(compare_box_->currentData().toString()); });
  // Streamed points redraw at most every kRedrawMs (a run can send 50 events/s; a chart
  // refreshed 10 times a second reads as live and keeps the GUI thread free); a metric or
  // compare choice redraws at once.
  redraw_timer_.setSingleShot(true);
  redraw_timer_.setInterval(kRedrawMs);
  connect(&redraw_timer_, &QTimer::timeout, this, [this] {
    updateMetrics();
    redraw();
  });
  for (MetricsModel* m : {primary_, compare_}) {
    connect(m, &MetricsModel::rowsAdded, this, &RunChart::scheduleRedraw);
    connect(m, &MetricsModel::runUpdated, this, &RunChart::scheduleRedraw);
  }
  applyPalette();
  updateMetrics();
  redraw();
}

QString RunChart::metric() const { return metric_->currentData().toString(); }

void RunChart::setMetric(const QString& key) {
  const int i = metric_->findData(key);
  if (i >= 0) metric_->setCurrentIndex(i);
}

void RunChart::setCompareChoices(const QList<QPair<QString, QString>>& runs) {
  const QString current = compare_box_->currentData().toString();
  const QSignalBlocker block(compare_box_);
  compare_box_->clear();
  compare_box_->addItem(tr("(none)"), QString());
  for (const auto& [id, label] : runs)
    if (id != primary_->runId()) compare_box_->addItem(label, id);
  const int i = compare_box_->findData(current);
  compare_box_->setCurrentIndex(std::max(i, 0));
}

void RunChart::updateMetrics() {
  QStringList keys = primary_->metricKeys();
  for (const QString& k : compare_->metricKeys())
    if (!keys.contains(k)) keys << k;
  QStringList have;
  for (int i = 0; i < metric_->count(); ++i) have << metric_->itemData(i).toString();
  if (have == keys) return;
  const QString current = metric().isEmpty() ? QString("reward_mean") : metric();
  const QSignalBlocker block(metric_);
  metric_->clear();
  for (const QString& k : keys) metric_->addItem(MetricsModel::metricLabel(k), k);
  const int i = metric_->findData(current);
  metric_->setCurrentIndex(std::max(i, 0));
}

int RunChart::seriesCount() const { return int(chart_->series().size()); }

void RunChart::scheduleRedraw() {
  if (!redraw_timer_.isActive()) redraw_timer_.start();
}

void RunChart::flushRedraw() {
  if (!redraw_timer_.isActive()) return;
  redraw_timer_.stop();
  updateMetrics();
  redraw();
}

void RunChart::redraw() {
  redraw_timer_.stop();
  const QString key = metric();
  double x0 = 0, x1 = 1, y0 = 0, y1 = 0;
  bool any = false;
  // The series the chart should show, in order; existing QLineSeries are reused when the list
  // is unchanged (replace() of their points), which is what keeps a streaming redraw cheap.
  struct Want {
    QString name;
    QList<QPointF> points;
    int colour;
    bool dashed;
  };
  std::vector<Want> want;
  for (MetricsModel* model : {primary_, compare_}) {
    if (model->runId().isEmpty()) continue;
    const bool dashed = model == compare_;
    const QStringList policies = model->policies();
    for (int i = 0; i < policies.size(); ++i) {
      want.push_back({dashed ? QString("%1 (%2)").arg(policies[i], model->runId().left(8)) : policies[i],
                      model->series(policies[i], key), i, dashed});
    }
  }
  QList<QAbstractSeries*> have = chart_->series();
  bool same = have.size() == qsizetype(want.size());
  for (size_t i = 0; same && i < want.size(); ++i) same = have[qsizetype(i)]->name() == want[i].name;
  if (!same) {
    chart_->removeAllSeries();
    for (const Want& w : want) {
      auto* s = new QLineSeries(chart_);
      s->setName(w.name);
      QPen pen(series_colour(w.colour), 2);
      if (w.dashed) pen.setStyle(Qt::DashLine);
      s->setPen(pen);
      chart_->addSeries(s);
      s->attachAxis(x_);
      s->attachAxis(y_);
    }
    have = chart_->series();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    auto* s = static_cast<QLineSeries*>(have[qsizetype(i)]);
    s->setPointsVisible(want[i].points.size() < 60);
    s->replace(want[i].points);
    for (const QPointF& p : want[i].points) {
      if (!any) {
        y0 = y1 = p.y();
        x1 = std::max(x1, p.x());
        any = true;
      }
      x0 = std::min(x0, p.x());
      x1 = std::max(x1, p.x());
      y0 = std::min(y0, p.y());
      y1 = std::max(y1, p.y());
    }
  }
  const double pad = y1 > y0 ? (y1 - y0) * 0.08 : std::max(std::abs(y0) * 0.1, 0.5);
  // Integer step ticks (1, 2, 5, 10, ... apart) on a range padded so the last point isn't cut.
  double interval = 1;
  for (double decade = 1; (x1 - x0) / interval > 10; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      interval = m * decade;
      if ((x1 - x0) / interval <= 10) break;
    }
  }
  x_->setTickType(QValueAxis::TicksDynamic);
  x_->setTickAnchor(0);
  x_->setTickInterval(std::round(interval));
  x_->setRange(x0, x1 + (x1 - x0) * 0.02);
  y_->setRange(y0 - pad, y1 + pad);
  y_->setTickCount(6);
  y_->applyNiceNumbers();  // round tick values
  y_->setTitleText(MetricsModel::metricLabel(key));
  const auto& run = primary_->run();
  chart_->setTitle(primary_->runId().isEmpty()
                       ? QString()
                       : QString("run %1 · %2 · step %3/%4")
                             .arg(primary_->runId(), QString::fromStdString(run.status))
                             .arg(run.step)
                             .arg(run.steps));
  QString hint;
  if (primary_->runId().isEmpty()) hint = tr("No run selected. Launch one (Ctrl+R) or pick a run.");
  else if (!any && primary_->loaded()) hint = tr("No points for %1 yet.").arg(MetricsModel::metricLabel(key));
  if (!primary_->lastError().isEmpty()) hint = primary_->lastError();
  empty_->setText(hint);
  empty_->setVisible(!hint.isEmpty());
  view_->setVisible(!primary_->runId().isEmpty());  // the empty state: only the hint
}

void RunChart::applyPalette() {
  const QPalette p = palette();
  chart_->setBackgroundBrush(p.base());
  chart_->setPlotAreaBackgroundVisible(false);
  chart_->setTitleBrush(p.text());
  chart_->legend()->setLabelColor(p.text().color());
  for (QValueAxis* a : {x_, y_}) {
    a->setLabelsColor(p.text().color());
    a->setTitleBrush(p.text());
    QColor grid = p.text().color();
    grid.setAlpha(40);
    a->setGridLineColor(grid);
    a->setLinePenColor(p.mid().color());
  }
}

void RunChart::changeEvent(QEvent* e) {
  if (e->type() == QEvent::PaletteChange) applyPalette();
  QWidget::changeEvent(e);
}

}  // namespace spindle::ui
