#include "core/error.h"

namespace onnx_light::core {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kTypeError: return "type error";
    case ErrorCode::kInvalidModel: return "invalid model";
    case ErrorCode::kNotImplemented: return "not implemented";
    case ErrorCode::kFailedPrecondition: return "failed precondition";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kRuntime: return "runtime error";
  }
  return "unknown";
}

}  // namespace onnx_light::core
