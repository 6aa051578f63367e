#include "spindle/protocol/data_dir.h"

#include <cstdlib>

namespace spindle::protocol {

std::filesystem::path default_data_dir(const std::filesystem::path& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (const char* d = std::getenv("SPINDLE_DATA_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::filesystem::path(x) / "spindle";
  const char* home = std::getenv("HOME");
  if (!home || !*home) return {};
  return std::filesystem::path(home) / ".local" / "share" / "spindle";
}

std::filesystem::path client_data_dir(const std::filesystem::path& explicit_dir,
                                      const std::filesystem::path& system_dir) {
  const std::filesystem::path mine = default_data_dir(explicit_dir);
  const char* env = std::getenv("SPINDLE_DATA_DIR");
  if (!explicit_dir.empty() || (env != nullptr && *env != '\0')) return mine;
  std::error_code ec;
  if (!mine.empty() && std::filesystem::exists(mine / "spindled.sock", ec)) return mine;
  if (std::filesystem::exists(system_dir / "spindled.sock", ec)) return system_dir;
  return mine;
}

}  // namespace spindle::protocol
