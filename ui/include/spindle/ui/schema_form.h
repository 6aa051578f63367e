#pragma once
// A reward term's config form, generated from its plugin's JSON Schema (the subset plugins use,
// backend/rewards schema_check: an object of properties typed string, number, integer, boolean,
// array of strings or enum; required; minimum/maximum; additionalProperties). No widgets here:
// SchemaForm turns the schema into field descriptors, holds the current values and produces
// the config JSON object; the widget (ui/src/schema_form_widget.h) only renders descriptors.
//
// Values: a field is either set (its value goes into toJson()) or unset (omitted, so the
// plugin's own default applies). A new form sets every field that has a known default: the
// schema's "default" keyword, or else a "default X" phrase in the field's description when X
// reads as a value of the field's type (the built-in plugins write "default false"). Fields
// with no known default start unset. Keys a schema does not describe (loaded from a file, or
// typed into the "extra" JSON box) are kept in extras() and sent as they are: the server is
// the validator, and its message comes back through setError().
//
// Errors: setError(field, message) marks a field with the server's validation message
// (kExtrasField for a key that is not a form field); any edit of a field clears its error.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spindle::ui {

struct SchemaField {
  enum class Type { string, number, integer, boolean, string_array, enumeration, json };
  std::string name;
  Type type = Type::json;  // json: a schema type the form has no widget for (raw JSON text)
  std::string description;
  bool required = false;
  std::optional<nlohmann::json> default_value;
  std::vector<std::string> enum_values;  // enumeration: the allowed strings
  std::optional<double> minimum, maximum;
};

// The fields of an object schema, in the schema's property order (nlohmann keeps keys sorted,
// so this is alphabetical, required fields first).
std::vector<SchemaField> schemaFields(const nlohmann::json& schema);

class SchemaForm {
 public:
  static constexpr const char* kExtrasField = "*";

  SchemaForm() = default;
  // `schema_json` is the plugin's config_schema_json; an unreadable schema gives a form with no
  // fields (everything goes to extras) and schemaError() says why.
  explicit SchemaForm(const std::string& schema_json);

  const std::vector<SchemaField>& fields() const { return fields_; }
  const SchemaField* field(const std::string& name) const;
  bool allowsAdditional() const { return additional_; }
  const std::string& schemaError() const { return schema_error_; }

  bool isSet(const std::string& name) const { return values_.count(name) > 0; }
  nlohmann::json value(const std::string& name) const;  // null when unset
  void setValue(const std::string& name, nlohmann::json value);
  void clearValue(const std::string& name);
  const nlohmann::json& extras() const { return extras_; }
  void setExtras(nlohmann::json object);  // must be an object (else ignored)

  // Replaces every value: schema fields from `config`, the rest into extras; fields absent
  // from `config` are unset (a loaded spec means exactly what it says).
  void load(const nlohmann::json& config);
  // The config object: set fields, then extras.
  nlohmann::json toJson() const;

  void setError(const std::string& field, const std::string& message);
  void clearErrors() { errors_.clear(); }
  std::string error(const std::string& field) const;
  const std::map<std::string, std::string>& errors() const { return errors_; }

 private:
  std::vector<SchemaField> fields_;
  bool additional_ = true;
  std::string schema_error_;
  std::map<std::string, nlohmann::json> values_;
  nlohmann::json extras_ = nlohmann::json::object();
  std::map<std::string, std::string> errors_;
};

// The parts of a reward_test config validation message, e.g.
//   "term 'kw' (plugin keywords): config.presnt: unknown field (allowed: ...)"
//   "term 'len' (plugin length): length: config.target must be a number >= 0 (required)"
// field is the first path component after "config." ("" when the message names none).
struct ConfigError {
  std::string term;
  std::string plugin;
  std::string field;
  std::string message;  // the whole server message
};
std::optional<ConfigError> parseConfigError(const std::string& message);

}  // namespace spindle::ui
