#pragma once
// One reward histogram (private to the reward designer view): a Qt Charts bar chart of a
// DistributionInfo, one bar per bin labelled with its range (histogramBins), the title naming
// the term, its weight, n, mean and std. Colours come from the widget's palette (dark and light
// themes).

#include <QChartView>

#include "spindle/protocol/messages.h"

namespace spindle::ui {

class RewardHistogram : public QChartView {
  Q_OBJECT
 public:
  explicit RewardHistogram(QWidget* parent = nullptr);
  void setDistribution(const QString& title, const protocol::DistributionInfo& d);
  // The bar heights shown (tests compare them with the reply).
  std::vector<uint64_t> counts() const { return counts_; }

 protected:
  void changeEvent(QEvent* event) override;  // a palette change redraws in its colours

 private:
  std::vector<uint64_t> counts_;
  QString title_;
  protocol::DistributionInfo distribution_;
};

}  // namespace spindle::ui
