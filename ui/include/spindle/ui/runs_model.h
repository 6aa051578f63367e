#pragma once
// RunsModel: the caller's GRPO runs (run_list, newest first) as a table: id, status,
// step/steps, policies, created, updated, error. The Runs view's run list binds to it.
//
// Freshness: refresh() reloads the first page (up to 200 runs). A `metrics` event updates its
// run's row in place (status, step, updated); an event of a run not in the table reloads it.
// After stop()/resume() the model polls run_status every poll_ms until the run leaves its
// transitional state (a stop is asynchronous: the reply may still say "running"), so the table
// is right even when events are lost.
//
// Actions: stop, resume, and forkPolicy (PROTOCOL.md "Forking a run"): catalog_fork of the
// policy's head (its latest revision) into a new policy, then optionally run_start of the run's
// config narrowed to that policy, renamed, with resume = true. Each action's outcome is a
// signal; an error reply is actionFailed(action, "code: message") for the view's banner.
//
// Threading: GUI thread only.

#include <QAbstractTableModel>
#include <QHash>
#include <QSet>
#include <QString>
#include <QStringList>

#include <vector>

#include "spindle/protocol/client.h"

class QTimer;

namespace spindle::ui {

class Connection;

class RunsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { IdColumn, StatusColumn, StepColumn, PoliciesColumn, CreatedColumn,
                UpdatedColumn, ErrorColumn, ColumnCount };
  static constexpr int RunIdRole = Qt::UserRole + 1;

  explicit RunsModel(Connection* connection, QObject* parent = nullptr, int poll_ms = 300);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

  void refresh();
  bool loading() const { return loading_; }
  // Rows (newest first); -1 when the run is not listed.
  int rowOf(const QString& run_id) const;
  const protocol::RunInfo* run(const QString& run_id) const;
  const protocol::RunInfo& runAt(int row) const { return runs_[size_t(row)]; }
  QString lastError() const { return last_error_; }

  void stop(const QString& run_id);
  void resume(const QString& run_id);
  // Forks `policy_address`'s head into `new_name`; steps > 0 then starts a run of that many
  // steps on it (the run's config, only that policy, resume = true).
  void forkPolicy(const QString& run_id, const QString& policy_address, const QString& new_name,
                  qint64 steps = 0);

  // Applies a metrics event (or any RunStatusReply) to its row.
  void applyRun(const protocol::RunInfo& info);

  // A policy address's name ("spindle://alice/p" -> "p").
  static QString policyName(const QString& address);

 signals:
  void refreshed();
  void runChanged(QString run_id);  // its row's status or step changed
  void actionFailed(QString action, QString error);
  void forked(QString address);            // the new policy
  void forkRunStarted(QString run_id);     // the run on the fork
  void loadingChanged(bool loading);

 private:
  enum class Wait { settled, started };  // poll until stopped/failed/done, or until not queued
  void pollPending();
  void track(const QString& run_id, Wait wait);

  Connection* connection_;
  std::vector<protocol::RunInfo> runs_;
  QHash<QString, Wait> pending_;  // runs polled until they reach a state
  QSet<QString> polling_;         // runs with a run_status poll in flight
  QTimer* poll_timer_ = nullptr;
  bool loading_ = false;
  bool refresh_again_ = false;
  QString last_error_;
};

}  // namespace spindle::ui
