#pragma once
// The checksum recorded for a base model in the catalog and in every revision file.

#include <filesystem>
#include <string>

namespace spindle::adapters {

// SHA-256 (hex) over the files that define a base: config.json and *.safetensors of an HF
// directory in name order, or a single checkpoint file, streamed in 64 MiB pieces. Throws
// not_found naming `path` when a directory holds none of them.
std::string base_checksum(const std::filesystem::path& path);

}  // namespace spindle::adapters
