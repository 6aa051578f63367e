#pragma once
// The data directory rule shared by the CLI, spindled and the SDKs: an explicit directory when
// given, else $SPINDLE_DATA_DIR, else $XDG_DATA_HOME/spindle, else ~/.local/share/spindle.

#include <filesystem>

namespace spindle::catalog {

// `explicit_dir` wins when non-empty. Throws invalid_argument when nothing applies (HOME unset).
std::filesystem::path resolve_data_dir(const std::filesystem::path& explicit_dir = {});

}  // namespace spindle::catalog
