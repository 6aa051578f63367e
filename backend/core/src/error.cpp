#include "spindle/core/error.h"

#include <cerrno>

namespace spindle {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::format: return "format";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::io: return "io";
    case ErrorCode::resource: return "resource";
    case ErrorCode::already_exists: return "already_exists";
    case ErrorCode::failed_precondition: return "failed_precondition";
    case ErrorCode::data_loss: return "data_loss";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

std::optional<ErrorCode> error_code_from_name(std::string_view name) {
  for (ErrorCode c : kAllErrorCodes) {
    if (name == error_code_name(c)) return c;
  }
  return std::nullopt;
}

ErrorCode error_code_for_errno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT: return ErrorCode::resource;
    case ENOENT:
    case ENOTDIR: return ErrorCode::not_found;
    default: return ErrorCode::io;
  }
}

}  // namespace spindle
