#pragma once
// The Studio's main window: a start page (connecting, or offering to start the local daemon and
// showing its start-up), then one tab per view (Catalog, Policy, Playground, Rewards, Runs,
// Residency; Ctrl+1..6), a live status bar (endpoint, tenant, server version, slots in use,
// tokens/s, the last request error), dark and light themes, and the screenshot mode.
//
// Connection rule on start (StudioOptions): an explicit endpoint (+ token, CURVE keys) is used as
// given; otherwise the local daemon of the data dir (local_daemon.h). When it does not answer,
// the start page offers "Start spindled" (or starts it at once with start_daemon) and connects
// when its ready line appears.

#include <QMainWindow>
#include <QPointer>
#include <QVector>

#include "spindle/protocol/client.h"

class QAction;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QStackedWidget;
class QTabWidget;

namespace spindle::ui {

class Connection;
class DaemonLauncher;
class StudioView;
class CatalogView;
class PolicyView;
class PlaygroundView;
class RewardDesignerView;
class RunsView;
class ResidencyView;

struct StudioOptions {
  QString data_dir;            // "" = the CLI's rule
  protocol::ClientOptions remote;  // endpoint non-empty = connect there instead of locally
  bool start_daemon = false;   // start the local daemon without asking when none answers
  QStringList daemon_args;     // extra spindled flags (e.g. --model PATH)
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(StudioOptions options, QWidget* parent = nullptr);
  ~MainWindow() override;

  Connection* connection() const { return connection_; }
  const QVector<StudioView*>& views() const { return views_; }
  void showView(int index);
  void setDarkTheme(bool dark);
  bool darkTheme() const { return dark_; }

  // Renders every view to <dir>/<view>.png (each view filled with real data first, see
  // studio_view.h), one after another, waiting at most timeout_ms per view; emits
  // screenshotsDone(failures) at the end (a view that timed out is still grabbed and counted).
  void takeScreenshots(const QString& dir, int timeout_ms = 120000);

 signals:
  void connected();
  void screenshotsDone(int failures, QStringList files);

 private:
  void buildMenus();
  void buildStartPage();
  void buildViews();
  void connectLocal();
  void connectTo(const protocol::ClientOptions& options);
  void startDaemon();
  void onOpened();
  void onOpenFailed(const QString& code, const QString& message);
  void pollStatus();
  void screenshotNext();
  void openConnectionDialog();
  void runEmbeddedDefault();

  StudioOptions options_;
  Connection* connection_;
  DaemonLauncher* launcher_ = nullptr;
  QStackedWidget* stack_;
  QTabWidget* tabs_;
  QVector<StudioView*> views_;
  CatalogView* catalog_ = nullptr;
  PolicyView* policy_ = nullptr;
  PlaygroundView* playground_ = nullptr;
  RewardDesignerView* rewards_ = nullptr;
  RunsView* runs_ = nullptr;
  ResidencyView* residency_ = nullptr;
  // Start page.
  QLabel* start_title_;
  QLabel* start_detail_;
  QPushButton* start_button_;
  QPlainTextEdit* start_log_;
  // Status bar.
  QLabel* sb_endpoint_;
  QLabel* sb_tenant_;
  QLabel* sb_version_;
  QLabel* sb_slots_;
  QLabel* sb_tokens_;
  QLabel* sb_message_;
  QAction* run_default_ = nullptr;
  bool status_in_flight_ = false;
  bool dark_ = true;
  bool local_ = true;
  // Screenshots.
  QString shot_dir_;
  int shot_index_ = -1;
  int shot_timeout_ms_ = 0;
  int shot_failures_ = 0;
  QStringList shot_files_;
  QPointer<QObject> shot_wait_;
};

}  // namespace spindle::ui
