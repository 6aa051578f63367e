#include "schema_check.h"

#include <fmt/format.h>

namespace spindle::rewards {

namespace {

using nlohmann::json;

bool has_type(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && v.get<double>() == static_cast<double>(v.get<int64_t>()));
  }
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return true;  // unknown type names do not constrain
}

}  // namespace

std::optional<std::string> schema_violation(const json& schema, const json& value,
                                            const std::string& path) {
  if (!schema.is_object()) return std::nullopt;
  if (auto t = schema.find("type"); t != schema.end()) {
    bool ok = false;
    std::string names;
    if (t->is_string()) {
      ok = has_type(value, t->get<std::string>());
      names = t->get<std::string>();
    } else if (t->is_array()) {
      for (const json& n : *t) {
        if (!n.is_string()) continue;
        ok = ok || has_type(value, n.get<std::string>());
        names += (names.empty() ? "" : " or ") + n.get<std::string>();
      }
    } else {
      ok = true;
    }
    if (!ok) return fmt::format("{}: expected {}, got {}", path, names, value.type_name());
  }
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
    bool ok = false;
    for (const json& c : *e) ok = ok || c == value;
    if (!ok) return fmt::format("{}: {} is not one of {}", path, value.dump(), e->dump());
  }
  if (value.is_number()) {
    const double x = value.get<double>();
    if (auto m = schema.find("minimum"); m != schema.end() && m->is_number() &&
                                         x < m->get<double>()) {
      return fmt::format("{}: {} is below the minimum {}", path, value.dump(), m->dump());
    }
    if (auto m = schema.find("maximum"); m != schema.end() && m->is_number() &&
                                         x > m->get<double>()) {
      return fmt::format("{}: {} is above the maximum {}", path, value.dump(), m->dump());
    }
  }
  if (value.is_object()) {
    const json* props = schema.contains("properties") && schema["properties"].is_object()
                            ? &schema["properties"]
                            : nullptr;
    if (auto r = schema.find("required"); r != schema.end() && r->is_array()) {
      for (const json& k : *r) {
        if (k.is_string() && !value.contains(k.get<std::string>())) {
          return fmt::format("{}.{}: required field is missing", path, k.get<std::string>());
        }
      }
    }
    const json* additional =
        schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string child = path + "." + it.key();
      if (props && props->contains(it.key())) {
        if (auto v = schema_violation((*props)[it.key()], it.value(), child)) return v;
      } else if (additional && additional->is_boolean() && !additional->get<bool>()) {
        return fmt::format("{}: unknown field (allowed: {})", child,
                           props ? [&] {
                             std::string names;
                             for (auto p = props->begin(); p != props->end(); ++p)
                               names += (names.empty() ? "" : ", ") + p.key();
                             return names;
                           }()
                                 : std::string("none"));
      } else if (additional && additional->is_object()) {
        if (auto v = schema_violation(*additional, it.value(), child)) return v;
      }
    }
  }
  if (value.is_array()) {
    if (auto items = schema.find("items"); items != schema.end() && items->is_object()) {
      for (size_t i = 0; i < value.size(); ++i) {
        if (auto v = schema_violation(*items, value[i], fmt::format("{}[{}]", path, i))) return v;
      }
    }
  }
  return std::nullopt;
}

}  // namespace spindle::rewards
