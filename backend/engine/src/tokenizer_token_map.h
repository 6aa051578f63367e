#pragma once
// String -> token id map with heterogeneous lookup: find(std::string_view) does not allocate.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace spindle::engine {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace spindle::engine
