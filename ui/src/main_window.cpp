#include "spindle/ui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QDateTime>
#include <QDir>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

#include "spindle/ui/catalog_view.h"
#include "spindle/ui/connection.h"
#include "spindle/ui/connection_dialog.h"
#include "spindle/ui/local_daemon.h"
#include "spindle/ui/playground_view.h"
#include "spindle/ui/policy_view.h"
#include "spindle/ui/residency_view.h"
#include "spindle/ui/reward_designer_model.h"
#include "spindle/ui/reward_designer_view.h"
#include "spindle/ui/run_config_form.h"
#include "spindle/ui/runs_view.h"
#include "spindle/ui/theme.h"

namespace spindle::ui {

using namespace protocol;

MainWindow::MainWindow(StudioOptions options, QWidget* parent)
    : QMainWindow(parent), options_(std::move(options)), connection_(new Connection(this)) {
  setWindowTitle("Spindle Studio");
  resize(1400, 900);
  sb_endpoint_ = new QLabel(this);
  sb_tenant_ = new QLabel(this);
  sb_version_ = new QLabel(this);
  sb_slots_ = new QLabel(this);
  sb_tokens_ = new QLabel(this);
  sb_message_ = new QLabel(this);
  statusBar()->addWidget(sb_message_, 1);
  for (QLabel* l : {sb_endpoint_, sb_tenant_, sb_version_, sb_slots_, sb_tokens_})
    statusBar()->addPermanentWidget(l);
  sb_endpoint_->setText("not connected");
  stack_ = new QStackedWidget(this);
  setCentralWidget(stack_);
  buildStartPage();
  tabs_ = new QTabWidget(this);
  tabs_->setDocumentMode(true);
  stack_->addWidget(tabs_);
  buildViews();
  buildMenus();


  connect(connection_, &Connection::opened, this, &MainWindow::onOpened);
  connect(connection_, &Connection::openFailed, this, &MainWindow::onOpenFailed);
  connect(connection_, &Connection::requestFailed, this,
          [this](QString op, QString code, QString message) {
            sb_message_->setText(QStringLiteral("%1: %2: %3").arg(op, code, message.left(160)));
          });
  auto* poll = new QTimer(this);
  connect(poll, &QTimer::timeout, this, &MainWindow::pollStatus);
  poll->start(1000);

  QSettings s;
  setDarkTheme(s.value("theme/dark", true).toBool());
  if (!options_.remote.endpoint.empty()) {
    local_ = false;
    connectTo(options_.remote);
  } else {
    connectLocal();
  }
}

MainWindow::~MainWindow() = default;

void MainWindow::buildStartPage() {
  auto* page = new QWidget(this);
  auto* layout = new QVBoxLayout(page);
  layout->setContentsMargins(48, 48, 48, 48);
  start_title_ = new QLabel("Connecting to spindled...", page);
  QFont f = start_title_->font();
  f.setPointSizeF(f.pointSizeF() * 1.6);
  f.setBold(true);
  start_title_->setFont(f);
  start_detail_ = new QLabel(page);
  start_detail_->setWordWrap(true);
  start_detail_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  start_button_ = new QPushButton("Start spindled", page);
  start_button_->setVisible(false);
  start_button_->setShortcut(QKeySequence("Ctrl+Shift+S"));
  connect(start_button_, &QPushButton::clicked, this, &MainWindow::startDaemon);
  auto* remote = new QPushButton("Connect to a remote daemon...", page);
  connect(remote, &QPushButton::clicked, this, &MainWindow::openConnectionDialog);
  start_log_ = new QPlainTextEdit(page);
  start_log_->setReadOnly(true);
  start_log_->setPlaceholderText("spindled's start-up output appears here");
  start_log_->setMaximumBlockCount(5000);
  layout->addWidget(start_title_);
  layout->addWidget(start_detail_);
  auto* row = new QHBoxLayout;
  row->addWidget(start_button_);
  row->addWidget(remote);
  row->addStretch(1);
  layout->addLayout(row);
  layout->addWidget(start_log_, 1);
  stack_->addWidget(page);
}

void MainWindow::buildViews() {
  catalog_ = new CatalogView(connection_, tabs_);
  policy_ = new PolicyView(connection_, tabs_);
  playground_ = new PlaygroundView(connection_, tabs_);
  rewards_ = new RewardDesignerView(connection_, new RewardDesignerModel(connection_, this), tabs_);
  runs_ = new RunsView(connection_, tabs_);
  residency_ = new ResidencyView(connection_, tabs_);
  views_ = {catalog_, policy_, playground_, rewards_, runs_, residency_};
  for (StudioView* v : views_) {
    tabs_->addTab(v, v->title());
    connect(v, &StudioView::statusMessage, this, [this](QString m) {
      sb_message_->setText(m);
    });
    connect(v, &StudioView::openPolicy, this, [this](QString address) {
      policy_->showPolicy(address);
      tabs_->setCurrentWidget(policy_);
    });
    connect(v, &StudioView::openInPlayground, this, [this](QString address) {
      playground_->addColumn(address);
      tabs_->setCurrentWidget(playground_);
    });
    connect(v, &StudioView::useInRewardDesigner, this, [this](QString address) {
      rewards_->setAddress(address);
      tabs_->setCurrentWidget(rewards_);
    });
    connect(v, &StudioView::openRun, this, [this](QString id) {
      runs_->showRun(id);
      tabs_->setCurrentWidget(runs_);
    });
  }
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu("&File");
  QAction* connect_action = file->addAction("&Connect to daemon...", this, &MainWindow::openConnectionDialog);
  connect_action->setShortcut(QKeySequence("Ctrl+Shift+O"));
  file->addAction("Start &local daemon", this, &MainWindow::startDaemon);
  file->addSeparator();
  QAction* quit = file->addAction("&Quit", qApp, &QApplication::quit);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* view = menuBar()->addMenu("&View");
  for (int i = 0; i < views_.size(); ++i) {
    QAction* a = view->addAction(views_[i]->title(), this, [this, i] { showView(i); });
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+%1").arg(i + 1)));
  }
  view->addSeparator();
  QAction* use_spec = view->addAction("Use the designer's reward spec in the run form", this, [this] {
    runs_->setRewardSpec(QString::fromStdString(rewards_->model()->specJson()));
    tabs_->setCurrentWidget(runs_);
  });
  use_spec->setShortcut(QKeySequence("Ctrl+Shift+R"));
  QAction* refresh = view->addAction("&Refresh", this, [this] {
    if (auto* v = qobject_cast<StudioView*>(tabs_->currentWidget())) v->refresh();
  });
  refresh->setShortcut(QKeySequence::Refresh);
  QAction* theme = view->addAction("&Dark theme");
  theme->setCheckable(true);
  theme->setChecked(dark_);
  theme->setShortcut(QKeySequence("Ctrl+Shift+D"));
  connect(theme, &QAction::toggled, this, &MainWindow::setDarkTheme);

  // The embedded default GRPO run (what `spindle grpo` runs), one click from anywhere: the
  // server's own recipe (capabilities.default_run_config_json) into the run form, launched.
  QToolBar* bar = addToolBar("Studio");
  bar->setObjectName("studio-toolbar");
  bar->setMovable(false);
  run_default_ = bar->addAction("\u25B6  Run the embedded GRPO (arith)", this, &MainWindow::runEmbeddedDefault);
  run_default_->setShortcut(QKeySequence("Ctrl+Shift+G"));
  run_default_->setToolTip("Start the daemon's embedded default GRPO run (the recipe `spindle grpo` runs) "
                           "and watch its curves in Runs (Ctrl+Shift+G)");
  run_default_->setEnabled(false);

  QMenu* help = menuBar()->addMenu("&Help");
  help->addAction("&About Spindle Studio", this, [this] {
    QMessageBox::about(this, "Spindle Studio",
                       QStringLiteral("Spindle Studio\nConnected to %1 (%2) as tenant %3")
                           .arg(connection_->endpoint(), connection_->serverVersion(), connection_->tenant()));
  });
}

void MainWindow::runEmbeddedDefault() {
  connection_->post(this, Op::capabilities, Empty{}, [this](const Reply& r) {
    if (!r.ok) return sb_message_->setText("embedded run: " + errorText(r));
    const auto& caps = std::get<CapabilitiesReply>(r.body);
    if (caps.default_run_config_json.empty()) {
      return sb_message_->setText("embedded run: this daemon offers no default run config");
    }
    RunConfigForm* form = runs_->form();
    if (!form->loadConfigJson(QString::fromStdString(caps.default_run_config_json))) {
      return sb_message_->setText("embedded run: the daemon's default config did not load");
    }
    // Each click trains a fresh policy (a name in use with revisions would be refused).
    const QString name = form->value(RunConfigForm::policyPath(0, "name")).toString();
    form->setValue(RunConfigForm::policyPath(0, "name"),
                   name + QDateTime::currentDateTime().toString("-yyyyMMdd-hhmmss"));
    form->setResume(false);
    tabs_->setCurrentWidget(runs_);
    form->launch();
  });
}

void MainWindow::showView(int index) {
  if (index < 0 || index >= views_.size()) return;
  stack_->setCurrentWidget(tabs_);
  tabs_->setCurrentIndex(index);
}

void MainWindow::setDarkTheme(bool dark) {
  dark_ = dark;
  apply_theme(dark);
  if (residency_ && residency_->panel()) residency_->panel()->setDarkStyle(dark);
  QSettings().setValue("theme/dark", dark);
}

void MainWindow::connectLocal() {
  local_ = true;
  const LocalDaemon d = local_daemon(options_.data_dir);
  start_title_->setText("Connecting to the local daemon...");
  start_detail_->setText(QStringLiteral("Data directory %1\nEndpoint %2").arg(d.data_dir, d.endpoint));
  stack_->setCurrentIndex(0);
  if (d.token.isEmpty() || !d.socket_exists) {
    onOpenFailed("unavailable", QStringLiteral("no daemon is running on %1").arg(d.data_dir));
    return;
  }
  connectTo(d.options());
}

void MainWindow::connectTo(const ClientOptions& options) {
  sb_endpoint_->setText(QString::fromStdString(options.endpoint) + " (connecting)");
  connection_->open(options);
}

void MainWindow::startDaemon() {
  if (launcher_ && launcher_->running()) return;
  const LocalDaemon d = local_daemon(options_.data_dir);
  delete launcher_;
  launcher_ = new DaemonLauncher(this);
  start_button_->setEnabled(false);
  start_title_->setText("Starting spindled...");
  start_log_->clear();
  stack_->setCurrentIndex(0);
  connect(launcher_, &DaemonLauncher::output, start_log_, &QPlainTextEdit::appendPlainText);
  connect(launcher_, &DaemonLauncher::ready, this, [this](QStringList) { connectLocal(); });
  connect(launcher_, &DaemonLauncher::failed, this, [this](QString message) {
    start_title_->setText("spindled did not start");
    start_detail_->setText(message);
    start_button_->setEnabled(true);
  });
  launcher_->start(d.data_dir, options_.daemon_args);
}

void MainWindow::onOpened() {
  sb_endpoint_->setText(connection_->endpoint());
  sb_tenant_->setText("tenant " + connection_->tenant());
  sb_version_->setText(connection_->serverVersion());
  sb_message_->setText("connected");
  stack_->setCurrentWidget(tabs_);
  for (StudioView* v : views_) v->refresh();
  run_default_->setEnabled(true);
  emit connected();
}

void MainWindow::onOpenFailed(const QString& code, const QString& message) {
  sb_endpoint_->setText("not connected");
  start_title_->setText(local_ ? "No local daemon is running" : "Could not connect");
  start_detail_->setText(QStringLiteral("%1: %2").arg(code, message));
  start_button_->setVisible(local_);
  start_button_->setEnabled(true);
  stack_->setCurrentIndex(0);
  if (local_ && options_.start_daemon && !(launcher_ && launcher_->running())) startDaemon();
}

void MainWindow::openConnectionDialog() {
  ConnectionDialog dialog(this);
  if (dialog.exec() != QDialog::Accepted) return;
  if (dialog.useLocal()) return connectLocal();
  local_ = false;
  connectTo(dialog.profile().options());
}

void MainWindow::pollStatus() {
  if (!connection_->isOpen() || status_in_flight_) return;
  status_in_flight_ = true;
  connection_->post(this, Op::status, Empty{}, [this](const Reply& r) {
    status_in_flight_ = false;
    if (!r.ok) return;
    const auto& s = std::get<StatusReply>(r.body);
    sb_slots_->setText(QStringLiteral("slots %1/%2").arg(s.device_slots_used).arg(s.device_slots));
    sb_tokens_->setText(QStringLiteral("%1 tok/s").arg(s.tokens_per_s, 0, 'f', 1));
  });
}

// ---- screenshots ----------------------------------------------------------------------------

void MainWindow::takeScreenshots(const QString& dir, int timeout_ms) {
  QDir().mkpath(dir);
  shot_dir_ = dir;
  shot_timeout_ms_ = timeout_ms;
  shot_failures_ = 0;
  shot_files_.clear();
  shot_index_ = -1;
  auto begin = [this] { screenshotNext(); };
  if (connection_->isOpen()) begin();
  else connect(this, &MainWindow::connected, this, begin, Qt::SingleShotConnection);
}

void MainWindow::screenshotNext() {
  delete shot_wait_;
  ++shot_index_;
  if (shot_index_ >= views_.size()) {
    emit screenshotsDone(shot_failures_, shot_files_);
    return;
  }
  StudioView* v = views_[shot_index_];
  showView(shot_index_);
  auto* waiter = new QObject(this);
  shot_wait_ = waiter;
  auto grab = [this, v, waiter](bool timed_out) {
    if (shot_wait_ != waiter) return;
    if (timed_out) ++shot_failures_;
    // Let layouts settle and GL panels draw a frame before grabbing.
    QTimer::singleShot(300, this, [this, v] {
      const QString file = shot_dir_ + "/" + v->screenshotName() + ".png";
      QWidget::grab().save(file);
      shot_files_ << file;
      screenshotNext();
    });
    shot_wait_->disconnect();
    shot_wait_ = nullptr;
    waiter->deleteLater();
  };
  connect(v, &StudioView::readyForScreenshot, waiter, [grab] { grab(false); });
  QTimer::singleShot(shot_timeout_ms_, waiter, [grab] { grab(true); });
  v->prepareScreenshot();
}

}  // namespace spindle::ui
