#pragma once
// Error policy (STYLE.md 8): inside the backend every failure is a spindle::Error exception
// carrying a code and a message that names what was wrong (file, tensor, field, limit).
// Library code never aborts. Status codes appear only across the C ABI and the wire.

#include <fmt/format.h>

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace spindle {

enum class ErrorCode {
  invalid_argument,  // caller passed something malformed or out of range
  not_found,         // a file, tensor, token or slot that does not exist
  format,            // a file or message whose bytes do not follow its format
  unsupported,       // well-formed, but a feature Spindle does not implement
  io,                // the operating system refused a read or write
  resource,          // a fixed pool or limit is exhausted (slots, KV blocks, disk space, quota)
  already_exists,    // a name that is taken (a policy name in its tenant)
  failed_precondition,  // well-formed, but the state does not allow it now (no head yet, a
                        // base this server does not serve, a run that is not stopped)
  data_loss,         // stored bytes are damaged: a blob failing its checksum, a corrupt catalog
  internal,          // a broken invariant: a bug in Spindle
};

// Every code, in declaration order (for name lookups and exhaustive tests).
inline constexpr ErrorCode kAllErrorCodes[] = {
    ErrorCode::invalid_argument, ErrorCode::not_found,      ErrorCode::format,
    ErrorCode::unsupported,      ErrorCode::io,             ErrorCode::resource,
    ErrorCode::already_exists,   ErrorCode::failed_precondition, ErrorCode::data_loss,
    ErrorCode::internal};
static_assert(sizeof(kAllErrorCodes) / sizeof(ErrorCode) == size_t(ErrorCode::internal) + 1,
              "kAllErrorCodes must list every ErrorCode");

// The code's name ("invalid_argument", ...); error_code_from_name is its inverse.
const char* error_code_name(ErrorCode code);
std::optional<ErrorCode> error_code_from_name(std::string_view name);

// The code for an errno from a filesystem call, one mapping for every layer: resource for
// ENOSPC and EDQUOT (disk full or over quota: free space and retry), not_found for ENOENT and
// ENOTDIR, io for anything else. The message stays the caller's (it names the path).
ErrorCode error_code_for_errno(int err);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace spindle

// SPINDLE_CHECK(cond, code, "fmt {}", args...) throws spindle::Error(code, message) when cond
// is false. Use for input validation; the message must say what was wrong and what was expected.
#define SPINDLE_CHECK(cond, code, ...)                                              \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      throw ::spindle::Error((::spindle::ErrorCode::code), fmt::format(__VA_ARGS__)); \
    }                                                                               \
  } while (0)

// SPINDLE_THROW(code, "fmt {}", args...) throws unconditionally.
#define SPINDLE_THROW(code, ...) \
  throw ::spindle::Error((::spindle::ErrorCode::code), fmt::format(__VA_ARGS__))

// SPINDLE_ASSERT guards internal invariants (bugs, not bad input); records where.
#define SPINDLE_ASSERT(cond)                                                          \
  do {                                                                                \
    if (!(cond)) [[unlikely]] {                                                       \
      throw ::spindle::Error(::spindle::ErrorCode::internal,                          \
                             fmt::format("internal invariant '{}' failed at {}:{}", #cond, \
                                         __FILE__, __LINE__));                        \
    }                                                                                 \
  } while (0)
