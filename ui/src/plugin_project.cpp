#include "spindle/ui/plugin_project.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>

#ifndef SPINDLE_SDK_INCLUDE_DIR_DEFAULT
#define SPINDLE_SDK_INCLUDE_DIR_DEFAULT ""
#endif

namespace spindle::ui {

bool isValidPluginName(const QString& name) {
  static const QRegularExpression re(QStringLiteral("^[a-z0-9_]+$"));
  return re.match(name).hasMatch();
}

QString pluginLibraryName(const QString& name) {
  return QStringLiteral("spindle_reward_%1.so").arg(name);
}

QString defaultSdkIncludeDir() { return QStringLiteral(SPINDLE_SDK_INCLUDE_DIR_DEFAULT); }

QString writePluginProject(const QString& dir, const QString& name, const QString& description,
                           const QString& sdk_include_dir) {
  if (!isValidPluginName(name)) {
    return QObject::tr("plugin name '%1': use lowercase letters, digits and _ only").arg(name);
  }
  QDir d(dir);
  if (!d.mkpath(".")) return QObject::tr("%1: cannot create the folder").arg(dir);
  const QString cmake = d.filePath("CMakeLists.txt");
  const QString source = d.filePath(name + ".cpp");
  for (const QString& p : {cmake, source}) {
    if (QFileInfo::exists(p)) return QObject::tr("%1 exists already; pick an empty folder").arg(p);
  }
  const std::pair<QString, QString> files[] = {
      {cmake, pluginCmakeText(name, sdk_include_dir)},
      {source, pluginSourceText(name, description)}};
  for (const auto& [path, text] : files) {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) return path + ": " + f.errorString();
    f.write(text.toUtf8());
  }
  return {};
}

PluginBuilder::PluginBuilder(QObject* parent) : QObject(parent) {}

PluginBuilder::~PluginBuilder() {
  if (process_ && process_->state() != QProcess::NotRunning) {
    process_->kill();
    process_->waitForFinished(2000);
  }
}

bool PluginBuilder::running() const {
  return process_ && process_->state() != QProcess::NotRunning;
}

void PluginBuilder::start(const QString& dir, const QString& name) {
  if (running()) return;
  dir_ = dir;
  library_ = QDir(dir).filePath("build/" + pluginLibraryName(name));
  step_ = 0;
  if (!process_) {
    process_ = new QProcess(this);
    process_->setProcessChannelMode(QProcess::MergedChannels);
    connect(process_, &QProcess::readyRead, this,
            [this] { emit output(QString::fromLocal8Bit(process_->readAll())); });
    connect(process_, &QProcess::finished, this, &PluginBuilder::onFinished);
    connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
      if (e == QProcess::FailedToStart) {
        emit finished(false, {}, tr("cannot run cmake: %1").arg(process_->errorString()));
      }
    });
  }
  runStep();
}

void PluginBuilder::runStep() {
  const QString build = QDir(dir_).filePath("build");
  const QStringList args = step_ == 0 ? QStringList{"-S", dir_, "-B", build}
                                      : QStringList{"--build", build};
  emit output(QStringLiteral("$ cmake %1\n").arg(args.join(' ')));
  process_->start(QStringLiteral("cmake"), args);
}

void PluginBuilder::onFinished(int code, QProcess::ExitStatus status) {
  if (status != QProcess::NormalExit || code != 0) {
    emit finished(false, {},
                  tr("cmake %1 failed (exit %2)").arg(step_ == 0 ? "configure" : "build").arg(code));
    return;
  }
  if (step_ == 0) {
    step_ = 1;
    runStep();
    return;
  }
  if (!QFileInfo::exists(library_)) {
    emit finished(false, {}, tr("the build made no %1").arg(library_));
    return;
  }
  emit finished(true, library_, {});
}

}  // namespace spindle::ui
