// RewardDesignerModel: spec files, the designer's whole state as JSON, and the autosave.

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>

#include "spindle/ui/reward_designer_model.h"

namespace spindle::ui {

using namespace protocol;
using nlohmann::json;

namespace {

QString write_file(const QString& path, const std::string& bytes) {
  QDir().mkpath(QFileInfo(path).absolutePath());
  // QSaveFile: written to a temporary and renamed, so a crash mid-write keeps the old file.
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return path + ": " + f.errorString();
  f.write(bytes.data(), qint64(bytes.size()));
  if (!f.commit()) return path + ": " + f.errorString();
  return {};
}

QString read_json(const QString& path, json& out) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return path + ": " + f.errorString();
  const QByteArray bytes = f.readAll();
  out = json::parse(bytes.constData(), bytes.constData() + bytes.size(), nullptr,
                    /*allow_exceptions=*/false);
  if (out.is_discarded()) return path + QObject::tr(": not valid JSON");
  return {};
}

}  // namespace

std::vector<RewardSpecTerm> RewardDesignerModel::specTerms() const {
  std::vector<RewardSpecTerm> out;
  for (const RewardDesignerTerm& t : terms_) {
    out.push_back({t.name.toStdString(), t.plugin.toStdString(), t.weight, t.form.toJson()});
  }
  return out;
}

std::string RewardDesignerModel::specJson() const { return specToJson(specTerms()).dump(); }

QString RewardDesignerModel::setSpecJson(const std::string& text) {
  const json spec = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded()) return tr("the spec is not valid JSON");
  std::vector<RewardSpecTerm> terms;
  if (QString e = specFromJson(spec, terms); !e.isEmpty()) return e;
  terms_.clear();
  for (const RewardSpecTerm& s : terms) {
    RewardDesignerTerm t;
    t.name = QString::fromStdString(s.name);
    t.plugin = QString::fromStdString(s.plugin);
    t.weight = s.weight;
    if (const RewardPluginInfo* p = plugin(t.plugin)) t.form = SchemaForm(p->config_schema_json);
    t.form.load(s.config);
    terms_.push_back(std::move(t));
  }
  emit termsChanged();
  edited();
  return {};
}

QString RewardDesignerModel::saveSpec(const QString& path) const {
  return write_file(path, specToJson(specTerms()).dump(2) + "\n");
}

QString RewardDesignerModel::loadSpec(const QString& path) {
  json spec;
  if (QString e = read_json(path, spec); !e.isEmpty()) return e;
  if (QString e = setSpecJson(spec.dump()); !e.isEmpty()) return path + ": " + e;
  return {};
}

json RewardDesignerModel::stateJson() const {
  json rows = json::array();
  for (const RewardTestRow& r : rows_->rows()) {
    rows.push_back({{"prompt", r.prompt}, {"reference", r.reference},
                    {"metadata_json", r.metadata_json}});
  }
  const SamplingParamsMsg& p = sampling_;
  return {{"spec", specToJson(specTerms())},
          {"address", address_.toStdString()},
          {"num_samples", num_samples_},
          {"bins", bins_},
          {"sampling", {{"max_tokens", p.max_tokens}, {"temperature", p.temperature},
                        {"top_k", p.top_k}, {"top_p", p.top_p}, {"seed", p.seed},
                        {"stop_strings", p.stop_strings}}},
          {"rows", rows}};
}

QString RewardDesignerModel::setStateJson(const json& state) {
  if (!state.is_object()) return tr("the designer state is not a JSON object");
  restoring_ = true;  // one autosave at the end, not one per field
  QString error;
  try {
    if (state.contains("spec")) error = setSpecJson(state["spec"].dump());
    if (state.contains("address")) setAddress(QString::fromStdString(state["address"].get<std::string>()));
    if (state.contains("num_samples")) setNumSamples(state["num_samples"].get<int>());
    if (state.contains("bins")) setBins(state["bins"].get<uint32_t>());
    if (state.contains("sampling")) {
      const json& s = state["sampling"];
      SamplingParamsMsg p;
      p.max_tokens = s.value("max_tokens", p.max_tokens);
      p.temperature = s.value("temperature", p.temperature);
      p.top_k = s.value("top_k", p.top_k);
      p.top_p = s.value("top_p", p.top_p);
      p.seed = s.value("seed", p.seed);
      p.stop_strings = s.value("stop_strings", p.stop_strings);
      setSamplingParams(p);
    }
    if (state.contains("rows")) {
      std::vector<RewardTestRow> rows;
      for (const json& r : state["rows"]) {
        rows.push_back({r.value("prompt", ""), r.value("reference", ""),
                        r.value("metadata_json", "")});
      }
      rows_->setRows(std::move(rows));
    }
  } catch (const json::exception& e) {
    error = tr("the designer state has a field of the wrong type: %1").arg(e.what());
  }
  restoring_ = false;
  return error;
}

void RewardDesignerModel::setAutosavePath(const QString& path) {
  autosave_timer_.stop();
  autosave_path_ = path;
}

void RewardDesignerModel::edited() {
  if (restoring_ || autosave_path_.isEmpty()) return;
  autosave_timer_.start();  // restarts: one write per burst of edits
}

void RewardDesignerModel::flushAutosave() {
  const bool pending = autosave_timer_.isActive();
  autosave_timer_.stop();
  if (!pending && sender() != &autosave_timer_) return;
  if (autosave_path_.isEmpty()) return;
  if (QString e = write_file(autosave_path_, stateJson().dump(2) + "\n"); !e.isEmpty()) {
    setError(tr("autosave failed: %1").arg(e));
    return;
  }
  emit autosaved(autosave_path_);
}

bool RewardDesignerModel::restoreAutosave() {
  if (autosave_path_.isEmpty() || !QFile::exists(autosave_path_)) return false;
  json state;
  if (QString e = read_json(autosave_path_, state); !e.isEmpty()) {
    setError(tr("autosave not restored: %1").arg(e));
    return false;
  }
  if (QString e = setStateJson(state); !e.isEmpty()) {
    setError(tr("autosave not restored: %1").arg(e));
    return false;
  }
  return true;
}

}  // namespace spindle::ui
