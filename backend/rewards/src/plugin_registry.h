#pragma once
// Host side: finds reward plugin files in folders and loads them on first use with
// dlopen(RTLD_NOW | RTLD_LOCAL). A file is a plugin when named (lib)spindle_reward_<name>.so;
// the first folder holding <name> wins. Loading checks the entry symbol, the ABI version (the
// first member of every ABI version), the table size, the name and the function pointers, and
// remembers a refusal so it is reported the same way every time.
// Handles are never dlclose()d: a plugin may leave thread-locals or atexit hooks behind.
// Not thread-safe (the host is single-threaded).

#include <spindle/reward.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "spindle/core/error.h"

namespace spindle::rewards {

// The table's `version`, "" when it has none or its struct_size predates the member.
std::string plugin_version(const spindle_reward_plugin& table);

class PluginRegistry {
 public:
  explicit PluginRegistry(const std::vector<std::filesystem::path>& dirs);

  struct Entry {
    std::string name;
    std::filesystem::path path;
    bool tried = false;
    const spindle_reward_plugin* table = nullptr;  // set once loaded
    ErrorCode error_code = ErrorCode::internal;   // when tried && !table
    std::string error;
  };

  // Loads (once) and returns the plugin; throws not_found for an unknown name, unsupported for
  // an ABI mismatch, format for a file that is not a reward plugin.
  const spindle_reward_plugin& get(const std::string& name);
  // Every plugin file, each loaded (a failed load leaves table null and error set).
  std::vector<const Entry*> load_all();
  const std::vector<std::filesystem::path>& dirs() const { return dirs_; }

 private:
  void load(Entry& e);
  std::vector<std::filesystem::path> dirs_;
  std::map<std::string, Entry> entries_;
};

}  // namespace spindle::rewards
