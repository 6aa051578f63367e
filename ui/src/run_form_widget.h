#pragma once
// The launch form's widget: rows generated from runConfigFields(), each editor bound to one
// path of a RunConfigForm (the model holds every value; this only binds). A field with an
// error (RunConfigForm::fieldError) gets a red frame and the server's message in its tooltip;
// the form's banner shows "code: message" of the failed launch.

#include <QHash>
#include <QWidget>

class QCheckBox;
class QFormLayout;
class QLabel;
class QPushButton;
class QVBoxLayout;

namespace spindle::ui {

class RunConfigForm;
struct RunConfigField;

class RunFormWidget : public QWidget {
  Q_OBJECT
 public:
  explicit RunFormWidget(RunConfigForm* form, QWidget* parent = nullptr);

  QWidget* editor(const QString& path) const { return editors_.value(path); }
  QPushButton* launchButton() const { return launch_; }
  QLabel* banner() const { return banner_; }

 private:
  void rebuildPolicies();
  QWidget* makeEditor(const RunConfigField& f, const QString& path);
  void load(const QString& path);  // model -> editor
  void showErrors();
  void updateDatasetRows(int policy);

  RunConfigForm* form_;
  QFormLayout* run_rows_ = nullptr;
  QVBoxLayout* policy_box_ = nullptr;
  QCheckBox* resume_ = nullptr;
  QPushButton* launch_ = nullptr;
  QLabel* banner_ = nullptr;
  QHash<QString, QWidget*> editors_;  // path -> editor
  QHash<int, QFormLayout*> policy_rows_;
};

}  // namespace spindle::ui
