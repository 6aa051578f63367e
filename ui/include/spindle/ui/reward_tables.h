#pragma once
// The reward designer's two tables (Qt item models, no network):
// - RewardRowsModel: the reward_test rows, editable (prompt, reference, metadata_json); rows can
//   be added and removed. Emits `edited()` after any change (the designer autosaves on it).
// - RewardSamplesModel: the scored samples of the last reward_test, read only: row index,
//   prompt, completion, each term's score and info, and the total.
//
// Threading: GUI thread only.

#include <QAbstractTableModel>
#include <QStringList>

#include <vector>

#include "spindle/protocol/messages.h"

namespace spindle::ui {

class RewardRowsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { prompt_col = 0, reference_col, metadata_col, column_count };
  using QAbstractTableModel::QAbstractTableModel;

  const std::vector<protocol::RewardTestRow>& rows() const { return rows_; }
  void setRows(std::vector<protocol::RewardTestRow> rows);
  void addRow(protocol::RewardTestRow row = {});
  void removeRowAt(int row);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;

 signals:
  void edited();

 private:
  std::vector<protocol::RewardTestRow> rows_;
};

// One scored completion (RewardSampleInfo with the prompt it answered).
struct RewardScoredSample {
  uint32_t row = 0;
  QString prompt;
  QString text;
  QString stop_reason;
  std::vector<double> scores;
  QStringList infos;
  double total = 0.0;
};

class RewardSamplesModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;

  void setSamples(QStringList term_names, std::vector<RewardScoredSample> samples);
  const std::vector<RewardScoredSample>& samples() const { return samples_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  QStringList terms_;
  std::vector<RewardScoredSample> samples_;
};

}  // namespace spindle::ui
