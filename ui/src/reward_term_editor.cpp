#include "reward_term_editor.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include <cfloat>
#include <climits>

#include "spindle/ui/reward_designer_model.h"

namespace spindle::ui {

using nlohmann::json;

namespace {

const QColor kErrorColor(0xd0, 0x30, 0x30);

QString join_strings(const json& v) {
  QStringList out;
  if (v.is_array()) {
    for (const json& e : v) out << QString::fromStdString(e.is_string() ? e.get<std::string>() : e.dump());
  }
  return out.join(", ");
}

}  // namespace

RewardTermEditor::RewardTermEditor(RewardDesignerModel* model, int index, QWidget* parent)
    : QWidget(parent), model_(model), index_(index) {
  auto* top = new QVBoxLayout(this);
  top->setContentsMargins(6, 6, 6, 6);
  auto* head = new QHBoxLayout;
  name_ = new QLineEdit(this);
  name_->setPlaceholderText(tr("term name"));
  name_->setToolTip(tr("The term's name (the histogram's and the table's label)"));
  plugin_ = new QComboBox(this);
  plugin_->setToolTip(tr("The reward plugin that scores this term"));
  weight_ = new QDoubleSpinBox(this);
  weight_->setRange(-1000, 1000);
  weight_->setDecimals(3);
  weight_->setSingleStep(0.1);
  weight_->setPrefix(tr("× "));
  weight_->setToolTip(tr("weight: the total is Σ weight × score"));
  auto* remove = new QToolButton(this);
  remove->setText(tr("✕"));
  remove->setToolTip(tr("Remove this term"));
  head->addWidget(new QLabel(tr("name"), this));
  head->addWidget(name_, 1);
  head->addWidget(remove);
  top->addLayout(head);
  auto* head2 = new QHBoxLayout;
  head2->addWidget(new QLabel(tr("plugin"), this));
  head2->addWidget(plugin_, 2);
  head2->addWidget(new QLabel(tr("weight"), this));
  head2->addWidget(weight_, 1);
  top->addLayout(head2);
  description_ = new QLabel(this);
  description_->setWordWrap(true);
  description_->setForegroundRole(QPalette::PlaceholderText);
  top->addWidget(description_);
  form_ = new QFormLayout;
  form_->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  top->addLayout(form_);
  term_error_ = new QLabel(this);
  term_error_->setWordWrap(true);
  QPalette pal = term_error_->palette();
  pal.setColor(QPalette::WindowText, kErrorColor);
  term_error_->setPalette(pal);
  top->addWidget(term_error_);

  connect(name_, &QLineEdit::textEdited, this,
          [this](const QString& t) { model_->setTermName(index_, t); });
  connect(plugin_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    if (!syncing_) model_->setTermPlugin(index_, t);
  });
  connect(weight_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this](double w) {
    if (!syncing_) model_->setTermWeight(index_, w);
  });
  connect(remove, &QToolButton::clicked, this, [this] { model_->removeTerm(index_); });
  sync();
}

QWidget* RewardTermEditor::makeEditor(const SchemaField& f) {
  const std::string name = f.name;
  switch (f.type) {
    case SchemaField::Type::boolean: {
      auto* w = new QCheckBox(this);
      connect(w, &QCheckBox::toggled, this, [this, name](bool on) {
        if (!syncing_) model_->setTermValue(index_, name, json(on));
      });
      return w;
    }
    case SchemaField::Type::enumeration: {
      auto* w = new QComboBox(this);
      for (const std::string& v : f.enum_values) w->addItem(QString::fromStdString(v));
      connect(w, &QComboBox::currentTextChanged, this, [this, name](const QString& t) {
        if (!syncing_) model_->setTermValue(index_, name, json(t.toStdString()));
      });
      return w;
    }
    case SchemaField::Type::integer: {
      auto* w = new QSpinBox(this);
      w->setRange(f.minimum ? int(std::max(*f.minimum, double(INT_MIN))) : INT_MIN,
                  f.maximum ? int(std::min(*f.maximum, double(INT_MAX))) : INT_MAX);
      connect(w, qOverload<int>(&QSpinBox::valueChanged), this, [this, name](int v) {
        if (!syncing_) model_->setTermValue(index_, name, json(v));
      });
      return w;
    }
    case SchemaField::Type::number: {
      auto* w = new QDoubleSpinBox(this);
      w->setDecimals(4);
      w->setRange(f.minimum.value_or(-1e9), f.maximum.value_or(1e9));
      connect(w, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this, name](double v) {
        if (!syncing_) model_->setTermValue(index_, name, json(v));
      });
      return w;
    }
    case SchemaField::Type::string_array:
    case SchemaField::Type::string:
    case SchemaField::Type::json: {
      auto* w = new QLineEdit(this);
      const auto type = f.type;
      w->setPlaceholderText(type == SchemaField::Type::string_array ? tr("comma-separated")
                            : type == SchemaField::Type::json       ? tr("JSON value")
                                                                    : QString());
      connect(w, &QLineEdit::textEdited, this, [this, name, type](const QString& t) {
        if (syncing_) return;
        if (type == SchemaField::Type::string) {
          model_->setTermValue(index_, name, json(t.toStdString()));
        } else if (type == SchemaField::Type::string_array) {
          json a = json::array();
          for (const QString& s : t.split(',', Qt::SkipEmptyParts)) {
            if (!s.trimmed().isEmpty()) a.push_back(s.trimmed().toStdString());
          }
          model_->setTermValue(index_, name, a);
        } else {
          const json v = json::parse(t.toStdString(), nullptr, false);
          if (!v.is_discarded()) model_->setTermValue(index_, name, v);
        }
      });
      return w;
    }
  }
  return nullptr;
}

