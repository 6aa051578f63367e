#pragma once
// The data directory rule (protocol::default_data_dir, shared with the Studio and the client
// library), with this layer's error policy.

#include <filesystem>

namespace spindle::catalog {

// `explicit_dir` wins when non-empty. Throws invalid_argument when nothing applies (HOME unset).
std::filesystem::path resolve_data_dir(const std::filesystem::path& explicit_dir = {});

}  // namespace spindle::catalog
