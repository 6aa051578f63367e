#pragma once
// The Runs view's live curves: a QChartView with one QLineSeries per policy of the shown run
// (MetricsModel `primary`) for the chosen metric, and, when a second run is chosen to compare,
// its policies' series dashed in the same colours. Axes follow the points as they arrive.
// Colours come from a fixed qualitative palette; background, grid and labels from the widget's
// palette (dark and light themes).

#include <QTimer>
#include <QWidget>

class QChart;
class QChartView;
class QComboBox;
class QLabel;
class QValueAxis;

namespace spindle::ui {

class MetricsModel;

class RunChart : public QWidget {
  Q_OBJECT
 public:
  RunChart(MetricsModel* primary, MetricsModel* compare, QWidget* parent = nullptr);

  QChartView* chartView() const { return view_; }
  QComboBox* metricBox() const { return metric_; }
  QComboBox* compareBox() const { return compare_box_; }
  QString metric() const;
  void setMetric(const QString& key);
  // Runs the compare selector offers (id, label), "" = none.
  void setCompareChoices(const QList<QPair<QString, QString>>& runs);
  int seriesCount() const;
  // Streamed points are drawn at most every kRedrawMs; flushRedraw() draws a pending update now
  // (tests, exports).
  static constexpr int kRedrawMs = 100;
  void flushRedraw();

 signals:
  void compareRunChosen(QString run_id);  // "" = none

 protected:
  void changeEvent(QEvent* e) override;

 private:
  void updateMetrics();
  void redraw();
  void scheduleRedraw();
  void applyPalette();

  MetricsModel* primary_;
  MetricsModel* compare_;
  QChart* chart_;
  QChartView* view_;
  QValueAxis* x_;
  QValueAxis* y_;
  QComboBox* metric_;
  QComboBox* compare_box_;
  QLabel* empty_;
  QTimer redraw_timer_;
};

}  // namespace spindle::ui
