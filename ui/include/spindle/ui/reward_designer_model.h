#pragma once
// The reward designer's state (issue 14, view 4), tested without a window:
// - plugins: `reward_plugins` (refreshPlugins) and `plugin_rescan` (rescanPlugins);
// - the weighted spec, term by term (name, plugin, weight, a SchemaForm per term built from
//   the plugin's config schema); spec JSON is PROTOCOL.md's spec_json, saved to and loaded from
//   files;
// - data rows (RewardRowsModel) from a daemon dataset (`datasets`) or a JSONL file;
// - run(): `reward_test` of the rows against address() with numSamples() and the sampling
//   params; the reply's distributions (per term and total) and scored samples
//   (RewardSamplesModel). validate() checks the spec alone (one row, one sample, one token:
//   the server validates every term before it samples anything).
// - errors: a reply error is shown in the designer (error()); an invalid_argument naming a term
//   and a config field (parseConfigError) also marks that field of that term's form.
// - autosave: every edit schedules a write of the whole designer state (spec, address,
//   sampling, rows) to autosavePath() after kAutosaveDelayMs; restoreAutosave() reads it back.
//   The default path is QStandardPaths::AppDataLocation/reward-designer-autosave.json.
//
// Threading: GUI thread only; replies arrive through Connection. A reply to an older run (run()
// again) is ignored.

#include <QObject>
#include <QString>
#include <QStringList>
#include <QTimer>

#include <vector>

#include "spindle/protocol/wire.h"
#include "spindle/ui/reward_spec.h"
#include "spindle/ui/reward_tables.h"
#include "spindle/ui/schema_form.h"

namespace spindle::ui {

class Connection;

struct RewardDesignerTerm {
  QString name;
  QString plugin;
  double weight = 1.0;
  SchemaForm form;     // from the plugin's schema (no fields while the plugin is unknown)
  QString error;       // the server's message when it named this term
};

struct RewardTestOutcome {
  QString revision_id;
  std::vector<protocol::RewardTermInfo> terms;
  protocol::DistributionInfo total;
};

class RewardDesignerModel : public QObject {
  Q_OBJECT
 public:
  static constexpr int kAutosaveDelayMs = 400;

  explicit RewardDesignerModel(Connection* connection, QObject* parent = nullptr);
  ~RewardDesignerModel() override;  // flushes a pending autosave

  // ---- plugins and datasets ----
  void refreshPlugins();
  void rescanPlugins();
  const std::vector<protocol::RewardPluginInfo>& plugins() const { return plugins_; }
  const protocol::RewardPluginInfo* plugin(const QString& name) const;
  void refreshDatasets();
  const std::vector<protocol::DatasetInfo>& datasets() const { return datasets_; }
  // Replaces the rows with the dataset's example rows; false when it is unknown/unavailable.
  bool useDataset(const QString& name);
  QString loadJsonl(const QString& path);  // "" or the error
  // Copies a built plugin library into `dir` (a folder the daemon searches; meaningful for a
  // daemon on this machine) and rescans. "" or the error. pluginDirHint(): the first folder of
  // $SPINDLE_REWARD_PLUGIN_PATH, else the folder of the first listed plugin.
  QString installPlugin(const QString& library, const QString& dir);
  QString pluginDirHint() const;

  // ---- the spec ----
  int termCount() const { return int(terms_.size()); }
  const RewardDesignerTerm& term(int i) const { return terms_.at(size_t(i)); }
  int addTerm(const QString& plugin, const QString& name = {});  // returns its index
  void removeTerm(int i);
  void setTermName(int i, const QString& name);
  void setTermPlugin(int i, const QString& plugin);  // a fresh form with the plugin's defaults
  void setTermWeight(int i, double weight);
  void setTermValue(int i, const std::string& field, nlohmann::json value);
  void clearTermValue(int i, const std::string& field);
  void setTermExtras(int i, nlohmann::json extras);
  std::vector<RewardSpecTerm> specTerms() const;
  std::string specJson() const;                     // compact spec_json
  QString setSpecJson(const std::string& text);     // "" or the error; replaces every term
  QString saveSpec(const QString& path) const;      // "" or the error
  QString loadSpec(const QString& path);

  // ---- the test ----
  RewardRowsModel* rows() const { return rows_; }
  RewardSamplesModel* samples() const { return samples_; }
  QString address() const { return address_; }
  void setAddress(const QString& address);
  int numSamples() const { return num_samples_; }
  void setNumSamples(int n);
  const protocol::SamplingParamsMsg& samplingParams() const { return sampling_; }
  void setSamplingParams(const protocol::SamplingParamsMsg& p);
  uint32_t bins() const { return bins_; }
  void setBins(uint32_t bins);
  protocol::RewardTestRequest request() const;  // what run() sends

  void run();
  void validate();
  bool running() const { return running_; }
  const RewardTestOutcome& outcome() const { return outcome_; }
  bool hasOutcome() const { return has_outcome_; }
  QString error() const { return error_; }

  // ---- autosave ----
  QString autosavePath() const { return autosave_path_; }
  void setAutosavePath(const QString& path);  // "" disables autosave
  void flushAutosave();                       // write now if a write is pending
  bool restoreAutosave();                     // false when there is none (or it is unreadable)
  nlohmann::json stateJson() const;
  QString setStateJson(const nlohmann::json& state);

 signals:
  void pluginsChanged();
  void datasetsChanged();
  void termsChanged();          // terms added, removed or replaced
  void termChanged(int index);  // one term's fields, values or errors
  void settingsChanged();       // address, samples, sampling, bins
  void runningChanged(bool running);
  void outcomeChanged();
  void errorChanged(QString error);
  void validated(bool ok, QString message);
  void autosaved(QString path);

 private:
  void edited();  // schedules the autosave
  void setError(const QString& error);
  void applyFormsFromPlugins();
  void markConfigError(const protocol::Reply& reply);
  void post(protocol::RewardTestRequest request, bool validate_only);

  Connection* connection_;
  std::vector<protocol::RewardPluginInfo> plugins_;
  std::vector<protocol::DatasetInfo> datasets_;
  std::vector<RewardDesignerTerm> terms_;
  RewardRowsModel* rows_;
  RewardSamplesModel* samples_;
  QString address_;
  int num_samples_ = 4;
  protocol::SamplingParamsMsg sampling_;
  uint32_t bins_ = 10;
  bool running_ = false;
  quint64 generation_ = 0;
  RewardTestOutcome outcome_;
  bool has_outcome_ = false;
  QString error_;
  QString autosave_path_;
  QTimer autosave_timer_;
  bool restoring_ = false;
};

}  // namespace spindle::ui
