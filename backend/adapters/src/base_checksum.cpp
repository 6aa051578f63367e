// Base model checksum (base_checksum.h).

#include "spindle/adapters/base_checksum.h"

#include <algorithm>
#include <vector>

#include "spindle/adapters/sha256.h"
#include "spindle/core/error.h"
#include "spindle/core/file_io.h"

namespace spindle::adapters {

namespace fs = std::filesystem;

std::string base_checksum(const fs::path& path) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path)) {
      const std::string n = e.path().filename().string();
      if (n == "config.json" || n.ends_with(".safetensors")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  SPINDLE_CHECK(!files.empty(), not_found, "{}: no config.json or .safetensors files",
                path.string());
  Sha256 h;
  std::string buf(size_t(64) << 20, '\0');
  for (const auto& f : files) {
    const FileReader r(f);
    for (uint64_t at = 0; at < r.size(); at += buf.size()) {
      const size_t n = size_t(std::min<uint64_t>(buf.size(), r.size() - at));
      r.read_at(at, buf.data(), n);
      h.update(buf.data(), n);
    }
  }
  return h.finish_hex();
}

}  // namespace spindle::adapters
