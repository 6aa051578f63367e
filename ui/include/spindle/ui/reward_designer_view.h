#pragma once
// The reward designer view (issue 14, view 4): a thin widget over RewardDesignerModel.
// Left: the daemon's plugins (Rescan: refresh(), F5 in the main window; New plugin…
// Ctrl+Shift+P) and the spec, term by term
// (reward_term_editor.h), with Add term (Ctrl+T), Save spec (Ctrl+S) and Load spec (Ctrl+O).
// Right: the data rows (a daemon dataset or a JSONL file; editable), the test settings
// (address, samples, sampling, bins), Run test (Ctrl+Return) and Validate (Ctrl+Shift+V), and
// the results: a histogram per term and of the total (Qt Charts), the scored samples table, and
// the plugin build log. Errors show inline above the results (the server's code and message)
// and on the field they name.
//
// On construction the view restores the autosave (a crash loses nothing), then lists plugins
// and datasets. setAddress() (the main window's "use in reward designer") sets the address.
//
// Screenshot: prepareScreenshot() builds a two-term spec (keywords, length) when the spec is
// empty, takes rows from the first available dataset (or a built-in prompt), runs the test
// against the address (the served base when none is set) and signals readyForScreenshot once
// the reply (or its error) is shown.

#include <QList>

#include "spindle/ui/studio_view.h"

class QAction;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTableView;
class QVBoxLayout;

namespace spindle::ui {

class PluginBuilder;
class RewardDesignerModel;
class RewardHistogram;
class RewardTermEditor;

class RewardDesignerView : public StudioView {
  Q_OBJECT
 public:
  explicit RewardDesignerView(Connection* connection, QWidget* parent = nullptr);
  // For tests: a view over a model whose autosave path was set before restoring.
  RewardDesignerView(Connection* connection, RewardDesignerModel* model, QWidget* parent = nullptr);

  QString title() const override { return tr("Rewards"); }
  QString screenshotName() const override { return QStringLiteral("rewards"); }
  void refresh() override;
  void prepareScreenshot() override;

  RewardDesignerModel* model() const { return model_; }
  QList<RewardTermEditor*> termEditors() const { return editors_; }
  QList<RewardHistogram*> histograms() const { return histograms_; }
  QString errorText() const;
  QAction* runAction() const { return run_; }

 public slots:
  void setAddress(const QString& address);

 private:
  void build();
  void rebuildTerms();
  void rebuildPlugins();
  void rebuildDatasets();
  void showOutcome();
  void pushSettings();
  void pullSettings();
  void newPlugin();
  void buildPlugin();
  void installPlugin(const QString& library);
  void finishScreenshot();

  RewardDesignerModel* model_;
  PluginBuilder* builder_;
  QListWidget* plugins_ = nullptr;
  QVBoxLayout* terms_layout_ = nullptr;
  QList<RewardTermEditor*> editors_;
  QComboBox* datasets_ = nullptr;
  QTableView* rows_view_ = nullptr;
  QLineEdit* address_ = nullptr;
  QSpinBox* num_samples_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QSpinBox* bins_ = nullptr;
  QLabel* error_ = nullptr;
  QLabel* summary_ = nullptr;
  QTabWidget* results_ = nullptr;
  QWidget* charts_ = nullptr;
  QList<RewardHistogram*> histograms_;
  QTableView* samples_view_ = nullptr;
  QPlainTextEdit* build_log_ = nullptr;
  QPushButton* build_button_ = nullptr;
  QString plugin_dir_, plugin_name_;
  QAction* run_ = nullptr;
  bool screenshot_pending_ = false;
};

}  // namespace spindle::ui
