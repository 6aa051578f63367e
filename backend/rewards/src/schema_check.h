#pragma once
// A small JSON Schema subset, enough for reward plugin configs: type (a name or a list),
// properties, required, items, enum, minimum, maximum, additionalProperties (false or a
// schema). Other keywords ("description", "default", ...) are ignored.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace spindle::rewards {

// The first violation as "<path>: <what>" (path like "config.present[1]"), or nullopt.
std::optional<std::string> schema_violation(const nlohmann::json& schema,
                                            const nlohmann::json& value, const std::string& path);

}  // namespace spindle::rewards
