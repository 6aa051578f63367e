#pragma once
// The Playground view (issue 14, view 3): a thin widget over PlaygroundModel. A prompt box on
// top, "Run" (Ctrl+Return) and "Add column" (Ctrl+Shift+N), and 2..4 columns side by side in a
// splitter (playground_column.h). The view opens with two columns on the served base (seeds 0
// and 1) once `capabilities` names it; addColumn() (the main window's "open in playground")
// adds a column for an address, replacing an empty one first.
//
// Screenshot: prepareScreenshot() fills a short prompt, runs every column and signals
// readyForScreenshot once all columns are finished (or failed, the error shown inline).

#include <QList>

#include "spindle/ui/studio_view.h"

class QAction;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSplitter;

namespace spindle::ui {

class PlaygroundModel;
class PlaygroundColumnWidget;

class PlaygroundView : public StudioView {
  Q_OBJECT
 public:
  explicit PlaygroundView(Connection* connection, QWidget* parent = nullptr);

  QString title() const override { return tr("Playground"); }
  QString screenshotName() const override { return QStringLiteral("playground"); }
  void refresh() override;
  void prepareScreenshot() override;

  PlaygroundModel* model() const { return model_; }
  QList<PlaygroundColumnWidget*> columnWidgets() const { return columns_; }
  QAction* runAction() const { return run_; }
  void setPrompt(const QString& prompt);

 public slots:
  void addColumn(const QString& address);

 private:
  void rebuildColumns();
  void onBase(const QString& base_id);

  PlaygroundModel* model_;
  QPlainTextEdit* prompt_ = nullptr;
  QLabel* prompt_error_ = nullptr;
  QPushButton* run_button_ = nullptr;
  QPushButton* add_button_ = nullptr;
  QSplitter* splitter_ = nullptr;
  QAction* run_ = nullptr;
  QAction* add_ = nullptr;
  QList<PlaygroundColumnWidget*> columns_;
  bool screenshot_pending_ = false;
};

}  // namespace spindle::ui
