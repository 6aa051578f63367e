#include "spindle/ui/schema_form.h"

#include <algorithm>
#include <cstdlib>
#include <regex>

namespace spindle::ui {

using nlohmann::json;

namespace {

SchemaField::Type field_type(const json& p) {
  if (p.contains("enum") && p["enum"].is_array()) {
    const bool strings = std::all_of(p["enum"].begin(), p["enum"].end(),
                                     [](const json& v) { return v.is_string(); });
    if (strings && !p["enum"].empty()) return SchemaField::Type::enumeration;
  }
  const std::string t = p.value("type", json("")).is_string() ? p.value("type", "") : "";
  if (t == "string") return SchemaField::Type::string;
  if (t == "number") return SchemaField::Type::number;
  if (t == "integer") return SchemaField::Type::integer;
  if (t == "boolean") return SchemaField::Type::boolean;
  if (t == "array" && p.contains("items") && p["items"].is_object() &&
      p["items"].value("type", "") == "string") {
    return SchemaField::Type::string_array;
  }
  return SchemaField::Type::json;
}

// A value of `f`'s type read from a word, or nullopt.
std::optional<json> parse_word(const SchemaField& f, const std::string& w) {
  switch (f.type) {
    case SchemaField::Type::boolean:
      if (w == "true" || w == "false") return json(w == "true");
      return std::nullopt;
    case SchemaField::Type::number:
    case SchemaField::Type::integer: {
      char* end = nullptr;
      const double x = std::strtod(w.c_str(), &end);
      if (w.empty() || end != w.c_str() + w.size()) return std::nullopt;
      if (f.type == SchemaField::Type::integer) {
        if (x != double(int64_t(x))) return std::nullopt;
        return json(int64_t(x));
      }
      return json(x);
    }
    case SchemaField::Type::enumeration:
      if (std::find(f.enum_values.begin(), f.enum_values.end(), w) == f.enum_values.end()) {
        return std::nullopt;
      }
      return json(w);
    case SchemaField::Type::string:
      return json(w);
    default:
      return std::nullopt;
  }
}

// The value of a "default X" phrase in a description, when X fits the field.
std::optional<json> description_default(const SchemaField& f) {
  static const std::regex re(R"(\bdefault\s+([^\s,;()]+))");
  std::smatch m;
  if (!std::regex_search(f.description, m, re)) return std::nullopt;
  return parse_word(f, m[1].str());
}

}  // namespace

std::vector<SchemaField> schemaFields(const json& schema) {
  std::vector<SchemaField> out;
  if (!schema.is_object() || !schema.contains("properties") || !schema["properties"].is_object()) {
    return out;
  }
  std::vector<std::string> required;
  if (schema.contains("required") && schema["required"].is_array()) {
    for (const json& r : schema["required"]) {
      if (r.is_string()) required.push_back(r.get<std::string>());
    }
  }
  for (auto it = schema["properties"].begin(); it != schema["properties"].end(); ++it) {
    const json& p = it.value();
    SchemaField f;
    f.name = it.key();
    if (!p.is_object()) {
      out.push_back(std::move(f));
      continue;
    }
    f.type = field_type(p);
    f.description = p.value("description", json("")).is_string() ? p.value("description", "") : "";
    f.required = std::find(required.begin(), required.end(), f.name) != required.end();
    if (f.type == SchemaField::Type::enumeration) {
      for (const json& v : p["enum"]) f.enum_values.push_back(v.get<std::string>());
    }
    if (p.contains("minimum") && p["minimum"].is_number()) f.minimum = p["minimum"].get<double>();
    if (p.contains("maximum") && p["maximum"].is_number()) f.maximum = p["maximum"].get<double>();
    if (p.contains("default")) {
      f.default_value = p["default"];
    } else {
      f.default_value = description_default(f);
    }
    out.push_back(std::move(f));
  }
  std::stable_partition(out.begin(), out.end(), [](const SchemaField& f) { return f.required; });
  return out;
}

SchemaForm::SchemaForm(const std::string& schema_json) {
  const json schema = json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded() || !schema.is_object()) {
    schema_error_ = "the plugin's config schema is not a JSON object";
    return;
  }
  fields_ = schemaFields(schema);
  if (schema.contains("additionalProperties") && schema["additionalProperties"].is_boolean()) {
    additional_ = schema["additionalProperties"].get<bool>();
  }
  for (const SchemaField& f : fields_) {
    if (f.default_value) values_[f.name] = *f.default_value;
  }
}

const SchemaField* SchemaForm::field(const std::string& name) const {
  for (const SchemaField& f : fields_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

json SchemaForm::value(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? json() : it->second;
}

void SchemaForm::setValue(const std::string& name, json value) {
  if (field(name) == nullptr) {
    extras_[name] = std::move(value);
    errors_.erase(kExtrasField);
  } else {
    values_[name] = std::move(value);
  }
  errors_.erase(name);
}

void SchemaForm::clearValue(const std::string& name) {
  values_.erase(name);
  extras_.erase(name);
  errors_.erase(name);
}

void SchemaForm::setExtras(json object) {
  if (!object.is_object()) return;
  extras_ = json::object();
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (field(it.key()) != nullptr) {
      values_[it.key()] = it.value();
    } else {
      extras_[it.key()] = it.value();
    }
  }
  errors_.erase(kExtrasField);
}

void SchemaForm::load(const json& config) {
  values_.clear();
  extras_ = json::object();
  errors_.clear();
  if (!config.is_object()) return;
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (field(it.key()) != nullptr) {
      values_[it.key()] = it.value();
    } else {
      extras_[it.key()] = it.value();
    }
  }
}

json SchemaForm::toJson() const {
  json out = json::object();
  for (const SchemaField& f : fields_) {
    if (auto it = values_.find(f.name); it != values_.end()) out[f.name] = it->second;
  }
  for (auto it = extras_.begin(); it != extras_.end(); ++it) out[it.key()] = it.value();
  return out;
}

void SchemaForm::setError(const std::string& name, const std::string& message) {
  errors_[field(name) != nullptr ? name : std::string(kExtrasField)] = message;
}

std::string SchemaForm::error(const std::string& name) const {
  auto it = errors_.find(name);
  return it == errors_.end() ? std::string() : it->second;
}

std::optional<ConfigError> parseConfigError(const std::string& message) {
  static const std::regex term_re(R"(term '([^']*)' \(plugin ([^)]*)\))");
  static const std::regex field_re(R"(\bconfig\.([A-Za-z0-9_\-]+))");
  std::smatch m;
  if (!std::regex_search(message, m, term_re)) return std::nullopt;
  ConfigError e;
  e.term = m[1].str();
  e.plugin = m[2].str();
  e.message = message;
  const std::string rest = m.suffix().str();
  std::smatch f;
  if (std::regex_search(rest, f, field_re)) e.field = f[1].str();
  return e;
}

}  // namespace spindle::ui
