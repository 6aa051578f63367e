#pragma once
// The local daemon of a data directory (protocol::default_data_dir, the CLI's rule);
// endpoint ipc://<data dir>/spindled.sock; token from the file <data dir>/token that spindled
// writes on first start. And DaemonLauncher: starts `spindled` as a child process for the
// Studio and reports its start-up output line by line (the embedded base build's progress
// included), then the endpoints of its "spindled ready: ..." line.

#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>

#include "spindle/protocol/client.h"

namespace spindle::ui {

struct LocalDaemon {
  QString data_dir;
  QString endpoint;    // ipc://<data_dir>/spindled.sock
  QString token_file;  // <data_dir>/token
  QString token;       // "" when the file does not exist yet
  bool socket_exists = false;
  protocol::ClientOptions options() const;  // endpoint + token, Studio client name
};

// `explicit_dir` wins when non-empty.
LocalDaemon local_daemon(const QString& explicit_dir = {});

class DaemonLauncher : public QObject {
  Q_OBJECT
 public:
  explicit DaemonLauncher(QObject* parent = nullptr);
  ~DaemonLauncher() override;  // leaves a started daemon running (it outlives the Studio)

  // spindled beside this executable, else on PATH.
  static QString defaultProgram();
  // Starts `program --data-dir <data_dir> args...`; emits output() per line of its stdout and
  // stderr, then ready(endpoints) or failed(message, its last lines).
  void start(const QString& data_dir, const QStringList& args = {}, QString program = {});
  bool running() const;
  qint64 pid() const { return process_ ? process_->processId() : 0; }
  QStringList log() const { return log_; }

 signals:
  void output(QString line);
  void ready(QStringList endpoints);
  void failed(QString message);

 private:
  void readLines(QProcess::ProcessChannel channel);

  QProcess* process_ = nullptr;
  QByteArray pending_[2];
  QStringList log_;
  bool ready_ = false;
};

}  // namespace spindle::ui
