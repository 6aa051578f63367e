#pragma once
// "New plugin…" of the reward designer: writes a standalone C++ reward plugin project from the
// SDK template (ui/src/plugin_template.cpp) and builds it with cmake.
//
// The project (<dir>/CMakeLists.txt, <dir>/<name>.cpp) builds spindle_reward_<name>.so, a
// MODULE library exporting only spindle_reward_plugin_get (plugins/sdk/include/spindle/
// reward.h), with nothing but the SDK headers: the cache variable SPINDLE_SDK_INCLUDE_DIR
// names their folder and defaults to this source tree's plugins/sdk/include
// (defaultSdkIncludeDir()). The generated plugin scores a length target (config
// {"min_chars": integer >= 0}) so it works as soon as it is built; edit score() from there.
//
// PluginBuilder runs `cmake -S dir -B dir/build` then `cmake --build dir/build` with QProcess,
// asynchronously: output() streams every line of both processes, finished() tells the result
// and the built library's path. Never blocks the GUI thread.

#include <QObject>
#include <QProcess>
#include <QString>

namespace spindle::ui {

// [a-z0-9_]+, the part of spindle_reward_<name>.so the host checks against the plugin's name.
bool isValidPluginName(const QString& name);
QString pluginLibraryName(const QString& name);  // spindle_reward_<name>.so
QString defaultSdkIncludeDir();

// The template's two files for `name` (exposed for tests).
QString pluginCmakeText(const QString& name, const QString& sdk_include_dir);
QString pluginSourceText(const QString& name, const QString& description);

// Writes the project into `dir` (created if missing). Refuses to overwrite an existing
// CMakeLists.txt or source. Returns "" or the error.
QString writePluginProject(const QString& dir, const QString& name, const QString& description,
                           const QString& sdk_include_dir = defaultSdkIncludeDir());

class PluginBuilder : public QObject {
  Q_OBJECT
 public:
  explicit PluginBuilder(QObject* parent = nullptr);
  ~PluginBuilder() override;  // kills a build in progress

  // Configures and builds the project in `dir` (the plugin's `name` names the library).
  void start(const QString& dir, const QString& name);
  bool running() const;
  QString libraryPath() const { return library_; }

 signals:
  void output(QString text);
  void finished(bool ok, QString library_path, QString error);

 private:
  void runStep();
  void onFinished(int code, QProcess::ExitStatus status);

  QProcess* process_ = nullptr;
  QString dir_, library_;
  int step_ = 0;  // 0 configure, 1 build
};

}  // namespace spindle::ui
