#include "spindle/ui/metrics_model.h"

#include <QFile>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

#include "spindle/ui/connection.h"
#include "spindle/ui/event_stream.h"
#include "spindle/ui/runs_model.h"

namespace spindle::ui {

using namespace protocol;
using json = nlohmann::json;

namespace {

const QStringList& canonical_order() {
  static const QStringList k = {"reward_mean",  "reward_std",      "kl",
                                "entropy",      "loss",            "clip_fraction",
                                "response_length", "tokens_per_s", "step_time_s",
                                "eval_accuracy", "eval_reward",    "grad_norm",
                                "dropped_groups"};
  return k;
}

int rank_of(const QString& key) {
  if (key.startsWith("terms.")) return 1;  // right after reward_mean
  const int i = int(canonical_order().indexOf(key));
  return i < 0 ? 1000 : (i == 0 ? 0 : i + 1);
}

// The shortest text that reads back as the same double.
QString number(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return QString::fromLatin1(buf, int(r.ptr - buf));
}

}  // namespace

MetricsModel::MetricsModel(Connection* connection, QObject* parent)
    : QAbstractTableModel(parent), connection_(connection) {
  connect(connection_->events(), &EventStream::metrics, this, &MetricsModel::apply);
  // Events sent before the stream was live (or while it was away) are gone: catch up.
  connect(connection_->events(), &EventStream::subscribed, this, &MetricsModel::catchUp);
  connect(connection_->events(), &EventStream::resubscribed, this, &MetricsModel::catchUp);
}

int MetricsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}
int MetricsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : 2 + int(keys_.size());
}

QVariant MetricsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  if (section == 0) return QString("step");
  if (section == 1) return QString("policy");
  return section - 2 < keys_.size() ? metricLabel(keys_[section - 2]) : QVariant();
}

QVariant MetricsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || role != Qt::DisplayRole) return {};
  const Row& r = rows_[size_t(index.row())];
  if (index.column() == 0) return r.step;
  if (index.column() == 1) return r.policy;
  const QString& k = keys_.value(index.column() - 2);
  return r.values.contains(k) ? QVariant(r.values.value(k)) : QVariant();
}

QString MetricsModel::metricLabel(const QString& key) {
  if (key.startsWith("terms.")) return "reward: " + key.mid(6);
  return key;
}

void MetricsModel::setRun(const QString& run_id) {
  ++generation_;
  beginResetModel();
  run_id_ = run_id;
  run_ = RunInfo{};
  rows_.clear();
  keys_.clear();
  loaded_ = false;
  last_error_.clear();
  endResetModel();
  emit runUpdated();
  emit rowsAdded();
  if (!run_id_.isEmpty()) requestSince(0);
}

void MetricsModel::catchUp() {
  if (run_id_.isEmpty()) return;
  // Every policy must be complete up to `since - 1`; a policy with no row yet means 0.
  qint64 since = -1;
  const QStringList names = policies();
  for (const QString& p : names) {
    const qint64 s = lastStep(p) + 1;
    since = since < 0 ? s : std::min(since, s);
  }
  requestSince(std::max<qint64>(since, 0));
}

void MetricsModel::requestSince(qint64 since) {
  const quint64 gen = generation_;
  connection_->post(this, Op::run_status, RunStatusRequest{run_id_.toStdString(), since},
                    [this, gen](const Reply& r) {
                      if (gen != generation_) return;
                      if (!r.ok) {
                        last_error_ = errorText(r);
                        loaded_ = true;
                        emit loadFailed(last_error_);
                        emit runUpdated();
                        return;
                      }
                      const bool first = !loaded_;
                      loaded_ = true;
                      const auto& body = std::get<RunStatusReply>(r.body);
                      apply(body);
                      if (first && body.metrics.empty()) emit rowsAdded();  // loaded, no rows
                      emit synced();
                    });
}

