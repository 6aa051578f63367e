#include "spindle/core/error.h"

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
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

}  // namespace spindle
