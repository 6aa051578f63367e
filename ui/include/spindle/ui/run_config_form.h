#pragma once
// RunConfigForm: the state of the Runs view's launch form (STYLE.md 16): a GRPO run config
// (spindle/rl/config.h) as field values, serialised to the config JSON and sent with run_start.
// The widget generates its rows from runConfigFields() and binds each to a path here.
//
// Paths: a run field is its key ("steps"); a policy field is "policies[<i>].<key>"
// ("policies[0].learning_rate", "policies[1].dataset.name"), the same paths the server's
// validation messages name.
//
// Errors: launch() posts run_start. An invalid_argument reply names a field path
// ("run_start config_json: policies[0].learning_rate: must be > 0, got -1"): the form maps it
// to its field (fieldError(path) is the server's message; the widget draws a red frame and puts
// the message in the tooltip). Every failed launch also sets bannerError() to "code: message".
// A value the form cannot serialise (a reward spec that is not JSON) is a local field error and
// nothing is sent. Errors are cleared by the next launch and a field's by editing it.
//
// Threading: GUI thread only; replies arrive through Connection::post's queued handler.

#include <QObject>
#include <QString>
#include <QStringList>
#include <QVariant>
#include <QVariantMap>

#include <vector>

#include "spindle/ui/run_config_fields.h"

namespace spindle::ui {

class Connection;

class RunConfigForm : public QObject {
  Q_OBJECT
 public:
  explicit RunConfigForm(Connection* connection, QObject* parent = nullptr);

  static QString policyPath(int index, const QString& key);

  // The field behind a path (nullptr for an unknown path) and its value.
  const RunConfigField* field(const QString& path) const;
  QVariant value(const QString& path) const;
  // Sets a field (converted to its kind) and clears its error; false for an unknown path.
  bool setValue(const QString& path, const QVariant& value);
  // The field's doc, followed by its error when it has one (the widget's tooltip).
  QString toolTip(const QString& path) const;

  int policyCount() const { return int(policies_.size()); }
  int addPolicy();  // a policy with the table's defaults; returns its index
  void removePolicy(int index);  // the last policy is never removed

  // run_start's resume flag: continue policies that already have revisions (a fork).
  bool resume() const { return resume_; }
  void setResume(bool resume);

  // The reward designer's spec (JSON text) for every policy of the form.
  void setRewardSpec(const QString& json);

  // Dataset names for the dataset choice: the parser's built-in names plus what the daemon's
  // `datasets` op lists (loadDatasets(); unavailable ones are left out).
  QStringList datasetNames() const { return dataset_names_; }
  void loadDatasets();

  // The config JSON (compact) or "" when a field cannot be serialised (its error is set).
  QString configJson();
  // Fills the form from a config JSON (a run's config_json, to fork or relaunch it). Unknown
  // keys are ignored; false when it is not a JSON object with a policies array.
  bool loadConfigJson(const QString& json);

  QString fieldError(const QString& path) const { return errors_.value(path); }
  QStringList errorFields() const { return errors_.keys(); }
  QString bannerError() const { return banner_; }
  void clearErrors();

  // The field path a server message names ("policies[0].learning_rate"), or "".
  static QString errorPathOfMessage(const QString& message);
  // The form path that shows an error at `error_path` ("config.policies[0].loss_config" ->
  // "policies[0].loss_config.clip_low_threshold" when `message` names it), or "".
  QString formPathFor(const QString& error_path, const QString& message = {}) const;

  // Posts run_start with configJson() and resume(). Emits launched or launchFailed.
  void launch();
  bool launching() const { return launching_; }

 signals:
  void valueChanged(QString path);
  void policiesChanged();  // a policy was added or removed (the widget rebuilds its rows)
  void errorsChanged();
  void datasetNamesChanged();
  void launchingChanged(bool launching);
  void launched(QString run_id, QStringList policies);
  void launchFailed(QString code, QString message);

 private:
  bool splitPath(const QString& path, int* policy, QString* key) const;
  QVariantMap defaults(FieldScope scope) const;
  void setError(const QString& path, const QString& message);
  void onLaunchReply(const QString& code, const QString& message);

  Connection* connection_;
  QVariantMap run_;
  std::vector<QVariantMap> policies_;
  bool resume_ = false;
  bool launching_ = false;
  QStringList dataset_names_;
  QMap<QString, QString> errors_;  // form path -> message
  QString banner_;
};

}  // namespace spindle::ui
