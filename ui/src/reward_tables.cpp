#include "spindle/ui/reward_tables.h"

namespace spindle::ui {

// ---- RewardRowsModel ------------------------------------------------------------------------

void RewardRowsModel::setRows(std::vector<protocol::RewardTestRow> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
  emit edited();
}

void RewardRowsModel::addRow(protocol::RewardTestRow row) {
  beginInsertRows({}, int(rows_.size()), int(rows_.size()));
  rows_.push_back(std::move(row));
  endInsertRows();
  emit edited();
}

void RewardRowsModel::removeRowAt(int row) {
  if (row < 0 || row >= int(rows_.size())) return;
  beginRemoveRows({}, row, row);
  rows_.erase(rows_.begin() + row);
  endRemoveRows();
  emit edited();
}

int RewardRowsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}
int RewardRowsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : column_count;
}

QVariant RewardRowsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || (role != Qt::DisplayRole && role != Qt::EditRole &&
                           role != Qt::ToolTipRole)) {
    return {};
  }
  const auto& r = rows_[size_t(index.row())];
  const std::string& s = index.column() == prompt_col      ? r.prompt
                         : index.column() == reference_col ? r.reference
                                                           : r.metadata_json;
  return QString::fromStdString(s);
}

QVariant RewardRowsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (o == Qt::Vertical) return section;
  switch (section) {
    case prompt_col: return tr("prompt");
    case reference_col: return tr("reference");
    default: return tr("metadata (JSON)");
  }
}

Qt::ItemFlags RewardRowsModel::flags(const QModelIndex& index) const {
  return QAbstractTableModel::flags(index) | Qt::ItemIsEditable;
}

bool RewardRowsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || role != Qt::EditRole) return false;
  auto& r = rows_[size_t(index.row())];
  std::string& s = index.column() == prompt_col      ? r.prompt
                   : index.column() == reference_col ? r.reference
                                                     : r.metadata_json;
  s = value.toString().toStdString();
  emit dataChanged(index, index);
  emit edited();
  return true;
}

// ---- RewardSamplesModel ---------------------------------------------------------------------

void RewardSamplesModel::setSamples(QStringList term_names, std::vector<RewardScoredSample> s) {
  beginResetModel();
  terms_ = std::move(term_names);
  samples_ = std::move(s);
  endResetModel();
}

int RewardSamplesModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(samples_.size());
}
// row, prompt, completion, (score, info) per term, total
int RewardSamplesModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : 3 + 2 * int(terms_.size()) + 1;
}

QVariant RewardSamplesModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const RewardScoredSample& s = samples_[size_t(index.row())];
  const int c = index.column();
  const int nterms = int(terms_.size());
  if (role == Qt::TextAlignmentRole && c >= 3 && ((c - 3) % 2 == 0 || c == 3 + 2 * nterms)) {
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  if (c == 0) return s.row;
  if (c == 1) return s.prompt;
  if (c == 2) {
    return role == Qt::ToolTipRole ? s.text + tr("\n(stop: %1)").arg(s.stop_reason) : s.text;
  }
  if (c == 3 + 2 * nterms) return QString::number(s.total, 'g', 4);
  const int t = (c - 3) / 2;
  if ((c - 3) % 2 == 0) {
    return t < int(s.scores.size()) ? QVariant(QString::number(s.scores[size_t(t)], 'g', 4))
                                    : QVariant();
  }
  return t < s.infos.size() ? s.infos[t] : QString();
}

QVariant RewardSamplesModel::headerData(int section, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole || o != Qt::Horizontal) return {};
  const int nterms = int(terms_.size());
  if (section == 0) return tr("row");
  if (section == 1) return tr("prompt");
  if (section == 2) return tr("completion");
  if (section == 3 + 2 * nterms) return tr("total");
  const int t = (section - 3) / 2;
  return (section - 3) % 2 == 0 ? terms_[t] : terms_[t] + tr(" info");
}

}  // namespace spindle::ui
