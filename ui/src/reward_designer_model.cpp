#include "spindle/ui/reward_designer_model.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>

#include "spindle/ui/connection.h"

namespace spindle::ui {

using namespace protocol;
using nlohmann::json;

RewardDesignerModel::RewardDesignerModel(Connection* connection, QObject* parent)
    : QObject(parent),
      connection_(connection),
      rows_(new RewardRowsModel(this)),
      samples_(new RewardSamplesModel(this)) {
  sampling_.max_tokens = 24;
  autosave_timer_.setSingleShot(true);
  autosave_timer_.setInterval(kAutosaveDelayMs);
  connect(&autosave_timer_, &QTimer::timeout, this, &RewardDesignerModel::flushAutosave);
  connect(rows_, &RewardRowsModel::edited, this, &RewardDesignerModel::edited);
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
  if (!dir.isEmpty()) autosave_path_ = dir + "/reward-designer-autosave.json";
}

RewardDesignerModel::~RewardDesignerModel() { flushAutosave(); }

// ---- plugins and datasets -------------------------------------------------------------------

void RewardDesignerModel::refreshPlugins() {
  connection_->post(this, Op::reward_plugins, Empty{}, [this](const Reply& r) {
    if (!r.ok) return setError(errorText(r));
    plugins_ = std::get<RewardPluginsReply>(r.body).plugins;
    applyFormsFromPlugins();
    emit pluginsChanged();
  });
}

void RewardDesignerModel::rescanPlugins() {
  connection_->post(this, Op::plugin_rescan, Empty{}, [this](const Reply& r) {
    if (!r.ok) return setError(errorText(r));
    plugins_ = std::get<RewardPluginsReply>(r.body).plugins;
    applyFormsFromPlugins();
    emit pluginsChanged();
  });
}

const RewardPluginInfo* RewardDesignerModel::plugin(const QString& name) const {
  for (const RewardPluginInfo& p : plugins_) {
    if (QString::fromStdString(p.name) == name) return &p;
  }
  return nullptr;
}

// A term loaded before the plugin list arrived has a schema-less form holding its config in
// extras; once the plugin is known the form is rebuilt with the same config.
void RewardDesignerModel::applyFormsFromPlugins() {
  for (size_t i = 0; i < terms_.size(); ++i) {
    RewardDesignerTerm& t = terms_[i];
    const RewardPluginInfo* p = plugin(t.plugin);
    if (p == nullptr || !t.form.fields().empty()) continue;
    const json config = t.form.toJson();
    t.form = SchemaForm(p->config_schema_json);
    t.form.load(config);
    emit termChanged(int(i));
  }
}

void RewardDesignerModel::refreshDatasets() {
  connection_->post(this, Op::datasets, DatasetsRequest{20}, [this](const Reply& r) {
    if (!r.ok) return setError(errorText(r));
    datasets_ = std::get<DatasetsReply>(r.body).datasets;
    emit datasetsChanged();
  });
}

bool RewardDesignerModel::useDataset(const QString& name) {
  for (const DatasetInfo& d : datasets_) {
    if (QString::fromStdString(d.name) != name) continue;
    if (!d.available || d.examples.empty()) {
      setError(tr("dataset %1 is unavailable: %2").arg(name, QString::fromStdString(d.error)));
      return false;
    }
    rows_->setRows(d.examples);
    return true;
  }
  return false;
}

QString RewardDesignerModel::loadJsonl(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return tr("%1: %2").arg(path, f.errorString());
  std::vector<RewardTestRow> rows;
  const QString e = rowsFromJsonl(QString::fromUtf8(f.readAll()), rows);
  if (!e.isEmpty()) return path + ": " + e;
  rows_->setRows(std::move(rows));
  return {};
}

QString RewardDesignerModel::installPlugin(const QString& library, const QString& dir) {
  if (!QDir().mkpath(dir)) return tr("%1: cannot create the folder").arg(dir);
  const QString target = QDir(dir).filePath(QFileInfo(library).fileName());
  if (QFileInfo::exists(target) && !QFile::remove(target)) {
    return tr("%1: cannot replace the old library").arg(target);
  }
  if (!QFile::copy(library, target)) return tr("cannot copy %1 to %2").arg(library, target);
  rescanPlugins();
  return {};
}

QString RewardDesignerModel::pluginDirHint() const {
  const QString env = qEnvironmentVariable("SPINDLE_REWARD_PLUGIN_PATH");
  if (!env.isEmpty()) return env.section(':', 0, 0);
  if (!plugins_.empty()) return QFileInfo(QString::fromStdString(plugins_.front().path)).absolutePath();
  return {};
}

// ---- terms ----------------------------------------------------------------------------------

int RewardDesignerModel::addTerm(const QString& plugin_name, const QString& name) {
  RewardDesignerTerm t;
  t.plugin = plugin_name;
  QString base = name.isEmpty() ? plugin_name : name;
  t.name = base;
  for (int n = 2;; ++n) {
    bool clash = false;
    for (const RewardDesignerTerm& o : terms_) clash = clash || o.name == t.name;
    if (!clash) break;
    t.name = QStringLiteral("%1_%2").arg(base).arg(n);
  }
  if (const RewardPluginInfo* p = plugin(plugin_name)) t.form = SchemaForm(p->config_schema_json);
  terms_.push_back(std::move(t));
  emit termsChanged();
  edited();
  return termCount() - 1;
}

void RewardDesignerModel::removeTerm(int i) {
  if (i < 0 || i >= termCount()) return;
  terms_.erase(terms_.begin() + i);
  emit termsChanged();
  edited();
}

void RewardDesignerModel::setTermName(int i, const QString& name) {
  if (i < 0 || i >= termCount() || terms_[size_t(i)].name == name) return;
  terms_[size_t(i)].name = name;
  terms_[size_t(i)].error.clear();
  emit termChanged(i);
  edited();
}

void RewardDesignerModel::setTermPlugin(int i, const QString& plugin_name) {
  if (i < 0 || i >= termCount() || terms_[size_t(i)].plugin == plugin_name) return;
  RewardDesignerTerm& t = terms_[size_t(i)];
  t.plugin = plugin_name;
  t.error.clear();
  const RewardPluginInfo* p = plugin(plugin_name);
  t.form = p ? SchemaForm(p->config_schema_json) : SchemaForm();
  emit termChanged(i);
  edited();
}

void RewardDesignerModel::setTermWeight(int i, double weight) {
  if (i < 0 || i >= termCount() || terms_[size_t(i)].weight == weight) return;
  terms_[size_t(i)].weight = weight;
  emit termChanged(i);
  edited();
}

void RewardDesignerModel::setTermValue(int i, const std::string& field, json value) {
  if (i < 0 || i >= termCount()) return;
  RewardDesignerTerm& t = terms_[size_t(i)];
  t.form.setValue(field, std::move(value));
  if (t.form.errors().empty()) t.error.clear();
  emit termChanged(i);
  edited();
}

void RewardDesignerModel::clearTermValue(int i, const std::string& field) {
  if (i < 0 || i >= termCount()) return;
  RewardDesignerTerm& t = terms_[size_t(i)];
  t.form.clearValue(field);
  if (t.form.errors().empty()) t.error.clear();
  emit termChanged(i);
  edited();
}

void RewardDesignerModel::setTermExtras(int i, json extras) {
  if (i < 0 || i >= termCount()) return;
  RewardDesignerTerm& t = terms_[size_t(i)];
  t.form.setExtras(std::move(extras));
  if (t.form.errors().empty()) t.error.clear();
  emit termChanged(i);
  edited();
}

// ---- settings -------------------------------------------------------------------------------

void RewardDesignerModel::setAddress(const QString& address) {
  if (address_ == address.trimmed()) return;
  address_ = address.trimmed();
  emit settingsChanged();
  edited();
}

void RewardDesignerModel::setNumSamples(int n) {
  if (num_samples_ == n) return;
  num_samples_ = n;
  emit settingsChanged();
  edited();
}

void RewardDesignerModel::setSamplingParams(const SamplingParamsMsg& p) {
  if (sampling_ == p) return;
  sampling_ = p;
  emit settingsChanged();
  edited();
}

void RewardDesignerModel::setBins(uint32_t bins) {
  if (bins_ == bins) return;
  bins_ = bins;
  emit settingsChanged();
  edited();
}

// ---- the test -------------------------------------------------------------------------------

RewardTestRequest RewardDesignerModel::request() const {
  RewardTestRequest r;
  r.spec_json = specJson();
  r.rows = rows_->rows();
  r.address = address_.toStdString();
  r.num_samples = num_samples_;
  r.sampling_params = sampling_;
  r.bins = bins_;
  return r;
}

void RewardDesignerModel::run() { post(request(), /*validate_only=*/false); }

void RewardDesignerModel::validate() {
  RewardTestRequest r = request();
  if (r.rows.empty()) r.rows.push_back({"a", "", ""});
  r.rows.resize(1);
  r.num_samples = 1;
  r.sampling_params.max_tokens = 1;
  post(std::move(r), /*validate_only=*/true);
}

void RewardDesignerModel::post(RewardTestRequest request, bool validate_only) {
  const quint64 generation = ++generation_;
  for (size_t i = 0; i < terms_.size(); ++i) {
    if (terms_[i].error.isEmpty() && terms_[i].form.errors().empty()) continue;
    terms_[i].error.clear();
    terms_[i].form.clearErrors();
    emit termChanged(int(i));
  }
  setError({});
  running_ = true;
  emit runningChanged(true);
  auto rows = std::make_shared<std::vector<RewardTestRow>>(request.rows);
  connection_->post(this, Op::reward_test, std::move(request),
                    [this, generation, rows, validate_only](const Reply& r) {
    if (generation != generation_) return;
    running_ = false;
    emit runningChanged(false);
    if (!r.ok) {
      setError(errorText(r));
      markConfigError(r);
      if (validate_only) emit validated(false, errorText(r));
      return;
    }
    if (validate_only) {
      emit validated(true, tr("the spec is valid"));
      return;
    }
    const auto& reply = std::get<RewardTestReply>(r.body);
    outcome_.revision_id = QString::fromStdString(reply.revision_id);
    outcome_.terms = reply.terms;
    outcome_.total = reply.total;
    has_outcome_ = true;
    QStringList names;
    for (const RewardTermInfo& t : reply.terms) names << QString::fromStdString(t.name);
    std::vector<RewardScoredSample> samples;
    for (const RewardSampleInfo& s : reply.samples) {
      RewardScoredSample out;
      out.row = s.row;
      if (s.row < rows->size()) out.prompt = QString::fromStdString((*rows)[s.row].prompt);
      out.text = QString::fromStdString(s.text);
      out.stop_reason = QString::fromStdString(s.stop_reason);
      out.scores = s.scores;
      for (const std::string& info : s.infos) out.infos << QString::fromStdString(info);
      out.total = s.total;
      samples.push_back(std::move(out));
    }
    samples_->setSamples(names, std::move(samples));
    emit outcomeChanged();
  });
}

void RewardDesignerModel::markConfigError(const Reply& r) {
  if (r.error.code != errc::invalid_argument && r.error.code != errc::not_found) return;
  const auto e = parseConfigError(r.error.message);
  if (!e) return;
  for (size_t i = 0; i < terms_.size(); ++i) {
    RewardDesignerTerm& t = terms_[i];
    if (t.name.toStdString() != e->term) continue;
    t.error = QString::fromStdString(e->message);
    if (!e->field.empty()) t.form.setError(e->field, e->message);
    emit termChanged(int(i));
    return;
  }
}

void RewardDesignerModel::setError(const QString& error) {
  if (error_ == error) return;
  error_ = error;
  emit errorChanged(error_);
}

}  // namespace spindle::ui
