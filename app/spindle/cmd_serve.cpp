// spindle serve: runs the daemon in this process, exactly as `spindled` does (same flags, same
// library entry point, spindle/service/service.h).

#include <CLI/CLI.hpp>

#include <memory>

#include "commands.h"
#include "spindle/core/error.h"
#include "spindle/service/service.h"

namespace spindle::cli {

void register_serve(CLI::App& app) {
  auto config = std::make_shared<service::ServiceConfig>();
  CLI::App* cmd = app.add_subcommand("serve", "Run the daemon (spindled) in the foreground");
  service::add_service_options(*cmd, *config);
  cmd->callback([cmd, config] {
    service::apply_config_file(*cmd, *config);
    const int rc = service::run_daemon(*config);
    SPINDLE_CHECK(rc == 0, internal, "the daemon stopped with an error (see its log)");
  });
}

}  // namespace spindle::cli
