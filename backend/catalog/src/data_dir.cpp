// The data directory rule (data_dir.h).

#include "spindle/catalog/data_dir.h"

#include <cstdlib>

#include "spindle/core/error.h"
#include "spindle/protocol/data_dir.h"

namespace spindle::catalog {

std::filesystem::path resolve_data_dir(const std::filesystem::path& explicit_dir) {
  std::filesystem::path d = protocol::default_data_dir(explicit_dir);
  SPINDLE_CHECK(!d.empty(), invalid_argument,
                "no data directory: pass --data-dir or set SPINDLE_DATA_DIR (HOME is unset)");
  return d;
}

}  // namespace spindle::catalog
