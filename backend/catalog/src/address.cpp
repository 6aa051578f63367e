#include "spindle/catalog/address.h"

#include <algorithm>

#include "spindle/core/error.h"

namespace spindle::catalog {
namespace {

constexpr std::string_view kScheme = "spindle://";
constexpr std::string_view kGrammar = "spindle://<tenant>/<policy>[@<revision>|@latest]";

bool alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// Empty when `s` is a valid name; else what is wrong with it.
std::string name_problem(std::string_view s, size_t max_chars, std::string_view extra_chars) {
  if (s.empty()) return "it is empty";
  if (s.size() > max_chars)
    return fmt::format("it has {} characters, at most {} allowed", s.size(), max_chars);
  if (!alnum(s[0])) return fmt::format("it must start with a letter or digit, not '{}'", s[0]);
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!alnum(c) && extra_chars.find(c) == std::string_view::npos) {
      const bool printable = c >= 0x20 && c < 0x7f;
      return printable ? fmt::format(
                             "character '{}' at position {} is not allowed (use letters, "
                             "digits and '{}')",
                             c, i, extra_chars)
                       : fmt::format("byte 0x{:02x} at position {} is not allowed", uint8_t(c), i);
    }
  }
  return {};
}

[[noreturn]] void malformed(std::string_view text, std::string_view why) {
  SPINDLE_THROW(invalid_argument, "malformed address '{}': {} (expected {})", text, why, kGrammar);
}

void parse_revision(std::string_view text, std::string_view rev, Address& out) {
  if (rev == "latest") return;
  if (rev.empty()) malformed(text, "nothing after '@'");
  if (rev.size() < kMinRevisionPrefix || rev.size() > 64) {
    malformed(text, fmt::format("revision '{}' must be 'latest' or {}..64 hex digits", rev,
                                kMinRevisionPrefix));
  }
  for (char c : rev) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      malformed(text, fmt::format("revision '{}' has '{}': only lowercase hex digits (or "
                                  "'latest') name a revision",
                                  rev, c));
    }
  }
  out.revision = std::string(rev);
}

// "<policy>[@rev]" into out.policy / out.revision.
void parse_policy_part(std::string_view text, std::string_view part, Address& out) {
  const size_t at = part.find('@');
  const std::string_view name = part.substr(0, at);
  if (name.empty()) malformed(text, "the policy name is empty");
  if (const std::string p = name_problem(name, kMaxNameChars, "._-"); !p.empty()) {
    malformed(text, fmt::format("policy name '{}': {}", name, p));
  }
  out.policy = std::string(name);
  if (at != std::string_view::npos) parse_revision(text, part.substr(at + 1), out);
}

}  // namespace

std::string Address::str() const {
  return fmt::format("spindle://{}/{}@{}", tenant, policy, latest() ? "latest" : revision);
}

std::string Address::policy_str() const {
  return fmt::format("spindle://{}/{}", tenant, policy);
}

Address parse_address(std::string_view text) {
  if (!text.starts_with(kScheme)) {
    if (text.starts_with("spindle:")) malformed(text, "the scheme must be followed by '//'");
    malformed(text, "it does not start with 'spindle://'");
  }
  const std::string_view rest = text.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) malformed(text, "no '/' between tenant and policy");
  Address out;
  const std::string_view tenant = rest.substr(0, slash);
  if (tenant.empty()) malformed(text, "the tenant is empty");
  if (const std::string p = name_problem(tenant, kMaxNameChars, "._-"); !p.empty()) {
    malformed(text, fmt::format("tenant '{}': {}", tenant, p));
  }
  out.tenant = std::string(tenant);
  parse_policy_part(text, rest.substr(slash + 1), out);
  return out;
}

Address parse_address_or_name(std::string_view text, std::string_view default_tenant) {
  if (text.starts_with("spindle:")) return parse_address(text);
  check_name("tenant", default_tenant);
  Address out;
  out.tenant = std::string(default_tenant);
  parse_policy_part(text, text, out);
  return out;
}

void check_name(std::string_view kind, std::string_view name) {
  const std::string p = name_problem(name, kMaxNameChars, "._-");
  SPINDLE_CHECK(p.empty(), invalid_argument, "{} '{}' is not valid: {}", kind, name, p);
}

void check_base_id(std::string_view id) {
  std::string problem;
  if (id.empty()) {
    problem = "it is empty";
  } else if (id.size() > kMaxNameChars) {
    problem = fmt::format("it has {} characters, at most {} allowed", id.size(), kMaxNameChars);
  } else {
    // Names joined by single '/': every part (between slashes) is a valid name.
    size_t start = 0, part = 1;
    while (problem.empty()) {
      const size_t slash = std::min(id.find('/', start), id.size());
      const std::string_view name = id.substr(start, slash - start);
      if (name.empty()) {
        problem = start == 0           ? std::string("it must not start with '/'")
                  : slash == id.size() ? std::string("it must not end with '/'")
                                       : fmt::format("part {} between '/' is empty", part);
      } else if (std::string p = name_problem(name, kMaxNameChars, "._-"); !p.empty()) {
        problem = fmt::format("part '{}': {}", name, p);
      }
      if (slash == id.size()) break;
      start = slash + 1;
      ++part;
    }
  }
  SPINDLE_CHECK(problem.empty(), invalid_argument,
                "base model id '{}' is not valid: {} (use names of letters, digits and '._-', "
                "optionally joined by single '/', like 'Qwen/Qwen3-0.6B')",
                id, problem);
}

void check_tag(std::string_view tag) {
  const std::string p = name_problem(tag, kMaxTagChars, "._:-");
  SPINDLE_CHECK(p.empty(), invalid_argument, "tag '{}' is not valid: {}", tag, p);
}

}  // namespace spindle::catalog
