#include "spindle/ui/reward_spec.h"

#include <QObject>
#include <QStringList>

namespace spindle::ui {

using nlohmann::json;

json specToJson(const std::vector<RewardSpecTerm>& terms) {
  json out = {{"terms", json::array()}};
  for (const RewardSpecTerm& t : terms) {
    out["terms"].push_back({{"name", t.name},
                            {"plugin", t.plugin},
                            {"weight", t.weight},
                            {"config", t.config.is_object() ? t.config : json::object()}});
  }
  return out;
}

QString specFromJson(const json& spec, std::vector<RewardSpecTerm>& out) {
  out.clear();
  if (!spec.is_object() || !spec.contains("terms") || !spec["terms"].is_array()) {
    return QObject::tr("a reward spec is an object with a \"terms\" array");
  }
  for (size_t i = 0; i < spec["terms"].size(); ++i) {
    const json& t = spec["terms"][i];
    const QString where = QStringLiteral("terms[%1]").arg(i);
    if (!t.is_object()) return where + QObject::tr(": not an object");
    RewardSpecTerm term;
    if (!t.contains("name") || !t["name"].is_string()) return where + QObject::tr(".name: a string is required");
    if (!t.contains("plugin") || !t["plugin"].is_string()) {
      return where + QObject::tr(".plugin: a string is required");
    }
    term.name = t["name"].get<std::string>();
    term.plugin = t["plugin"].get<std::string>();
    if (t.contains("weight")) {
      if (!t["weight"].is_number()) return where + QObject::tr(".weight: a number is required");
      term.weight = t["weight"].get<double>();
    }
    if (t.contains("config")) {
      if (!t["config"].is_object()) return where + QObject::tr(".config: an object is required");
      term.config = t["config"];
    }
    out.push_back(std::move(term));
  }
  return {};
}

QString rowsFromJsonl(const QString& text, std::vector<protocol::RewardTestRow>& out) {
  out.clear();
  const QStringList lines = text.split('\n');
  for (int i = 0; i < lines.size(); ++i) {
    const std::string line = lines[i].trimmed().toStdString();
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const QString where = QObject::tr("line %1").arg(i + 1);
    if (j.is_discarded() || !j.is_object()) return where + QObject::tr(": not a JSON object");
    protocol::RewardTestRow row;
    json meta = json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const bool prompt_key = k == "prompt" || (k == "question" && !j.contains("prompt"));
      const bool ref_key = k == "reference" || (k == "answer" && !j.contains("reference"));
      if (prompt_key || ref_key) {
        const std::string v = it->is_string() ? it->get<std::string>() : it->dump();
        (prompt_key ? row.prompt : row.reference) = v;
      } else {
        meta[k] = it.value();
      }
    }
    if (row.prompt.empty()) return where + QObject::tr(": no \"prompt\" (or \"question\") field");
    row.metadata_json = meta.empty() ? "" : meta.dump();
    out.push_back(std::move(row));
  }
  if (out.empty()) return QObject::tr("the file has no rows");
  return {};
}

std::vector<HistogramBin> histogramBins(const protocol::DistributionInfo& d) {
  std::vector<HistogramBin> out;
  const size_t n = d.histogram.size();
  const double width = n > 0 ? (d.max - d.min) / double(n) : 0.0;
  for (size_t i = 0; i < n; ++i) {
    HistogramBin b;
    b.lo = d.min + width * double(i);
    b.hi = i + 1 == n ? d.max : d.min + width * double(i + 1);
    if (d.min == d.max) b.lo = b.hi = d.min;
    b.count = d.histogram[i];
    out.push_back(b);
  }
  return out;
}

QString binLabel(const HistogramBin& bin) {
  if (bin.lo == bin.hi) return QString::number(bin.lo, 'g', 3);
  return QStringLiteral("%1–%2").arg(bin.lo, 0, 'g', 3).arg(bin.hi, 0, 'g', 3);
}

}  // namespace spindle::ui
