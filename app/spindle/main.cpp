#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string_view>

#include "commands.h"
#include "spindle/core/error.h"
#include "spindle/service/service.h"
#include "spindle/version.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "serve") {
    spindle::service::reexec_with_passive_openmp(argv);  // as spindled does
  }
  CLI::App app{"spindle: train and serve many LoRA policies over one resident base model"};
  app.set_version_flag("--version", "spindle " SPINDLE_VERSION);
  app.require_subcommand(1);
  spindle::cli::register_generate(app);
  spindle::cli::register_convert(app);
  spindle::cli::register_tokenize(app);
  spindle::cli::register_sft(app);
  spindle::cli::register_make_base(app);
  spindle::cli::register_catalog(app);
  spindle::cli::register_serve(app);
  spindle::cli::register_grpo(app);
  spindle::cli::register_reward(app);
  spindle::cli::register_status(app);
  spindle::cli::register_cluster(app);
  spindle::cli::register_sample(app);
  spindle::cli::register_run(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const spindle::Error& e) {
    std::fprintf(stderr, "spindle: error (%s): %s\n", spindle::error_code_name(e.code()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
