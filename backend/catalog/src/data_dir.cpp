// The data directory rule (data_dir.h).

#include "spindle/catalog/data_dir.h"

#include <cstdlib>

#include "spindle/core/error.h"

namespace spindle::catalog {

std::filesystem::path resolve_data_dir(const std::filesystem::path& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (const char* d = std::getenv("SPINDLE_DATA_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) {
    return std::filesystem::path(x) / "spindle";
  }
  const char* home = std::getenv("HOME");
  SPINDLE_CHECK(home && *home, invalid_argument,
                "no data directory: pass --data-dir or set SPINDLE_DATA_DIR (HOME is unset)");
  return std::filesystem::path(home) / ".local" / "share" / "spindle";
}

}  // namespace spindle::catalog