void MetricsModel::apply(const RunStatusReply& reply) {
  if (run_id_.isEmpty() || QString::fromStdString(reply.run.id) != run_id_) return;
  if (reply.run.updated_ms >= run_.updated_ms && !(reply.run == run_)) {
    run_ = reply.run;
    emit runUpdated();
  }
  if (reply.metrics.empty()) return;
  const int keys_before = int(keys_.size());
  for (const RunMetricInfo& m : reply.metrics) addRow(m);
  if (keys_.size() != keys_before) {
    // New columns (a term or an eval metric seen first): a reset keeps views consistent.
    beginResetModel();
    sortKeys();
    endResetModel();
  }
  emit rowsAdded();
}

void MetricsModel::addRow(const RunMetricInfo& m) {
  Row row;
  row.step = m.step;
  row.policy = QString::fromStdString(m.policy);
  const json j = json::parse(m.metrics_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  for (const auto& [k, v] : j.items()) {
    if (k == "step") continue;
    if (v.is_number()) {
      row.values.insert(QString::fromStdString(k), v.get<double>());
    } else if (k == "terms" && v.is_object()) {
      for (const auto& [t, tv] : v.items())
        if (tv.is_number()) row.values.insert("terms." + QString::fromStdString(t), tv.get<double>());
    }
  }
  for (auto it = row.values.cbegin(); it != row.values.cend(); ++it)
    if (!keys_.contains(it.key())) keys_ << it.key();
  const auto at = std::lower_bound(rows_.begin(), rows_.end(), row, [](const Row& a, const Row& b) {
    return a.step != b.step ? a.step < b.step : a.policy < b.policy;
  });
  const int i = int(at - rows_.begin());
  if (at != rows_.end() && at->step == row.step && at->policy == row.policy) {
    at->values = row.values;  // the same step again: no new point
    emit dataChanged(index(i, 0), index(i, columnCount() - 1));
    return;
  }
  beginInsertRows({}, i, i);
  rows_.insert(at, std::move(row));
  endInsertRows();
}

void MetricsModel::sortKeys() {
  std::stable_sort(keys_.begin(), keys_.end(), [](const QString& a, const QString& b) {
    const int ra = rank_of(a), rb = rank_of(b);
    return ra != rb ? ra < rb : a < b;
  });
}

QStringList MetricsModel::policies() const {
  QStringList out;
  for (const auto& a : run_.policies) out << RunsModel::policyName(QString::fromStdString(a));
  for (const Row& r : rows_)
    if (!out.contains(r.policy)) out << r.policy;
  return out;
}

QList<QPointF> MetricsModel::series(const QString& policy, const QString& key) const {
  QList<QPointF> out;
  for (const Row& r : rows_)
    if (r.policy == policy && r.values.contains(key)) out << QPointF(double(r.step), r.values.value(key));
  return out;
}

bool MetricsModel::hasValue(qint64 step, const QString& policy, const QString& key,
                            double* value) const {
  for (const Row& r : rows_) {
    if (r.step != step || r.policy != policy) continue;
    if (!r.values.contains(key)) return false;
    if (value) *value = r.values.value(key);
    return true;
  }
  return false;
}

qint64 MetricsModel::lastStep(const QString& policy) const {
  qint64 last = -1;
  for (const Row& r : rows_)
    if (r.policy == policy) last = std::max(last, r.step);
  return last;
}

QString MetricsModel::toCsv() const {
  QString out = "step,policy";
  for (const QString& k : keys_) out += "," + k;
  out += "\n";
  for (const Row& r : rows_) {
    QString policy = r.policy;
    if (policy.contains(',') || policy.contains('"'))
      policy = '"' + policy.replace("\"", "\"\"") + '"';
    out += QString::number(r.step) + "," + policy;
    for (const QString& k : keys_)
      out += "," + (r.values.contains(k) ? number(r.values.value(k)) : QString());
    out += "\n";
  }
  return out;
}

bool MetricsModel::writeCsv(const QString& path, QString* error) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    if (error) *error = f.errorString();
    return false;
  }
  f.write(toCsv().toUtf8());
  return true;
}

}  // namespace spindle::ui
