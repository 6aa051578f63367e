#pragma once
// Each subcommand registers itself on the root CLI::App and runs from its callback.
// Errors: subcommands throw spindle::Error; main() prints "spindle: error: <message>" and
// exits 1. Stdout carries only the command's result (ids, text); logs go to stderr.

namespace CLI {
class App;
}

namespace spindle::cli {

void register_generate(CLI::App& app);
void register_convert(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_sft(CLI::App& app);
void register_make_base(CLI::App& app);
void register_catalog(CLI::App& app);
void register_serve(CLI::App& app);
void register_grpo(CLI::App& app);
void register_reward(CLI::App& app);
void register_status(CLI::App& app);
void register_cluster(CLI::App& app);  // cluster status
void register_sample(CLI::App& app);
void register_run(CLI::App& app);

}  // namespace spindle::cli
