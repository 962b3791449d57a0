// One exception type for the whole runtime, carrying a code that the Python binding maps to
// ValueError / TypeError / RuntimeError / a cancellation error. Messages name the input,
// node or binding at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace onnx_light::core {

enum class ErrorCode {
  kInvalidArgument,     // bad caller input (feeds, initial values, options) -> ValueError
  kTypeError,           // wrong kind of value (tuple for a sequence, ...)   -> TypeError
  kInvalidModel,        // the model breaks a structural or binding rule     -> ValueError
  kNotImplemented,      // valid ONNX this runtime does not support (yet)     -> NotImplementedError
  kFailedPrecondition,  // wrong lifecycle: closed state, overlapping calls   -> RuntimeError
  kCancelled,           // a TaskCompletion was cancelled                    -> CancelledError
  kRuntime,             // a kernel failed while running                      -> RuntimeError
  kResourceExhausted,   // a size past max_tensor_bytes, or allocation failed -> MemoryError
};

const char* ErrorCodeName(ErrorCode code);
// `message` with each NUL byte written as \x00: what() is a C string, and a name from a
// model may hold NULs that would otherwise cut the message short.
std::string EscapeNul(const std::string& message);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(EscapeNul(message)), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

[[noreturn]] inline void Throw(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

}  // namespace onnx_light::core

// Checks a condition that depends on input; the message is built only on failure.
#define OL_CHECK(cond, code, message)                          \
  do {                                                         \
    if (!(cond)) ::onnx_light::core::Throw((code), (message)); \
  } while (0)
