#pragma once
// One term of the reward designer's spec (private to reward_designer_view.cpp): name, plugin,
// weight and the config form rendered from the term's SchemaForm descriptors. Editors by type:
// string QLineEdit, number QDoubleSpinBox, integer QSpinBox (min/max from the schema), boolean
// QCheckBox, enum QComboBox, array of strings a comma-separated QLineEdit, other types raw
// JSON; an optional field with no known default has a "set" box (unset = the plugin's
// default). Required fields are marked with *. A field the server named in its validation
// message gets a red frame and the message below it and as its tooltip; keys that are not form
// fields go to the "extra (JSON)" line.
//
// Binding: every edit calls the RewardDesignerModel setter; sync() (on termChanged) updates
// editors that do not have focus and the error marks. The field editors are rebuilt only when
// the term's field set changes (another plugin).

#include <QWidget>

#include <map>
#include <string>
#include <vector>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;

namespace spindle::ui {

class RewardDesignerModel;
struct SchemaField;

class RewardTermEditor : public QWidget {
  Q_OBJECT
 public:
  RewardTermEditor(RewardDesignerModel* model, int index, QWidget* parent = nullptr);
  void sync();

  // For tests: the editor of `field` (kExtrasField for the extras line), and its error text.
  QWidget* fieldEditor(const std::string& field) const;
  QString fieldError(const std::string& field) const;

 private:
  struct FieldRow {
    QWidget* editor = nullptr;
    QCheckBox* set = nullptr;   // optional fields with no known default
    QLabel* error = nullptr;
  };
  void rebuildFields();
  QWidget* makeEditor(const SchemaField& f);
  void showValue(const SchemaField& f, FieldRow& row);
  void markError(FieldRow& row, const QString& message);

  RewardDesignerModel* model_;
  int index_;
  QLineEdit* name_ = nullptr;
  QComboBox* plugin_ = nullptr;
  QDoubleSpinBox* weight_ = nullptr;
  QLabel* description_ = nullptr;
  QLabel* term_error_ = nullptr;
  QFormLayout* form_ = nullptr;
  std::vector<std::string> shown_fields_;
  std::map<std::string, FieldRow> rows_;
  bool syncing_ = false;
};

}  // namespace spindle::ui
