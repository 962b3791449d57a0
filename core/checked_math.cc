#include "core/checked_math.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/allocator.h"
#include "core/error.h"

namespace onnx_light::core {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

[[noreturn]] void Overflow(std::string_view what, const std::string& detail) {
  Throw(ErrorCode::kInvalidArgument, std::string(what) + ": " + detail);
}

void CheckCount(int64_t v, std::string_view what) {
  if (v < 0) Overflow(what, "negative count " + std::to_string(v));
}

std::string DimsText(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

thread_local size_t tls_limit = 0;  // 0: not set on this thread, the process default applies

}  // namespace

int64_t CheckedMul(int64_t a, int64_t b, std::string_view what) {
  CheckCount(a, what);
  CheckCount(b, what);
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    Overflow(what, std::to_string(a) + " x " + std::to_string(b) + " overflows int64");
  return r;
}

int64_t CheckedAdd(int64_t a, int64_t b, std::string_view what) {
  CheckCount(a, what);
  CheckCount(b, what);
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    Overflow(what, std::to_string(a) + " + " + std::to_string(b) + " overflows int64");
  return r;
}

int64_t CheckedSignedAdd(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    Overflow(what, std::to_string(a) + " + " + std::to_string(b) + " overflows int64");
  return r;
}

int64_t CheckedNumel(std::span<const int64_t> dims, std::string_view what) {
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t d : dims) {
    if (d < 0) Overflow(what, "negative dimension in shape " + DimsText(dims));
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, d, &nonzero))
      Overflow(what, "the element count of shape " + DimsText(dims) + " overflows int64");
  }
  return empty ? 0 : nonzero;
}

size_t CheckedStorageBytes(DataType type, int64_t count, std::string_view what) {
  CheckCount(count, what);
  const int64_t bits = ElementBits(type);
  int64_t total_bits = 0;
  if (__builtin_mul_overflow(count, bits, &total_bits) || total_bits > kMax - 7)
    Overflow(what, std::to_string(count) + " elements of " + DataTypeName(type) +
                       " overflow the byte size");
  return static_cast<size_t>((total_bits + 7) / 8);
}

int64_t CheckedCountFromDouble(double value, std::string_view what) {
  // 2^62: far above any real count, and exactly representable, so the cast is defined.
  constexpr double kLimit = 4611686018427387904.0;
  if (!std::isfinite(value) || value < 0 || value >= kLimit)
    Overflow(what, "count " + std::to_string(value) + " is not a finite count below 2^62");
  return static_cast<int64_t>(value);
}

size_t DefaultMaxTensorBytes() {
  static const size_t kDefault = [] {
    const size_t memory = runtime::PhysicalMemoryBytes();
    return memory == 0 ? std::numeric_limits<size_t>::max() : memory / 2;
  }();
  return kDefault;
}

size_t MaxTensorBytes() { return tls_limit == 0 ? DefaultMaxTensorBytes() : tls_limit; }

void CheckTensorBytes(size_t bytes, std::string_view what) {
  const size_t limit = MaxTensorBytes();
  if (bytes <= limit) return;
  Throw(ErrorCode::kResourceExhausted,
        std::string(what) + " needs " + std::to_string(bytes) +
            " bytes, more than max_tensor_bytes = " + std::to_string(limit));
}

ScopedMaxTensorBytes::ScopedMaxTensorBytes(size_t limit)
    : previous_(tls_limit), active_(limit != 0) {
  if (active_) tls_limit = limit;
}

ScopedMaxTensorBytes::~ScopedMaxTensorBytes() {
  if (active_) tls_limit = previous_;
}

}  // namespace onnx_light::core
