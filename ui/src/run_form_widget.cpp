#include "run_form_widget.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QVBoxLayout>

#include "spindle/ui/run_config_form.h"

namespace spindle::ui {

namespace {

const char* kErrorFrame = "border: 2px solid #d32f2f; border-radius: 2px;";

QString as_text(const RunConfigField& f, const QVariant& v) {
  if (f.kind == FieldKind::text_list)
    return v.toStringList().join(f.key == "targets" ? ", " : "\n");
  if (f.kind == FieldKind::number) return QString::number(v.toDouble(), 'g', 8);
  if (f.kind == FieldKind::json) {
    const QJsonDocument doc = QJsonDocument::fromJson(v.toString().toUtf8());
    if (!doc.isNull()) return QString::fromUtf8(doc.toJson(QJsonDocument::Indented)).trimmed();
  }
  return v.toString();
}

}  // namespace

RunFormWidget::RunFormWidget(RunConfigForm* form, QWidget* parent)
    : QWidget(parent), form_(form) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  auto* inner = new QWidget(scroll);
  auto* column = new QVBoxLayout(inner);

  auto* run_group = new QGroupBox(tr("Run"), inner);
  run_rows_ = new QFormLayout(run_group);
  run_rows_->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  for (const RunConfigField& f : runConfigFields())
    if (f.scope == FieldScope::run) run_rows_->addRow(f.label, makeEditor(f, f.key));
  resume_ = new QCheckBox(tr("Resume existing policies"), run_group);
  resume_->setToolTip(tr("run_start's resume flag: a policy that already has revisions (a fork "
                         "of a run) continues from its head with its optimizer state; without "
                         "it such a policy is refused (already_exists)."));
  connect(resume_, &QCheckBox::toggled, form_, &RunConfigForm::setResume);
  run_rows_->addRow(QString(), resume_);
  column->addWidget(run_group);

  policy_box_ = new QVBoxLayout();
  column->addLayout(policy_box_);
  auto* add = new QPushButton(tr("Add policy"), inner);
  add->setToolTip(tr("Train another policy in the same run (same base, its own adapter)."));
  connect(add, &QPushButton::clicked, form_, [this] { form_->addPolicy(); });
  column->addWidget(add);
  column->addStretch(1);
  scroll->setWidget(inner);
  outer->addWidget(scroll, 1);

  banner_ = new QLabel(this);
  banner_->setWordWrap(true);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  banner_->setStyleSheet("color: #d32f2f;");
  banner_->hide();
  outer->addWidget(banner_);
  launch_ = new QPushButton(tr("Launch run  (Ctrl+R)"), this);
  connect(launch_, &QPushButton::clicked, form_, &RunConfigForm::launch);
  connect(form_, &RunConfigForm::launchingChanged, launch_,
          [this](bool busy) { launch_->setEnabled(!busy); });
  outer->addWidget(launch_);

  connect(form_, &RunConfigForm::policiesChanged, this, &RunFormWidget::rebuildPolicies);
  connect(form_, &RunConfigForm::valueChanged, this, &RunFormWidget::load);
  connect(form_, &RunConfigForm::errorsChanged, this, &RunFormWidget::showErrors);
  connect(form_, &RunConfigForm::datasetNamesChanged, this, &RunFormWidget::rebuildPolicies);
  rebuildPolicies();
}

QWidget* RunFormWidget::makeEditor(const RunConfigField& f, const QString& path) {
  QWidget* w = nullptr;
  switch (f.kind) {
    case FieldKind::choice: {
      auto* c = new QComboBox(this);
      c->addItems(f.key == "dataset.name" ? form_->datasetNames() : f.choices);
      connect(c, &QComboBox::currentTextChanged, form_,
              [this, path](const QString& t) { form_->setValue(path, t); });
      w = c;
      break;
    }
    case FieldKind::flag: {
      auto* c = new QCheckBox(this);
      connect(c, &QCheckBox::toggled, form_, [this, path](bool on) { form_->setValue(path, on); });
      w = c;
      break;
    }
    case FieldKind::json:
    case FieldKind::text_list:
      if (f.key != "targets") {
        auto* e = new QPlainTextEdit(this);
        e->setTabChangesFocus(true);
        e->setMinimumHeight(f.kind == FieldKind::json ? 90 : 60);
        e->setMaximumHeight(140);
        if (f.kind == FieldKind::json) e->setFont(QFont("monospace"));
        connect(e, &QPlainTextEdit::textChanged, form_, [this, path, e] {
          if (e->hasFocus()) form_->setValue(path, e->toPlainText());
        });
        w = e;
        break;
      }
      [[fallthrough]];
    default: {
      auto* e = new QLineEdit(this);
      if (f.key == "targets") e->setPlaceholderText("q, k, v, o, gate, up, down");
      connect(e, &QLineEdit::editingFinished, form_,
              [this, path, e] { form_->setValue(path, e->text()); });
      w = e;
    }
  }
  w->setObjectName(path);
  editors_.insert(path, w);
  load(path);
  return w;
}

