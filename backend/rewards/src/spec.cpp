// RewardSpec: parse and print the JSON composition of weighted plugin terms.

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "spindle/core/error.h"
#include "spindle/rewards/rewards.h"

namespace spindle::rewards {

using nlohmann::json;

RewardSpec RewardSpec::parse(const std::string& json_text, const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  SPINDLE_CHECK(!j.is_discarded(), invalid_argument, "{}: reward spec is not valid JSON",
                source);
  SPINDLE_CHECK(j.is_object(), invalid_argument,
                "{}: reward spec must be a JSON object {{\"terms\": [...]}}, got {}", source,
                j.type_name());
  for (auto it = j.begin(); it != j.end(); ++it) {
    SPINDLE_CHECK(it.key() == "terms" || it.key() == "description", invalid_argument,
                  "{}: unknown field '{}' (allowed: terms, description)", source, it.key());
  }
  SPINDLE_CHECK(j.contains("terms"), invalid_argument, "{}: field 'terms' is missing", source);
  const json& terms = j["terms"];
  SPINDLE_CHECK(terms.is_array() && !terms.empty(), invalid_argument,
                "{}: 'terms' must be a non-empty array of terms", source);
  RewardSpec spec;
  std::set<std::string> names;
  for (size_t i = 0; i < terms.size(); ++i) {
    const json& t = terms[i];
    const std::string where = fmt::format("{}: terms[{}]", source, i);
    SPINDLE_CHECK(t.is_object(), invalid_argument, "{} must be an object, got {}", where,
                  t.type_name());
    for (auto it = t.begin(); it != t.end(); ++it) {
      const std::string& k = it.key();
      SPINDLE_CHECK(k == "name" || k == "plugin" || k == "weight" || k == "config",
                    invalid_argument,
                    "{}: unknown field '{}' (allowed: name, plugin, weight, config)", where, k);
    }
    RewardTerm term;
    SPINDLE_CHECK(t.contains("plugin") && t["plugin"].is_string() &&
                      !t["plugin"].get<std::string>().empty(),
                  invalid_argument, "{}.plugin must be a non-empty string", where);
    term.plugin = t["plugin"].get<std::string>();
    if (t.contains("name")) {
      SPINDLE_CHECK(t["name"].is_string() && !t["name"].get<std::string>().empty(),
                    invalid_argument, "{}.name must be a non-empty string", where);
      term.name = t["name"].get<std::string>();
    } else {
      term.name = term.plugin;
    }
    SPINDLE_CHECK(names.insert(term.name).second, invalid_argument,
                  "{}.name '{}' is used by an earlier term (give each term a unique name)", where,
                  term.name);
    if (t.contains("weight")) {
      SPINDLE_CHECK(t["weight"].is_number() && std::isfinite(t["weight"].get<double>()),
                    invalid_argument, "{}.weight must be a finite number, got {}", where,
                    t["weight"].dump());
      term.weight = t["weight"].get<double>();
    }
    if (t.contains("config")) {
      SPINDLE_CHECK(t["config"].is_object(), invalid_argument,
                    "{}.config must be a JSON object, got {}", where, t["config"].type_name());
      term.config_json = t["config"].dump();
    }
    spec.terms.push_back(std::move(term));
  }
  return spec;
}

std::string RewardSpec::to_json() const {
  json terms = json::array();
  for (const RewardTerm& t : this->terms) {
    json config = json::parse(t.config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) config = json::object();
    terms.push_back({{"name", t.name}, {"plugin", t.plugin}, {"weight", t.weight},
                     {"config", config}});
  }
  return json{{"terms", terms}}.dump(2);
}

}  // namespace spindle::rewards
