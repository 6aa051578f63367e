// spindle-studio: the Qt research workstation (ui/ holds everything; this parses flags).
//
//   spindle-studio [--data-dir DIR] [--start-daemon] [--model PATH]
//   spindle-studio --endpoint tcp://host:7878 --token T --server-key KEY [--client-keys DIR]
//   spindle-studio --screenshot DIR [...]   render every view to DIR/<view>.png and exit

#include <CLI/CLI.hpp>

#include <QApplication>
#include <QFile>
#include <QTimer>

#include <cstdio>
#include <iostream>

#include "spindle/protocol/curve.h"
#include "spindle/ui/main_window.h"
#include "spindle/version.h"

namespace {

std::string key_or_file(const std::string& value) {
  if (spindle::protocol::is_z85_key(value)) return value;
  QFile f(QString::fromStdString(value));
  if (!f.open(QIODevice::ReadOnly)) return value;
  return QString::fromUtf8(f.readAll()).trimmed().toStdString();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"Spindle Studio: browse policies, design rewards, launch and watch GRPO runs"};
  std::string data_dir, endpoint, token, server_key, client_keys, screenshot, model;
  bool start_daemon = false, light = false;
  int timeout_s = 120;
  cli.set_version_flag("--version", "spindle-studio " SPINDLE_VERSION);
  cli.add_option("--data-dir", data_dir, "the local daemon's data directory (default: the CLI's rule)");
  cli.add_option("--endpoint", endpoint, "connect to this daemon instead of the local one");
  cli.add_option("--token", token, "API token for --endpoint (default: $SPINDLE_TOKEN)");
  cli.add_option("--server-key", server_key, "the server's CURVE public key (Z85, or a file) for tcp://");
  cli.add_option("--client-keys", client_keys, "directory of this client's CURVE key pair (client.key/.pub)");
  cli.add_flag("--start-daemon", start_daemon, "start the local spindled without asking when none runs");
  cli.add_option("--model", model, "with --start-daemon: the base spindled serves (default: the embedded arith base)");
  cli.add_option("--screenshot", screenshot, "render every view to DIR/<view>.png with real data, then exit");
  cli.add_option("--screenshot-timeout", timeout_s, "seconds to wait for each view's data in --screenshot");
  cli.add_flag("--light", light, "start in the light theme");
  CLI11_PARSE(cli, argc, argv);

  QApplication app(argc, argv);
  QApplication::setOrganizationName("Spindle");
  QApplication::setApplicationName("Spindle Studio");

  spindle::ui::StudioOptions options;
  options.data_dir = QString::fromStdString(data_dir);
  options.start_daemon = start_daemon;
  if (!model.empty()) options.daemon_args << "--model" << QString::fromStdString(model);
  if (!endpoint.empty()) {
    auto& r = options.remote;
    r.endpoint = endpoint;
    r.token = token.empty() && std::getenv("SPINDLE_TOKEN") ? std::getenv("SPINDLE_TOKEN") : token;
    r.client_name = "spindle-studio";
    r.timeout_ms = 3600 * 1000;
    if (!server_key.empty()) r.server_public_key = key_or_file(server_key);
    if (!client_keys.empty()) {
      const auto pair = spindle::protocol::load_or_create_keypair(client_keys, "client");
      r.client_public_key = pair.public_key;
      r.client_secret_key = pair.secret_key;
    }
  }
  spindle::ui::MainWindow window(options);
  if (light) window.setDarkTheme(false);
  window.show();
  if (!screenshot.empty()) {
    QObject::connect(&window, &spindle::ui::MainWindow::screenshotsDone, &app,
                     [](int failures, QStringList files) {
                       for (const QString& f : files) std::cout << "wrote " << f.toStdString() << "\n";
                       if (failures) std::cerr << failures << " view(s) timed out waiting for data\n";
                       QApplication::exit(failures ? 2 : 0);
                     });
    window.takeScreenshots(QString::fromStdString(screenshot), timeout_s * 1000);
  }
  return app.exec();
}
