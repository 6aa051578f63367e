#pragma once
/// \file data_dir.h
/// The data directory rule shared by spindled, the CLI, the SDKs and the Studio: an explicit
/// directory when given, else $SPINDLE_DATA_DIR, else $XDG_DATA_HOME/spindle, else
/// ~/.local/share/spindle. The local daemon listens on ipc://<data dir>/spindled.sock and writes
/// its token to <data dir>/token.

#include <filesystem>

namespace spindle::protocol {

/// `explicit_dir` wins when non-empty; an empty path when nothing applies (HOME unset).
std::filesystem::path default_data_dir(const std::filesystem::path& explicit_dir = {});

}  // namespace spindle::protocol
