#include "spindle/adapters/optimizer_state.h"

#include <system_error>

#include "spindle/core/error.h"

namespace spindle::adapters {

std::filesystem::path optimizer_state_path(const std::filesystem::path& dir) {
  return dir / kOptimizerStateFileName;
}

bool has_optimizer_state(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(optimizer_state_path(dir), ec);
}

void save_optimizer_state(const engine::AdamW& optimizer, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  optimizer.save(optimizer_state_path(dir));
}

engine::AdamW load_optimizer_state(const std::filesystem::path& dir) {
  const auto file = optimizer_state_path(dir);
  std::error_code ec;
  SPINDLE_CHECK(std::filesystem::exists(file, ec), not_found,
                "{}: no optimizer state (the adapter in {} was saved without one)", file.string(),
                dir.string());
  try {
    return engine::AdamW::load(file);
  } catch (const Error& e) {
    // Messages from the safetensors reader already name the file; keep their code.
    const std::string what = e.what();
    if (what.find(file.string()) != std::string::npos) throw;
    throw Error(e.code(), fmt::format("{}: {}", file.string(), what));
  }
}

}  // namespace spindle::adapters