void RewardTermEditor::rebuildFields() {
  while (form_->rowCount() > 0) form_->removeRow(0);
  rows_.clear();
  shown_fields_.clear();
  const SchemaForm& form = model_->term(index_).form;
  for (const SchemaField& f : form.fields()) {
    FieldRow row;
    row.editor = makeEditor(f);
    row.editor->setToolTip(QString::fromStdString(f.description));
    auto* cell = new QWidget(this);
    auto* v = new QVBoxLayout(cell);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(1);
    auto* h = new QHBoxLayout;
    h->setContentsMargins(0, 0, 0, 0);
    if (!f.required && !f.default_value) {
      row.set = new QCheckBox(tr("set"), cell);
      row.set->setToolTip(tr("Unset: the plugin's default (%1)")
                              .arg(f.description.empty() ? tr("see the plugin")
                                                         : QString::fromStdString(f.description)));
      const std::string name = f.name;
      connect(row.set, &QCheckBox::toggled, this, [this, name](bool on) {
        if (syncing_) return;
        if (!on) return model_->clearTermValue(index_, name);
        // Setting it takes the editor's current value.
        QWidget* e = rows_[name].editor;
        if (auto* s = qobject_cast<QSpinBox*>(e)) model_->setTermValue(index_, name, s->value());
        else if (auto* d = qobject_cast<QDoubleSpinBox*>(e)) model_->setTermValue(index_, name, d->value());
        else if (auto* c = qobject_cast<QCheckBox*>(e)) model_->setTermValue(index_, name, c->isChecked());
        else if (auto* b = qobject_cast<QComboBox*>(e)) model_->setTermValue(index_, name, b->currentText().toStdString());
      });
      h->addWidget(row.set);
    }
    h->addWidget(row.editor, 1);
    v->addLayout(h);
    row.error = new QLabel(cell);
    row.error->setWordWrap(true);
    QPalette pal = row.error->palette();
    pal.setColor(QPalette::WindowText, kErrorColor);
    row.error->setPalette(pal);
    row.error->hide();
    v->addWidget(row.error);
    QString label = QString::fromStdString(f.name);
    if (f.required) label += " *";
    form_->addRow(label, cell);
    shown_fields_.push_back(f.name);
    rows_[f.name] = row;
  }
  // Keys the schema does not describe, as one JSON object.
  FieldRow extras;
  auto* line = new QLineEdit(this);
  line->setPlaceholderText(form.allowsAdditional() ? tr("{} extra config keys")
                                                   : tr("{} (this plugin allows no other keys)"));
  connect(line, &QLineEdit::textEdited, this, [this](const QString& t) {
    const json v = json::parse(t.trimmed().isEmpty() ? std::string("{}") : t.toStdString(),
                               nullptr, false);
    if (v.is_object()) model_->setTermExtras(index_, v);
  });
  extras.editor = line;
  auto* cell = new QWidget(this);
  auto* v = new QVBoxLayout(cell);
  v->setContentsMargins(0, 0, 0, 0);
  v->addWidget(line);
  extras.error = new QLabel(cell);
  extras.error->setWordWrap(true);
  QPalette pal = extras.error->palette();
  pal.setColor(QPalette::WindowText, kErrorColor);
  extras.error->setPalette(pal);
  extras.error->hide();
  v->addWidget(extras.error);
  form_->addRow(tr("extra (JSON)"), cell);
  rows_[SchemaForm::kExtrasField] = extras;
}

