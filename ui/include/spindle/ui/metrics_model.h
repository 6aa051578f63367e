#pragma once
// MetricsModel: one GRPO run's metrics timeline, a table of rows (step, policy) sorted by step
// then policy, columns "step", "policy" and one per metric key seen. The Runs view draws its
// curves from series() and exports toCsv().
//
// Metric keys: the numbers of the step's metrics object (PROTOCOL.md RunMetricInfo:
// reward_mean, kl, entropy, loss, clip_fraction, response_length, tokens_per_s, step_time_s,
// eval_accuracy, ...), and "terms.<name>" for each reward term's mean (the "terms" object).
// Strings (revision) are not metrics. Step 0 is the evaluation before training.
//
// Sources: setRun() loads the timeline with run_status; live `metrics` events of that run add
// rows as steps finish; after the event stream's subscribed() and resubscribed() (events sent
// before it was live are gone) and on catchUp() the model asks run_status for metrics_since_step = the oldest policy's
// last step seen + 1. A (step, policy) row is stored once: a row that arrives again (an event
// and a catch-up crossing) replaces its values and adds no point.
//
// Threading: GUI thread only.

#include <QAbstractTableModel>
#include <QHash>
#include <QList>
#include <QPointF>
#include <QString>
#include <QStringList>

#include <vector>

#include "spindle/protocol/client.h"

namespace spindle::ui {

class Connection;

class MetricsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit MetricsModel(Connection* connection, QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

  // Shows `run_id` ("" = none): clears the rows and loads its timeline.
  void setRun(const QString& run_id);
  QString runId() const { return run_id_; }
  const protocol::RunInfo& run() const { return run_; }
  bool loaded() const { return loaded_; }  // the first run_status reply has arrived
  QString lastError() const { return last_error_; }
  void catchUp();

  // Feeds a RunStatusReply (a reply or an event) of this run; other runs are ignored.
  void apply(const protocol::RunStatusReply& reply);

  QStringList policies() const;  // the run's policy names, in its order
  QStringList metricKeys() const { return keys_; }  // column order
  static QString metricLabel(const QString& key);
  // (step, value) points of one curve, by step; steps without that metric are skipped.
  QList<QPointF> series(const QString& policy, const QString& key) const;
  bool hasValue(qint64 step, const QString& policy, const QString& key, double* value) const;
  qint64 lastStep(const QString& policy) const;  // -1 = none yet

  // "step,policy,<keys...>" then one line per row; empty cells for metrics a row lacks.
  QString toCsv() const;
  bool writeCsv(const QString& path, QString* error = nullptr) const;

 signals:
  void rowsAdded();  // points were added or changed (the chart redraws)
  void runUpdated();  // run() changed (status, step)
  void loadFailed(QString error);
  void synced();  // a run_status reply (load or catch-up) has been applied

 private:
  struct Row {
    qint64 step = 0;
    QString policy;
    QHash<QString, double> values;
  };
  void addRow(const protocol::RunMetricInfo& m);
  void requestSince(qint64 since);
  void sortKeys();

  Connection* connection_;
  QString run_id_;
  protocol::RunInfo run_;
  bool loaded_ = false;
  quint64 generation_ = 0;  // replies of a previous run are dropped
  std::vector<Row> rows_;
  QStringList keys_;
  QString last_error_;
};

}  // namespace spindle::ui
