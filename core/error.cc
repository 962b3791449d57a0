#include "core/error.h"

namespace onnx_light::core {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kTypeError:
      return "type error";
    case ErrorCode::kInvalidModel:
      return "invalid model";
    case ErrorCode::kNotImplemented:
      return "not implemented";
    case ErrorCode::kFailedPrecondition:
      return "failed precondition";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kRuntime:
      return "runtime error";
    case ErrorCode::kResourceExhausted:
      return "resource exhausted";
  }
  return "unknown";
}

std::string EscapeNul(const std::string& message) {
  if (message.find('\0') == std::string::npos) return message;
  std::string out;
  out.reserve(message.size() + 8);
  for (char c : message) {
    if (c == '\0')
      out += "\\x00";
    else
      out += c;
  }
  return out;
}

}  // namespace onnx_light::core
