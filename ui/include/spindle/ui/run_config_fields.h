#pragma once
// The fields of a GRPO run config (spindle/rl/config.h, parsed by backend/rl/src/config.cpp) as
// one table the launch form is generated from: the JSON key, its kind, its default and its doc
// (the form's tooltip). The table is the Studio's copy of the config docs; the server stays the
// judge of validity (run_start answers invalid_argument naming the field path).
//
// Keys are JSON paths relative to their scope: run fields ("steps") sit at the top of the
// config, policy fields ("learning_rate", "loss_config.beta", "dataset.name") inside each
// element of "policies".

#include <QString>
#include <QStringList>
#include <QVariant>

#include <vector>

namespace spindle::ui {

enum class FieldScope { run, policy };
enum class FieldKind {
  integer,      // qint64
  number,       // double
  text,         // QString
  choice,       // QString, one of `choices`
  flag,         // bool
  text_list,    // QStringList (the form edits it one item per line or comma separated)
  json,         // QString holding a JSON value (the reward spec)
};

struct RunConfigField {
  FieldScope scope;
  QString key;        // JSON path in its scope
  QString label;      // form label
  FieldKind kind;
  QVariant initial;   // the default the form starts with
  QString doc;        // tooltip: what the field means, its unit and range
  QStringList choices;  // choice fields only
  // Emitted into the config only when it differs from "empty" (text fields "", lists [],
  // heldout_size -1): optional dataset fields the server fills with the dataset's defaults.
  bool omit_when_empty = false;
};

// Every field, in form order (run fields first).
const std::vector<RunConfigField>& runConfigFields();
// The field for `key` in `scope`, or nullptr.
const RunConfigField* findRunConfigField(FieldScope scope, const QString& key);

// The datasets the config parser accepts (config.cpp: validate_run_config).
QStringList builtinDatasetNames();

}  // namespace spindle::ui
