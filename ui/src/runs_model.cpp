#include "spindle/ui/runs_model.h"

#include <QDateTime>
#include <QTimer>

#include <limits>

#include <nlohmann/json.hpp>

#include "spindle/ui/connection.h"
#include "spindle/ui/event_stream.h"

namespace spindle::ui {

using namespace protocol;
using json = nlohmann::json;

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString when(int64_t ms) {
  if (ms <= 0) return {};
  return QDateTime::fromMSecsSinceEpoch(ms).toString("yyyy-MM-dd hh:mm:ss");
}

// Settled: nothing more will change without an action.
bool settled(const RunInfo& r) {
  return r.status == "done" || r.status == "failed" || r.status == "stopped";
}

}  // namespace

RunsModel::RunsModel(Connection* connection, QObject* parent, int poll_ms)
    : QAbstractTableModel(parent), connection_(connection) {
  poll_timer_ = new QTimer(this);
  poll_timer_->setInterval(poll_ms);
  connect(poll_timer_, &QTimer::timeout, this, &RunsModel::pollPending);
  connect(connection_->events(), &EventStream::metrics, this,
          [this](const RunStatusReply& r) { applyRun(r.run); });
  connect(connection_->events(), &EventStream::resubscribed, this, &RunsModel::refresh);
}

int RunsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(runs_.size());
}
int RunsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"Run", "Status", "Step", "Policies", "Created", "Updated",
                                "Error"};
  return section >= 0 && section < ColumnCount ? QString(names[section]) : QVariant();
}

QString RunsModel::policyName(const QString& address) {
  QString s = address.section('/', -1);
  return s.section('@', 0, 0);
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const RunInfo& r = runs_[size_t(index.row())];
  if (role == RunIdRole) return qs(r.id);
  if (role == Qt::ToolTipRole) {
    if (index.column() == ErrorColumn || index.column() == StatusColumn) return qs(r.error);
    if (index.column() == PoliciesColumn) {
      QStringList a;
      for (const auto& p : r.policies) a << qs(p);
      return a.join('\n');
    }
    return {};
  }
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case IdColumn: return qs(r.id);
    case StatusColumn: return qs(r.status);
    case StepColumn: return QString("%1/%2").arg(r.step).arg(r.steps);
    case PoliciesColumn: {
      QStringList a;
      for (const auto& p : r.policies) a << policyName(qs(p));
      return a.join(", ");
    }
    case CreatedColumn: return when(r.created_ms);
    case UpdatedColumn: return when(r.updated_ms);
    case ErrorColumn: return qs(r.error);
  }
  return {};
}

int RunsModel::rowOf(const QString& run_id) const {
  for (size_t i = 0; i < runs_.size(); ++i)
    if (qs(runs_[i].id) == run_id) return int(i);
  return -1;
}

const RunInfo* RunsModel::run(const QString& run_id) const {
  const int r = rowOf(run_id);
  return r < 0 ? nullptr : &runs_[size_t(r)];
}

void RunsModel::refresh() {
  if (loading_) {
    refresh_again_ = true;  // an event arrived while a page was on its way
    return;
  }
  loading_ = true;
  emit loadingChanged(true);
  connection_->post(this, Op::run_list, RunListRequest{200, ""}, [this](const Reply& r) {
    loading_ = false;
    emit loadingChanged(false);
    if (!r.ok) {
      last_error_ = errorText(r);
      emit actionFailed("refresh", last_error_);
    } else {
      last_error_.clear();
      beginResetModel();
      runs_ = std::get<RunListReply>(r.body).runs;
      endResetModel();
      for (const RunInfo& x : runs_)
        if (x.status == "queued") track(qs(x.id), Wait::started);
      emit refreshed();
    }
    if (refresh_again_) {
      refresh_again_ = false;
      refresh();
    }
  });
}

