#pragma once
// One view of the Studio (a tab of the main window). A view is a thin widget over its model(s)
// (STYLE.md 16): it binds to a model that holds the state and talks to the Connection; the
// widget only displays and forwards user actions.
//
// Screenshot contract (spindle-studio --screenshot DIR): the main window calls
// prepareScreenshot() on each view in turn; the view fills itself with real data from the
// daemon (the first policy, a sample run, ...) and emits readyForScreenshot() once everything
// it will show has arrived (or an error is displayed). The window then grabs it to
// <DIR>/<screenshotName()>.png.

#include <QWidget>

namespace spindle::ui {

class Connection;

class StudioView : public QWidget {
  Q_OBJECT
 public:
  StudioView(Connection* connection, QWidget* parent = nullptr)
      : QWidget(parent), connection_(connection) {}

  virtual QString title() const = 0;           // tab title, e.g. "Catalog"
  virtual QString screenshotName() const = 0;  // file stem, e.g. "catalog"
  virtual void refresh() {}                    // reload from the daemon (F5)
  virtual void prepareScreenshot() { emit readyForScreenshot(); }

 signals:
  void readyForScreenshot();
  void statusMessage(QString message);       // one line for the status bar
  void openPolicy(QString address);          // show this policy in the Policy view
  void openInPlayground(QString address);    // add a Playground column for this address
  void useInRewardDesigner(QString address); // reward designer: test against this address
  void openRun(QString run_id);              // show this run in the Runs view

 protected:
  Connection* connection_;
};

}  // namespace spindle::ui
