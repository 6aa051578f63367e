// Where the host binary and the plugin folders are found (see host.h).

#include <unistd.h>

#include <cstdlib>
#include <system_error>

#include "spindle/core/error.h"
#include "spindle/rewards/host.h"

namespace spindle::rewards {

namespace fs = std::filesystem;

namespace {

fs::path exe_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

}  // namespace

std::vector<fs::path> default_plugin_dirs() {
  std::vector<fs::path> out;
  auto add = [&](const fs::path& p) {
    if (p.empty() || !is_dir(p)) return;
    for (const fs::path& q : out) {
      if (q == p) return;
    }
    out.push_back(p);
  };
  if (const char* env = std::getenv("SPINDLE_REWARD_PLUGIN_PATH"); env && *env) {
    std::string s(env);
    size_t start = 0;
    for (;;) {
      size_t colon = s.find(':', start);
      add(s.substr(start, colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  add(SPINDLE_REWARD_PLUGIN_BUILD_DIR);
  // An install: <prefix>/bin/.. + lib/<multiarch>/spindle/plugins (relocatable, so a package
  // unpacked anywhere finds its own plugins), and the pre-multiarch lib/spindle/plugins.
  if (fs::path d = exe_dir(); !d.empty()) {
    add((d / ".." / SPINDLE_REWARD_PLUGIN_INSTALL_RELDIR).lexically_normal());
    add((d / ".." / "lib" / "spindle" / "plugins").lexically_normal());
  }
  return out;
}

fs::path default_host_binary() {
  std::vector<fs::path> tried;
  if (const char* env = std::getenv("SPINDLE_REWARD_HOST"); env && *env) tried.emplace_back(env);
  if (fs::path d = exe_dir(); !d.empty()) tried.push_back(d / "spindle-reward-host");
  tried.emplace_back(SPINDLE_REWARD_HOST_BUILD_PATH);
  std::string list;
  for (const fs::path& p : tried) {
    if (access(p.c_str(), X_OK) == 0) return p;
    list += (list.empty() ? "" : ", ") + p.string();
  }
  SPINDLE_THROW(not_found, "spindle-reward-host not found (tried {}; set SPINDLE_REWARD_HOST)",
                list);
}

}  // namespace spindle::rewards
