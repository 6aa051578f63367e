#pragma once
// Policy addresses: spindle://<tenant>/<policy>[@<revision>|@latest]
//   tenant, policy  1..128 characters from [A-Za-z0-9._-], starting with a letter or digit
//   revision        8..64 lowercase hex digits: a full revision id or a unique prefix of one
//   @latest         the policy's head revision (also what an address without '@' means)
// Tags: 1..64 characters from [A-Za-z0-9._:-], starting with a letter or digit.
//
// Parsing never consults the catalog; a malformed address throws invalid_argument naming the
// address and what is wrong with it.

#include <cstddef>
#include <string>
#include <string_view>

namespace spindle::catalog {

inline constexpr size_t kMaxNameChars = 128;
inline constexpr size_t kMaxTagChars = 64;
inline constexpr size_t kMinRevisionPrefix = 8;

struct Address {
  std::string tenant;
  std::string policy;
  std::string revision;  // empty: latest (the head)

  bool latest() const { return revision.empty(); }
  // Canonical text: "spindle://t/p@latest" or "spindle://t/p@<revision>".
  std::string str() const;
  // "spindle://t/p" (no revision part).
  std::string policy_str() const;
};

Address parse_address(std::string_view text);

// A full address, or a short form "<policy>[@<revision>|@latest]" in `default_tenant` (for
// command lines). Throws like parse_address.
Address parse_address_or_name(std::string_view text, std::string_view default_tenant);

// Throw invalid_argument naming `kind` ("tenant", "policy name") and what is wrong.
void check_name(std::string_view kind, std::string_view name);
// A base model id: a name, or several names joined by single '/' (Hugging Face's
// "Qwen/Qwen3-0.6B"); at most kMaxNameChars in all. Throws invalid_argument naming the id.
void check_base_id(std::string_view id);
void check_tag(std::string_view tag);

}  // namespace spindle::catalog
