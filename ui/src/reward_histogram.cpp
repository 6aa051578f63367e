#include "reward_histogram.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QEvent>
#include <QValueAxis>

#include <algorithm>
#include <cmath>

#include "spindle/ui/reward_spec.h"

namespace spindle::ui {

RewardHistogram::RewardHistogram(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  setMinimumSize(260, 200);
}

void RewardHistogram::changeEvent(QEvent* event) {
  QChartView::changeEvent(event);
  if (event->type() == QEvent::PaletteChange && !title_.isEmpty()) {
    setDistribution(title_, distribution_);
  }
}

void RewardHistogram::setDistribution(const QString& title, const protocol::DistributionInfo& d) {
  title_ = title;
  distribution_ = d;
  const QPalette pal = palette();
  auto* chart = new QChart;
  chart->setBackgroundBrush(pal.color(QPalette::Base));
  chart->setTitleBrush(pal.color(QPalette::Text));
  chart->setTitle(tr("%1<br><small>n %2 · mean %3 · std %4 · range [%5, %6]</small>")
                      .arg(title.toHtmlEscaped())
                      .arg(d.n)
                      .arg(d.mean, 0, 'g', 3)
                      .arg(d.std, 0, 'g', 3)
                      .arg(d.min, 0, 'g', 3)
                      .arg(d.max, 0, 'g', 3));
  chart->legend()->hide();
  chart->setMargins(QMargins(4, 4, 4, 4));
  auto* set = new QBarSet(title);
  set->setColor(pal.color(QPalette::Highlight));
  set->setBorderColor(pal.color(QPalette::Highlight).darker(130));
  QStringList labels;
  counts_.clear();
  uint64_t top = 0;
  const auto bins = histogramBins(d);
  for (const HistogramBin& b : bins) {
    counts_.push_back(b.count);
    top = std::max(top, b.count);
  }
  // min == max: every value is in bin 0 and the other bins are empty by definition; one bar.
  const size_t shown = d.min == d.max ? std::min<size_t>(bins.size(), 1) : bins.size();
  for (size_t i = 0; i < shown; ++i) {
    *set << double(bins[i].count);
    // The bin's lower edge keeps labels short enough to read; the title gives the range.
    const bool small = std::abs(d.max - d.min) < 10;
    labels << (d.min == d.max ? binLabel(bins[i])
               : small        ? QString::number(bins[i].lo, 'f', 2)
                              : QString::number(bins[i].lo, 'g', 3));
  }
  auto* series = new QBarSeries;
  series->append(set);
  series->setBarWidth(0.9);
  chart->addSeries(series);
  auto* x = new QBarCategoryAxis;
  x->append(labels);
  x->setLabelsBrush(pal.color(QPalette::Text));
  x->setTitleText(tr("score (bin start)"));
  x->setTitleBrush(pal.color(QPalette::Text));
  auto* y = new QValueAxis;
  y->setRange(0, double(std::max<uint64_t>(top, 1)));
  y->setLabelFormat("%d");
  y->applyNiceNumbers();
  y->setLabelsBrush(pal.color(QPalette::Text));
  y->setGridLineColor(pal.color(QPalette::Mid));
  x->setGridLineVisible(false);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  QChart* old = this->chart();
  setChart(chart);
  delete old;
}

}  // namespace spindle::ui
