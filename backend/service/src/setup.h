#pragma once
// Daemon start-up pieces, run on the main thread before any other thread starts. Each throws
// spindle::Error naming the file or setting that is wrong.

#include "daemon_state.h"

namespace spindle::service {

// Data dir (the CLI's rule), endpoints and file locations; creates the directories.
Paths resolve_paths(const ServiceConfig& config);

// Console (stderr) + <data_dir>/logs/spindled.log.
std::shared_ptr<spdlog::logger> make_logger(const Paths& paths, const std::string& level);

// The model paths: every --model (absolute), else the default base alone. Throws
// invalid_argument when more --tokenizer or --base-id values than models are given.
std::vector<std::filesystem::path> resolve_models(const ServiceConfig& config, const Paths& paths,
                                                  spdlog::logger& log);
// <data_dir>/bases/arith, built first by running `<dir of this executable>/spindle make-base
// --task arithmetic --out DIR` (output streams through) when it has no config.json.
std::filesystem::path resolve_default_model(const Paths& paths, spdlog::logger& log);

// A base's default id: an HF directory's config.json `_name_or_path` when it is a hub id
// ("Qwen/Qwen3-0.6B", not a filesystem path), else the directory name or the file stem.
std::string default_base_id(const std::filesystem::path& model);

// What the model directory's tokenizer_config.json says beyond the tokenizer itself.
struct TokenizerConfig {
  std::string chat_template;       // "" = none
  std::optional<int32_t> pad_token;
  bool add_bos_token = false;      // llama2.c: true (its encode prepends BOS)
};
// Throws format naming the file when tokenizer_config.json is not JSON or chat_template has
// another type. No file: only the tokenizer's defaults.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& model_path,
                                      const engine::Tokenizer* tokenizer);

// Registers the served base in the catalog's base_models when absent (arch, path, checksum
// as `spindle catalog import-peft --base-path` records them).
void register_base(const Paths& paths, const std::string& base_id,
                   const std::filesystem::path& model_path, const engine::ModelConfig& config,
                   spdlog::logger& log);

// token -> tenant from the tokens file; when it does not exist, creates it with one random
// 32-byte hex token for tenant "local" and writes that token to <data_dir>/token (0600).
std::map<std::string, std::string> load_or_create_tokens(const Paths& paths, spdlog::logger& log);

// CURVE keys (Z85 text, protocol/curve.h): <curve_dir>/server.key (secret, 0600) and
// server.pub, created on first use. Returns {public, secret}.
std::pair<std::string, std::string> load_or_create_server_keys(const Paths& paths);

// Public keys (Z85) of the allow-list file ('#' comments and blank lines skipped). A missing
// file is an empty list. Throws format naming a bad line.
std::vector<std::string> read_authorized_keys(const std::filesystem::path& file);

}  // namespace spindle::service