void RunFormWidget::load(const QString& path) {
  QWidget* w = editors_.value(path);
  const RunConfigField* f = form_->field(path);
  if (!w || !f) {
    if (path == "resume") resume_->setChecked(form_->resume());
    return;
  }
  const QVariant v = form_->value(path);
  const QSignalBlocker block(w);
  if (auto* c = qobject_cast<QComboBox*>(w)) {
    if (c->findText(v.toString()) < 0) c->addItem(v.toString());
    c->setCurrentText(v.toString());
  } else if (auto* c = qobject_cast<QCheckBox*>(w)) {
    c->setChecked(v.toBool());
  } else if (auto* e = qobject_cast<QPlainTextEdit*>(w)) {
    if (!e->hasFocus()) e->setPlainText(as_text(*f, v));
  } else if (auto* e = qobject_cast<QLineEdit*>(w)) {
    e->setText(as_text(*f, v));
  }
  w->setToolTip(form_->toolTip(path));
  if (f->key == "dataset.name") {
    const int i = path.mid(9).section(']', 0, 0).toInt();
    updateDatasetRows(i);
  }
}

void RunFormWidget::rebuildPolicies() {
  for (auto it = editors_.begin(); it != editors_.end();) {
    if (it.key().startsWith("policies[")) it = editors_.erase(it);
    else ++it;
  }
  while (QLayoutItem* item = policy_box_->takeAt(0)) {
    if (QWidget* w = item->widget()) {
      w->hide();
      w->deleteLater();  // a Remove button of it may be the sender of this rebuild
    }
    delete item;
  }
  policy_rows_.clear();
  for (int i = 0; i < form_->policyCount(); ++i) {
    auto* box = new QGroupBox(tr("Policy %1").arg(i + 1), this);
    auto* rows = new QFormLayout(box);
    rows->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    policy_rows_.insert(i, rows);
    for (const RunConfigField& f : runConfigFields()) {
      if (f.scope != FieldScope::policy) continue;
      auto* label = new QLabel(f.label, box);
      label->setToolTip(f.doc);
      rows->addRow(label, makeEditor(f, RunConfigForm::policyPath(i, f.key)));
    }
    if (form_->policyCount() > 1) {
      auto* remove = new QPushButton(tr("Remove policy %1").arg(i + 1), box);
      connect(remove, &QPushButton::clicked, form_, [this, i] { form_->removePolicy(i); });
      rows->addRow(QString(), remove);
    }
    policy_box_->addWidget(box);
    updateDatasetRows(i);
  }
  showErrors();
}

void RunFormWidget::updateDatasetRows(int policy) {
  QFormLayout* rows = policy_rows_.value(policy);
  if (!rows) return;
  const QString d = form_->value(RunConfigForm::policyPath(policy, "dataset.name")).toString();
  auto show = [&](const char* key, bool on) {
    if (QWidget* w = editors_.value(RunConfigForm::policyPath(policy, key))) rows->setRowVisible(w, on);
  };
  show("dataset.path", d == "jsonl");
  show("dataset.reference_field", d == "jsonl");
  show("dataset.prompts", d == "inline");
}

void RunFormWidget::showErrors() {
  for (auto it = editors_.cbegin(); it != editors_.cend(); ++it) {
    const bool bad = !form_->fieldError(it.key()).isEmpty();
    it.value()->setStyleSheet(bad ? kErrorFrame : "");
    it.value()->setProperty("fieldError", bad);
    it.value()->setToolTip(form_->toolTip(it.key()));
  }
  banner_->setText(form_->bannerError());
  banner_->setVisible(!form_->bannerError().isEmpty());
}

}  // namespace spindle::ui
