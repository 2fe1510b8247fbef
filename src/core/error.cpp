#include "core/error.h"

namespace fluxrt {

Error::~Error() = default;

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::NotFound: return "not found";
    case ErrorCode::Format: return "format error";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::Io: return "i/o error";
    case ErrorCode::OutOfMemory: return "out of memory";
    case ErrorCode::Device: return "device error";
    case ErrorCode::Internal: return "internal error";
    case ErrorCode::Cancelled: return "cancelled";
  }
  return "error";
}

}  // namespace fluxrt
