// spindled: the Spindle daemon. Every flag (and the --config JSON file) is documented by
// `spindled --help`; the embedded default needs none (see spindle/service/service.h).

#include <CLI/CLI.hpp>

#include <cstdio>

#include "spindle/core/error.h"
#include "spindle/service/service.h"
#include "spindle/version.h"

int main(int argc, char** argv) {
  spindle::service::reexec_with_passive_openmp(argv);
  CLI::App app{"spindled: serve and train many LoRA policies over one resident base model"};
  spindle::service::ServiceConfig config;
  app.set_version_flag("--version", "spindled " SPINDLE_VERSION);
  spindle::service::add_service_options(app, config);
  try {
    app.parse(argc, argv);
    spindle::service::apply_config_file(app, config);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindled: error: %s\n", e.what());
    return 1;
  }
  return spindle::service::run_daemon(config);
}