void RunsModel::applyRun(const RunInfo& info) {
  const int row = rowOf(qs(info.id));
  if (row < 0) {
    refresh();
    return;
  }
  RunInfo& r = runs_[size_t(row)];
  // Events and poll replies can cross: never go back to an older record.
  if (info.updated_ms < r.updated_ms) return;
  if (r == info) return;
  r = info;
  emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
  emit runChanged(qs(info.id));
}

void RunsModel::track(const QString& run_id, Wait wait) {
  pending_.insert(run_id, wait);
  if (!poll_timer_->isActive()) poll_timer_->start();
}

void RunsModel::pollPending() {
  if (pending_.isEmpty()) {
    poll_timer_->stop();
    return;
  }
  for (auto it = pending_.cbegin(); it != pending_.cend(); ++it) {
    const QString id = it.key();
    if (polling_.contains(id)) continue;  // the previous poll is still on its way
    polling_.insert(id);
    // metrics_since_step beyond any step: the run record only.
    connection_->post(this, Op::run_status,
                      RunStatusRequest{id.toStdString(), std::numeric_limits<int32_t>::max()},
                      [this, id](const Reply& r) {
                        polling_.remove(id);
                        if (!pending_.contains(id)) return;
                        if (!r.ok) {
                          pending_.remove(id);
                          return;
                        }
                        const RunInfo& info = std::get<RunStatusReply>(r.body).run;
                        applyRun(info);
                        const bool done = pending_.value(id) == Wait::settled
                                              ? settled(info)
                                              : info.status != "queued";
                        if (done) pending_.remove(id);
                      });
  }
}

void RunsModel::stop(const QString& run_id) {
  connection_->post(this, Op::run_stop, RunIdRequest{run_id.toStdString()},
                    [this, run_id](const Reply& r) {
                      if (!r.ok) return emit actionFailed("stop", errorText(r));
                      applyRun(std::get<RunStatusReply>(r.body).run);
                      track(run_id, Wait::settled);
                    });
}

void RunsModel::resume(const QString& run_id) {
  connection_->post(this, Op::run_resume, RunIdRequest{run_id.toStdString()},
                    [this, run_id](const Reply& r) {
                      if (!r.ok) return emit actionFailed("resume", errorText(r));
                      applyRun(std::get<RunStatusReply>(r.body).run);
                      track(run_id, Wait::started);
                    });
}

void RunsModel::forkPolicy(const QString& run_id, const QString& policy_address,
                           const QString& new_name, qint64 steps) {
  const RunInfo* info = run(run_id);
  const std::string config = info ? info->config_json : std::string();
  ForkRequest fork{policy_address.toStdString(), new_name.toStdString()};
  connection_->post(this, Op::catalog_fork, fork, [=, this](const Reply& r) {
    if (!r.ok) return emit actionFailed("fork", errorText(r));
    const QString address = qs(std::get<PolicyReply>(r.body).policy.address);
    emit forked(address);
    if (steps <= 0) return;
    json c = json::parse(config, nullptr, /*allow_exceptions=*/false);
    if (!c.is_object() || !c.contains("policies"))
      return emit actionFailed("fork", "the run's config is not available");
    json kept;
    for (const json& p : c["policies"])
      if (p.value("name", "") == policyName(policy_address).toStdString()) kept = p;
    if (kept.is_null()) return emit actionFailed("fork", "the run has no policy " + policy_address);
    kept["name"] = new_name.toStdString();
    c["policies"] = json::array({kept});
    c["steps"] = steps;
    c.erase("tenant");
    connection_->post(this, Op::run_start, RunStartRequest{c.dump(), /*resume=*/true},
                      [this](const Reply& s) {
                        if (!s.ok) return emit actionFailed("fork run", errorText(s));
                        const QString id = qs(std::get<RunStartReply>(s.body).run_id);
                        refresh();
                        emit forkRunStarted(id);
                      });
  });
}

}  // namespace spindle::ui
