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

/// The system daemon's data directory (the `spindle` package's spindled.service).
inline constexpr const char* kSystemDataDir = "/var/lib/spindle";

/// The data directory a CLIENT talks to: default_data_dir(), except that with neither
/// `explicit_dir` nor $SPINDLE_DATA_DIR set, a user whose own data dir has no running daemon
/// (no spindled.sock) while the system daemon's socket exists gets kSystemDataDir (its socket
/// and token are readable by the `spindle` group). `system_dir` is for tests.
std::filesystem::path client_data_dir(const std::filesystem::path& explicit_dir = {},
                                      const std::filesystem::path& system_dir = kSystemDataDir);

}  // namespace spindle::protocol
