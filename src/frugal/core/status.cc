#include "frugal/core/status.h"

namespace frugal {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kNotSupported: return "not supported";
    case ErrorCode::kOverBudget: return "over budget";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", error_code_name(code_), message_);
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace frugal
