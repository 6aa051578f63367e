#include "spindle/ui/run_config_form.h"

#include <QRegularExpression>

#include <nlohmann/json.hpp>

#include "spindle/ui/connection.h"

namespace spindle::ui {

using json = nlohmann::json;
using namespace protocol;

namespace {

const QRegularExpression& policy_path_re() {
  static const QRegularExpression re(R"(^policies\[(\d+)\]\.(.+)$)");
  return re;
}

QVariant convert(const RunConfigField& f, const QVariant& v) {
  switch (f.kind) {
    case FieldKind::integer: return QVariant(v.toLongLong());
    case FieldKind::number: return QVariant(v.toDouble());
    case FieldKind::flag: return QVariant(v.toBool());
    case FieldKind::text_list: {
      QStringList items = v.toStringList();
      if (v.typeId() == QMetaType::QString) {
        // One item per line; a single line may also be comma separated (targets).
        const QString s = v.toString();
        items = s.contains('\n') ? s.split('\n') : s.split(',');
      }
      QStringList out;
      for (const QString& x : items)
        if (!x.trimmed().isEmpty()) out << x.trimmed();
      return out;
    }
    default: return QVariant(v.toString());
  }
}

// `value` as JSON for field `f`; throws std::invalid_argument for a json field that isn't.
json to_json(const RunConfigField& f, const QVariant& value) {
  switch (f.kind) {
    case FieldKind::integer: return value.toLongLong();
    case FieldKind::number: return value.toDouble();
    case FieldKind::flag: return value.toBool();
    case FieldKind::text_list: {
      json a = json::array();
      for (const QString& s : value.toStringList()) a.push_back(s.toStdString());
      return a;
    }
    case FieldKind::json: {
      json j = json::parse(value.toString().toStdString(), nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) throw std::invalid_argument("not valid JSON");
      return j;
    }
    default: return value.toString().toStdString();
  }
}

bool is_empty(const RunConfigField& f, const QVariant& v) {
  switch (f.kind) {
    case FieldKind::integer: return v.toLongLong() < 0;
    case FieldKind::text_list: return v.toStringList().isEmpty();
    default: return v.toString().isEmpty();
  }
}

QVariant from_json(const RunConfigField& f, const json& j) {
  switch (f.kind) {
    case FieldKind::integer: return j.is_number() ? QVariant(qint64(j.get<double>())) : f.initial;
    case FieldKind::number: return j.is_number() ? QVariant(j.get<double>()) : f.initial;
    case FieldKind::flag: return j.is_boolean() ? QVariant(j.get<bool>()) : f.initial;
    case FieldKind::text_list: {
      QStringList out;
      if (j.is_array())
        for (const json& x : j)
          if (x.is_string()) out << QString::fromStdString(x.get<std::string>());
      return out;
    }
    case FieldKind::json: return QString::fromStdString(j.dump());
    default: return j.is_string() ? QVariant(QString::fromStdString(j.get<std::string>())) : f.initial;
  }
}

// Sets j[a][b]... for a dotted key.
void put(json& j, const QString& key, json v) {
  json* at = &j;
  for (const QString& part : key.split('.')) at = &(*at)[part.toStdString()];
  *at = std::move(v);
}
const json* get(const json& j, const QString& key) {
  const json* at = &j;
  for (const QString& part : key.split('.')) {
    if (!at->is_object() || !at->contains(part.toStdString())) return nullptr;
    at = &(*at)[part.toStdString()];
  }
  return at;
}

}  // namespace

RunConfigForm::RunConfigForm(Connection* connection, QObject* parent)
    : QObject(parent), connection_(connection), dataset_names_(builtinDatasetNames()) {
  run_ = defaults(FieldScope::run);
  policies_.push_back(defaults(FieldScope::policy));
}

QVariantMap RunConfigForm::defaults(FieldScope scope) const {
  QVariantMap m;
  for (const RunConfigField& f : runConfigFields())
    if (f.scope == scope) m.insert(f.key, f.initial);
  return m;
}

QString RunConfigForm::policyPath(int index, const QString& key) {
  return QString("policies[%1].%2").arg(index).arg(key);
}

bool RunConfigForm::splitPath(const QString& path, int* policy, QString* key) const {
  const auto m = policy_path_re().match(path);
  if (m.hasMatch()) {
    *policy = m.captured(1).toInt();
    *key = m.captured(2);
    return *policy >= 0 && *policy < policyCount() &&
           findRunConfigField(FieldScope::policy, *key) != nullptr;
  }
  *policy = -1;
  *key = path;
  return findRunConfigField(FieldScope::run, path) != nullptr;
}

const RunConfigField* RunConfigForm::field(const QString& path) const {
  int p;
  QString key;
  if (!splitPath(path, &p, &key)) return nullptr;
  return findRunConfigField(p < 0 ? FieldScope::run : FieldScope::policy, key);
}

QVariant RunConfigForm::value(const QString& path) const {
  int p;
  QString key;
  if (!splitPath(path, &p, &key)) return {};
  return p < 0 ? run_.value(key) : policies_[size_t(p)].value(key);
}

bool RunConfigForm::setValue(const QString& path, const QVariant& v) {
  int p;
  QString key;
  if (!splitPath(path, &p, &key)) return false;
  const RunConfigField* f = field(path);
  QVariantMap& m = p < 0 ? run_ : policies_[size_t(p)];
  const QVariant c = convert(*f, v);
  if (m.value(key) != c) {
    m.insert(key, c);
    emit valueChanged(path);
  }
  if (errors_.remove(path) > 0) emit errorsChanged();
  return true;
}

QString RunConfigForm::toolTip(const QString& path) const {
  const RunConfigField* f = field(path);
  if (!f) return {};
  QString tip = QString("<b>%1</b> (%2)<br>%3").arg(f->label, f->key, f->doc.toHtmlEscaped());
  if (errors_.contains(path))
    tip += QString("<hr><b>Error:</b> %1").arg(errors_.value(path).toHtmlEscaped());
  return tip;
}

int RunConfigForm::addPolicy() {
  policies_.push_back(defaults(FieldScope::policy));
  // A new policy inherits the first one's reward and dataset, the usual comparison setup.
  for (const QString k : {"reward", "dataset.name", "dataset.prompts"})
    policies_.back().insert(k, policies_.front().value(k));
  emit policiesChanged();
  return policyCount() - 1;
}

void RunConfigForm::removePolicy(int index) {
  if (policyCount() <= 1 || index < 0 || index >= policyCount()) return;
  policies_.erase(policies_.begin() + index);
  clearErrors();
  emit policiesChanged();
}

void RunConfigForm::setResume(bool resume) {
  if (resume_ == resume) return;
  resume_ = resume;
  emit valueChanged("resume");
}

void RunConfigForm::setRewardSpec(const QString& spec) {
  for (int i = 0; i < policyCount(); ++i) setValue(policyPath(i, "reward"), spec);
}

void RunConfigForm::loadDatasets() {
  connection_->post(this, Op::datasets, DatasetsRequest{0}, [this](const Reply& r) {
    if (!r.ok) return;  // the built-in names stay
    QStringList names = builtinDatasetNames();
    for (const DatasetInfo& d : std::get<DatasetsReply>(r.body).datasets) {
      const QString n = QString::fromStdString(d.name);
      if (d.available && !names.contains(n)) names << n;
    }
    if (names != dataset_names_) {
      dataset_names_ = names;
      emit datasetNamesChanged();
    }
  });
}

QString RunConfigForm::configJson() {
  json j = json::object();
  bool ok = true;
  auto emit_field = [&](json& into, const RunConfigField& f, const QVariant& v,
                        const QString& path) {
    if (f.omit_when_empty && is_empty(f, v)) return;
    if (f.key == "targets" && v.toStringList().isEmpty()) return;  // the server's default set
    try {
      put(into, f.key, to_json(f, v));
    } catch (const std::exception& e) {
      setError(path, QString("%1: %2").arg(f.label, e.what()));
      ok = false;
    }
  };
  for (const RunConfigField& f : runConfigFields())
    if (f.scope == FieldScope::run) emit_field(j, f, run_.value(f.key), f.key);
  j["policies"] = json::array();
  for (int i = 0; i < policyCount(); ++i) {
    json p = json::object();
    const QVariantMap& m = policies_[size_t(i)];
    const QString dataset = m.value("dataset.name").toString();
    for (const RunConfigField& f : runConfigFields()) {
      if (f.scope != FieldScope::policy) continue;
      // Dataset fields that do not apply to the chosen dataset are left out (the parser would
      // accept them, but a stale path under an inline dataset only confuses the record).
      if (f.key == "dataset.prompts" && dataset != "inline") continue;
      if ((f.key == "dataset.path" || f.key == "dataset.reference_field") && dataset != "jsonl")
        continue;
      emit_field(p, f, m.value(f.key), policyPath(i, f.key));
    }
    j["policies"].push_back(std::move(p));
  }
  if (!ok) {
    banner_ = "The form has fields that cannot be sent (see the highlighted fields).";
    emit errorsChanged();
    return {};
  }
  return QString::fromStdString(j.dump());
}

bool RunConfigForm::loadConfigJson(const QString& text) {
  const json j = json::parse(text.toStdString(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("policies") || !j["policies"].is_array() ||
      j["policies"].empty())
    return false;
  run_ = defaults(FieldScope::run);
  for (const RunConfigField& f : runConfigFields())
    if (f.scope == FieldScope::run)
      if (const json* v = get(j, f.key)) run_.insert(f.key, from_json(f, *v));
  policies_.clear();
  for (const json& pj : j["policies"]) {
    QVariantMap m = defaults(FieldScope::policy);
    for (const RunConfigField& f : runConfigFields())
      if (f.scope == FieldScope::policy)
        if (const json* v = get(pj, f.key)) m.insert(f.key, from_json(f, *v));
    policies_.push_back(std::move(m));
  }
  clearErrors();
  emit policiesChanged();
  return true;
}

void RunConfigForm::clearErrors() {
  if (errors_.isEmpty() && banner_.isEmpty()) return;
  errors_.clear();
  banner_.clear();
  emit errorsChanged();
}

void RunConfigForm::setError(const QString& path, const QString& message) {
  errors_.insert(path, message);
}

QString RunConfigForm::errorPathOfMessage(const QString& message) {
  // "run_start config_json: config.policies[0].reward: ...": the last field path of the
  // message's leading "path: " segments that starts at the config's top level.
  static const QRegularExpression path_re(
      R"(^[A-Za-z_][A-Za-z0-9_]*(\[\d+\])?(\.[A-Za-z_][A-Za-z0-9_]*(\[\d+\])?)*$)");
  QString found;
  const QStringList segments = message.split(": ");
  for (int i = 0; i + 1 < segments.size(); ++i) {
    QString s = segments[i].trimmed();
    if (!path_re.match(s).hasMatch()) {
      if (!found.isEmpty()) break;
      continue;
    }
    if (s.startsWith("config.")) s = s.mid(7);
    const QString top = s.section(QRegularExpression(R"([.\[])"), 0, 0);
    if (top == "policies" || findRunConfigField(FieldScope::run, top) || top == "tenant")
      found = s;
    else if (!found.isEmpty())
      break;
  }
  return found;
}

QString RunConfigForm::formPathFor(const QString& error_path, const QString& message) const {
  QString path = error_path.startsWith("config.") ? error_path.mid(7) : error_path;
  FieldScope scope = FieldScope::run;
  QString prefix, rest = path;
  static const QRegularExpression policy_re(R"(^policies\[(\d+)\](?:\.(.*))?$)");
  if (const auto m = policy_re.match(path); m.hasMatch()) {
    const int i = m.captured(1).toInt();
    if (i >= policyCount()) return {};
    scope = FieldScope::policy;
    prefix = policyPath(i, "");
    rest = m.captured(2).isEmpty() ? QString("name") : m.captured(2);
  }
  // The longest field key that is the path or a prefix of it ("reward.terms[0]" -> "reward").
  const RunConfigField* best = nullptr;
  for (const RunConfigField& f : runConfigFields()) {
    if (f.scope != scope) continue;
    if (rest == f.key || rest.startsWith(f.key + ".") || rest.startsWith(f.key + "["))
      if (!best || f.key.size() > best->key.size()) best = &f;
  }
  // Else a group ("loss_config", "dataset"): the member the message names, or its first.
  if (!best) {
    for (const RunConfigField& f : runConfigFields()) {
      if (f.scope != scope || !f.key.startsWith(rest + ".")) continue;
      if (!best) best = &f;
      if (message.contains(f.key.section('.', -1))) {
        best = &f;
        break;
      }
    }
  }
  return best ? prefix + best->key : QString();
}

void RunConfigForm::launch() {
  if (launching_) return;
  clearErrors();
  const QString config = configJson();
  if (config.isEmpty()) {
    emit launchFailed("invalid_argument", banner_);
    return;
  }
  launching_ = true;
  emit launchingChanged(true);
  connection_->post(this, Op::run_start, RunStartRequest{config.toStdString(), resume_},
                    [this](const Reply& r) {
                      launching_ = false;
                      emit launchingChanged(false);
                      if (!r.ok) {
                        onLaunchReply(QString::fromStdString(r.error.code),
                                      QString::fromStdString(r.error.message));
                        return;
                      }
                      const auto& body = std::get<RunStartReply>(r.body);
                      QStringList policies;
                      for (const auto& p : body.policies) policies << QString::fromStdString(p);
                      emit launched(QString::fromStdString(body.run_id), policies);
                    });
}

void RunConfigForm::onLaunchReply(const QString& code, const QString& message) {
  banner_ = code + ": " + message;
  QString path = formPathFor(errorPathOfMessage(message), message);
  if (path.isEmpty() && code == errc::already_exists) {
    // "policy 'x' already ...": the name field of that policy (resume continues it).
    for (int i = 0; i < policyCount() && path.isEmpty(); ++i) {
      const QString name = policies_[size_t(i)].value("name").toString();
      if (!name.isEmpty() && message.contains(name)) path = policyPath(i, "name");
    }
  }
  if (!path.isEmpty()) setError(path, message);
  emit errorsChanged();
  emit launchFailed(code, message);
}

}  // namespace spindle::ui
