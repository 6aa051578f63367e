#pragma once
// The Catalog view (issue 14, view 1): a filter bar, a banner, an action toolbar and a table
// bound to CatalogModel. A thin widget (STYLE.md 16): every state and request lives in the
// model; this binds widgets to it and turns user input into model calls.
//
// Keys: Ctrl+F search box (Enter runs the search; an empty search shows the list again),
// Ctrl+T tag, Ctrl+Shift+T untag, Ctrl+K fork, Ctrl+Shift+R rollback, Del delete (the banner
// offers "Undo" for the model's undo window), Ctrl+I import PEFT, Ctrl+E export PEFT,
// F5 refresh, Enter / double-click opens the current row (openPolicy(address)). The context
// menu adds "Open in playground" (openInPlayground(address@latest)).
// Scrolling: every scroll asks the model to have the last visible row plus a page loaded
// (CatalogModel::ensureLoaded), so paging runs ahead of the viewport and never blocks.
// Errors of the model's requests show in the banner with the server's code; dialogs are only
// for entering names, tags and folders.

#include "spindle/ui/studio_view.h"

class QAction;
class QCheckBox;
class QDateEdit;
class QLineEdit;
class QTableView;
class QToolBar;

namespace spindle::ui {

class CatalogModel;
class ViewBanner;

class CatalogView : public StudioView {
  Q_OBJECT
 public:
  explicit CatalogView(Connection* connection, QWidget* parent = nullptr);

  QString title() const override { return tr("Catalog"); }
  QString screenshotName() const override { return QStringLiteral("catalog"); }
  void refresh() override;
  void prepareScreenshot() override;

  CatalogModel* model() const { return model_; }
  QTableView* table() const { return table_; }
  ViewBanner* banner() const { return banner_; }
  QList<int> selectedRows() const;  // model rows, ascending

 private:
  void buildFilterBar(QWidget* bar);
  void buildActions();
  void applyFilter();
  void prefetch();
  void openCurrent();
  void showHeaderMenu(const QPoint& at);
  void showContextMenu(const QPoint& at);
  // The actions that ask for input (dialogs for names, tags and folders only).
  void askTag(bool remove);
  void askFork();
  void askRollback();
  void deleteSelected();
  void askImport();
  void askExport();

  CatalogModel* model_;
  ViewBanner* banner_;
  QTableView* table_;
  QToolBar* toolbar_;
  QLineEdit *base_, *tag_, *prefix_, *search_;
  QCheckBox* since_on_;
  QDateEdit* since_;
  QAction *tag_action_, *untag_action_, *fork_action_, *rollback_action_, *delete_action_,
      *import_action_, *export_action_, *refresh_action_;
};

}  // namespace spindle::ui
