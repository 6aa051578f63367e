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

}  // namespace spindle::protocol
