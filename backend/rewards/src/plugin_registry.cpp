#include "plugin_registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <system_error>

namespace spindle::rewards {

namespace fs = std::filesystem;

namespace {

// "<name>" for (lib)spindle_reward_<name>.so with <name> in [a-z0-9_]+, else "".
std::string plugin_name_from_file(std::string file) {
  if (file.rfind("lib", 0) == 0) file.erase(0, 3);
  const std::string prefix = "spindle_reward_", suffix = ".so";
  if (file.size() <= prefix.size() + suffix.size() || file.rfind(prefix, 0) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return "";
  }
  std::string name = file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return "";
  }
  return name;
}

}  // namespace

PluginRegistry::PluginRegistry(const std::vector<fs::path>& dirs) : dirs_(dirs) {
  for (const fs::path& dir : dirs_) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec) || it->is_symlink(ec)) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      const std::string name = plugin_name_from_file(f.filename().string());
      if (name.empty() || entries_.count(name)) continue;
      Entry e;
      e.name = name;
      e.path = f;
      entries_[name] = std::move(e);
    }
  }
}

void PluginRegistry::load(Entry& e) {
  e.tried = true;
  const std::string path = e.path.string();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    e.error_code = ErrorCode::format;
    e.error = fmt::format("reward plugin {}: dlopen failed: {}", path, dlerror());
    return;
  }
  auto entry = reinterpret_cast<spindle_reward_plugin_get_fn>(
      dlsym(handle, SPINDLE_REWARD_ENTRY_SYMBOL));
  if (entry == nullptr) {
    e.error_code = ErrorCode::format;
    e.error = fmt::format("reward plugin {}: no exported {}() (not a Spindle reward plugin)",
                          path, SPINDLE_REWARD_ENTRY_SYMBOL);
    return;
  }
  const spindle_reward_plugin* t = entry();
  if (t == nullptr) {
    e.error_code = ErrorCode::format;
    e.error = fmt::format("reward plugin {}: {}() returned NULL", path,
                          SPINDLE_REWARD_ENTRY_SYMBOL);
    return;
  }
  // abi_version is the first member in every ABI version, so reading it is always safe.
  if (t->abi_version != SPINDLE_REWARD_ABI_VERSION) {
    e.error_code = ErrorCode::unsupported;
    e.error = fmt::format(
        "reward plugin {}: built for reward ABI version {}, this host speaks version {} "
        "(rebuild the plugin against this Spindle's spindle/reward.h)",
        path, t->abi_version, SPINDLE_REWARD_ABI_VERSION);
    return;
  }
  // Tables built against an older ABI-1 header end after `destroy` (reward.h); members
  // appended since are read only when struct_size covers them (plugin_version()).
  if (t->struct_size < SPINDLE_REWARD_PLUGIN_V1_SIZE || !t->name || !t->create ||
      !t->score_batch || !t->destroy) {
    e.error_code = ErrorCode::format;
    e.error = fmt::format(
        "reward plugin {}: incomplete plugin table (struct_size {}, expected >= {}, or a null "
        "name/function)",
        path, t->struct_size, SPINDLE_REWARD_PLUGIN_V1_SIZE);
    return;
  }
  if (e.name != t->name) {
    e.error_code = ErrorCode::format;
    e.error = fmt::format("reward plugin {}: declares name '{}' but the file name says '{}'",
                          path, t->name, e.name);
    return;
  }
  e.table = t;
}

std::string plugin_version(const spindle_reward_plugin& t) {
  const size_t end = offsetof(spindle_reward_plugin, version) + sizeof(t.version);
  if (t.struct_size < end || t.version == nullptr) return "";
  return t.version;
}

const spindle_reward_plugin& PluginRegistry::get(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string known, searched;
    for (const auto& [n, _] : entries_) known += (known.empty() ? "" : ", ") + n;
    for (const fs::path& d : dirs_) searched += (searched.empty() ? "" : ", ") + d.string();
    SPINDLE_THROW(not_found, "no reward plugin '{}' (known: {}; searched: {})", name,
                  known.empty() ? "none" : known, searched.empty() ? "no folders" : searched);
  }
  Entry& e = it->second;
  if (!e.tried) load(e);
  if (e.table == nullptr) throw Error(e.error_code, e.error);
  return *e.table;
}

std::vector<const PluginRegistry::Entry*> PluginRegistry::load_all() {
  std::vector<const Entry*> out;
  for (auto& [name, e] : entries_) {
    if (!e.tried) load(e);
    out.push_back(&e);
  }
  return out;
}

}  // namespace spindle::rewards
