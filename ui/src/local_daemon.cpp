#include "spindle/ui/local_daemon.h"

#include "spindle/protocol/data_dir.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>

namespace spindle::ui {

protocol::ClientOptions LocalDaemon::options() const {
  protocol::ClientOptions o;
  o.endpoint = endpoint.toStdString();
  o.token = token.toStdString();
  o.client_name = "spindle-studio";
  o.timeout_ms = 3600 * 1000;  // long requests (a reward test of many samples) reply when done
  return o;
}

LocalDaemon local_daemon(const QString& explicit_dir) {
  LocalDaemon d;
  std::filesystem::path dir = protocol::default_data_dir(explicit_dir.toStdString());
  if (dir.empty()) dir = (QDir::homePath() + "/.local/share/spindle").toStdString();
  d.data_dir = QFileInfo(QString::fromStdString(dir.string())).absoluteFilePath();
  d.endpoint = "ipc://" + d.data_dir + "/spindled.sock";
  d.token_file = d.data_dir + "/token";
  QFile f(d.token_file);
  if (f.open(QIODevice::ReadOnly)) d.token = QString::fromUtf8(f.readAll()).trimmed().split(QRegularExpression("\\s+")).value(0);
  d.socket_exists = QFileInfo::exists(d.data_dir + "/spindled.sock");
  return d;
}

DaemonLauncher::DaemonLauncher(QObject* parent) : QObject(parent) {}

DaemonLauncher::~DaemonLauncher() {
  if (process_) {
    process_->disconnect(this);
    process_->setParent(nullptr);  // QProcess would kill the child on destruction
    // Detach: the daemon keeps serving other clients; the handle is leaked on purpose.
  }
}

QString DaemonLauncher::defaultProgram() {
  const QString beside = QCoreApplication::applicationDirPath() + "/spindled";
  if (QFileInfo(beside).isExecutable()) return beside;
  const QString build_tree = QCoreApplication::applicationDirPath() + "/../spindled";
  if (QFileInfo(build_tree).isExecutable()) return QFileInfo(build_tree).absoluteFilePath();
  return QStandardPaths::findExecutable("spindled");
}

bool DaemonLauncher::running() const { return process_ && process_->state() != QProcess::NotRunning; }

void DaemonLauncher::start(const QString& data_dir, const QStringList& args, QString program) {
  if (program.isEmpty()) program = defaultProgram();
  if (program.isEmpty()) {
    emit failed("spindled not found beside spindle-studio or on PATH");
    return;
  }
  QDir().mkpath(data_dir);
  ready_ = false;
  log_.clear();
  process_ = new QProcess(this);
  process_->setProgram(program);
  process_->setArguments(QStringList{"--data-dir", data_dir} + args);
  connect(process_, &QProcess::readyReadStandardOutput, this,
          [this] { readLines(QProcess::StandardOutput); });
  connect(process_, &QProcess::readyReadStandardError, this,
          [this] { readLines(QProcess::StandardError); });
  connect(process_, &QProcess::errorOccurred, this, [this, program](QProcess::ProcessError) {
    if (!ready_) emit failed(program + ": " + process_->errorString());
  });
  connect(process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus) {
    if (!ready_) {
      emit failed(QStringLiteral("spindled exited with status %1 before it was ready:\n%2")
                      .arg(code)
                      .arg(log_.mid(std::max<qsizetype>(0, log_.size() - 8)).join('\n')));
    }
  });
  emit output(QStringLiteral("starting %1 --data-dir %2 %3").arg(program, data_dir, args.join(' ')));
  process_->start();
}

void DaemonLauncher::readLines(QProcess::ProcessChannel channel) {
  process_->setReadChannel(channel);
  QByteArray& buf = pending_[channel == QProcess::StandardOutput ? 0 : 1];
  buf += process_->readAll();
  for (qsizetype nl; (nl = buf.indexOf('\n')) >= 0;) {
    const QString line = QString::fromUtf8(buf.left(nl));
    buf.remove(0, nl + 1);
    log_ << line;
    emit output(line);
    if (!ready_ && line.startsWith("spindled ready: ")) {
      ready_ = true;
      emit ready(line.mid(16).split(' ', Qt::SkipEmptyParts));
    }
  }
}

}  // namespace spindle::ui