void RewardTermEditor::showValue(const SchemaField& f, FieldRow& row) {
  const SchemaForm& form = model_->term(index_).form;
  const bool set = form.isSet(f.name);
  const json v = form.value(f.name);
  if (row.set) {
    row.set->setChecked(set);
    row.editor->setEnabled(set);
  }
  if (row.editor->hasFocus()) return;
  if (auto* s = qobject_cast<QSpinBox*>(row.editor)) {
    if (v.is_number()) s->setValue(v.get<int>());
  } else if (auto* d = qobject_cast<QDoubleSpinBox*>(row.editor)) {
    if (v.is_number()) d->setValue(v.get<double>());
  } else if (auto* c = qobject_cast<QCheckBox*>(row.editor)) {
    c->setChecked(v.is_boolean() && v.get<bool>());
  } else if (auto* b = qobject_cast<QComboBox*>(row.editor)) {
    if (v.is_string()) b->setCurrentText(QString::fromStdString(v.get<std::string>()));
  } else if (auto* l = qobject_cast<QLineEdit*>(row.editor)) {
    const QString text = f.type == SchemaField::Type::string_array ? join_strings(v)
                         : v.is_string() ? QString::fromStdString(v.get<std::string>())
                         : v.is_null()   ? QString()
                                         : QString::fromStdString(v.dump());
    l->setText(text);
  }
}

void RewardTermEditor::markError(FieldRow& row, const QString& message) {
  row.error->setText(message);
  row.error->setVisible(!message.isEmpty());
  // The red frame: a style sheet on the editor only (its text colours stay the palette's).
  row.editor->setStyleSheet(message.isEmpty() ? QString()
                                              : QStringLiteral("border: 2px solid #d03030;"));
  row.editor->setProperty("spindleError", message);
  if (!message.isEmpty()) row.editor->setToolTip(message);
}

void RewardTermEditor::sync() {
  if (index_ < 0 || index_ >= model_->termCount()) return;
  syncing_ = true;
  const RewardDesignerTerm& t = model_->term(index_);
  if (!name_->hasFocus()) name_->setText(t.name);
  QStringList names;
  for (const auto& p : model_->plugins()) names << QString::fromStdString(p.name);
  if (!names.contains(t.plugin)) names << t.plugin;
  QStringList current;
  for (int i = 0; i < plugin_->count(); ++i) current << plugin_->itemText(i);
  if (current != names) {
    plugin_->clear();
    plugin_->addItems(names);
  }
  plugin_->setCurrentText(t.plugin);
  weight_->setValue(t.weight);
  const auto* info = model_->plugin(t.plugin);
  description_->setText(info ? QString::fromStdString(info->description)
                             : tr("plugin '%1' is not loaded by the daemon").arg(t.plugin));
  std::vector<std::string> fields;
  for (const SchemaField& f : t.form.fields()) fields.push_back(f.name);
  if (fields != shown_fields_ || rows_.empty()) rebuildFields();
  for (const SchemaField& f : t.form.fields()) {
    FieldRow& row = rows_[f.name];
    showValue(f, row);
    markError(row, QString::fromStdString(t.form.error(f.name)));
  }
  FieldRow& extras = rows_[SchemaForm::kExtrasField];
  if (auto* l = qobject_cast<QLineEdit*>(extras.editor); l && !l->hasFocus()) {
    l->setText(t.form.extras().empty() ? QString() : QString::fromStdString(t.form.extras().dump()));
  }
  markError(extras, QString::fromStdString(t.form.error(SchemaForm::kExtrasField)));
  term_error_->setText(t.error);
  term_error_->setVisible(!t.error.isEmpty());
  syncing_ = false;
}

QWidget* RewardTermEditor::fieldEditor(const std::string& field) const {
  auto it = rows_.find(field);
  return it == rows_.end() ? nullptr : it->second.editor;
}

QString RewardTermEditor::fieldError(const std::string& field) const {
  auto it = rows_.find(field);
  return it == rows_.end() ? QString() : it->second.error->text();
}

}  // namespace spindle::ui
