// Shared pieces of the libFuzzer harnesses (tests/fuzz/fuzz_*.cc).
//
// Expected outcomes for bad input are onnx_light::core::Error (kInvalidArgument, ...,
// kResourceExhausted for a size past max_tensor_bytes) and std::bad_alloc from an allocation
// ASan refuses (run with allocator_may_return_null=1). Any other exception escapes the
// harness and libFuzzer reports it as a crash: a finding, like a sanitizer report or a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/runtime_value.h"
#include "core/tensor.h"
#include "onnx_light.pb.h"

namespace fuzz {

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

// The limit the harnesses give sessions and states: a runaway allocation becomes an error.
constexpr size_t kMaxTensorBytes = size_t{64} << 20;
// The state harnesses (paged_cache, state_feeds) decode their values from at most a few KB
// of input and run Identity/Add/SequenceInsert on them: every code path, the limit's own
// error included, is reached well below 1 MiB. At 64 MB a decoded shape like [255, 255,
// 255, 4] allocated and zeroed up to 64 MB per input (ASan maps and poisons it), and the
// long runs spent their time in page faults instead of in the runtime.
constexpr size_t kStateMaxTensorBytes = size_t{1} << 20;

template <typename F>
void Expect(F&& f) {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::bad_alloc&) {
  }
}

// Consumes the fuzzer's bytes front to back; reads past the end give zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  uint8_t U8() { return p_ < end_ ? *p_++ : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  int64_t I64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{U8()} << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::string_view Bytes(size_t n) {
    n = n < left() ? n : left();
    std::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::string_view Rest() { return Bytes(left()); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Zeros of `dtype` and `shape` (allocated through the checked Tensor constructor).
inline Tensor Zeros(const std::string& name, DataType dtype, const Shape& shape) {
  Tensor t(name, dtype, shape);
  if (dtype != DataType::kString && t.nbytes() > 0)
    std::memset(t.mutable_raw_data(), 0, t.nbytes());
  return t;
}

// Feeds for every graph input that has no initializer: zeros of the declared tensor type,
// with symbolic or unknown dimensions set to 2 and concrete ones above 16 capped to 16 (total
// capped at 64 Ki elements). Non-tensor inputs get no feed (a missing-input error, or their
// default).
inline RuntimeValueMap ZeroFeeds(const GraphProto& graph) {
  RuntimeValueMap feeds;
  for (const auto& input : graph.input()) {
    bool has_init = false;
    for (const auto& init : graph.initializer()) has_init |= init.name() == input.name();
    if (has_init || !input.type().has_tensor_type()) continue;
    const auto& tt = input.type().tensor_type();
    Shape shape;
    int64_t numel = 1;
    for (const auto& d : tt.shape().dim()) {
      int64_t v = d.has_dim_value() ? d.dim_value() : 2;
      if (v < 0 || v > 16) v = v < 0 ? 2 : 16;
      if (numel * (v == 0 ? 1 : v) > (int64_t{1} << 16)) v = 1;
      numel *= v == 0 ? 1 : v;
      shape.push_back(v);
    }
    auto dtype = static_cast<DataType>(tt.elem_type());
    if (tt.elem_type() <= 0 || tt.elem_type() > 26) dtype = DataType::kFloat;
    Expect([&] { feeds[input.name()] = RuntimeValue(Zeros(input.name(), dtype, shape)); });
  }
  return feeds;
}

// Whether a view of `shape` with element `strides` ends inside `bytes` bytes (empty views
// and negative dims, which the runtime refuses, count as fitting).
inline bool ViewFits(const Shape& shape, const Shape& strides, DataType dtype, size_t bytes) {
  __int128 last = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) return true;
    last += static_cast<__int128>(shape[i] - 1) * strides[i];
  }
  return (last + 1) * (core::ElementBits(dtype) / 8) <= static_cast<__int128>(bytes);
}

inline RuntimeValue ReadValueOrThrow(Reader& r, int depth);

// A value decoded from fuzzer bytes: tensors (dense, borrowed, strided), structs, sequences,
// encoded values and empties, nested up to `depth`. A part the runtime refuses to build (a
// tensor past max_tensor_bytes, bad strides) becomes an empty value.
inline RuntimeValue ReadValue(Reader& r, int depth) {
  try {
    return ReadValueOrThrow(r, depth);
  } catch (const Error&) {
  } catch (const std::bad_alloc&) {
  }
  return RuntimeValue();
}

inline RuntimeValue ReadValueOrThrow(Reader& r, int depth) {
  static const DataType kTypes[] = {DataType::kFloat,   DataType::kInt64, DataType::kInt32,
                                    DataType::kFloat16, DataType::kBool,  DataType::kUint8,
                                    DataType::kDouble,  DataType::kInt4,  DataType::kString,
                                    DataType::kBFloat16};
  static const char* kNames[] = {"blocks", "start", "length", "key", "value", "a", "b", ""};
  const uint8_t kind = r.U8();
  switch (depth <= 0 ? kind % 2 : kind % 7) {
    case 0:
    case 1:
    case 2: {
      const DataType dtype = kTypes[r.U8() % std::size(kTypes)];
      const int rank = r.U8() % 5;
      Shape shape;
      for (int i = 0; i < rank; ++i) {
        const uint8_t d = r.U8();
        shape.push_back(d == 255 ? r.I64() : d % 6);
      }
      const uint8_t how = kind % 3;
      if (how == 2 && dtype != DataType::kString && dtype != DataType::kInt4) {
        // A read-only view with fuzzed strides over a small owned buffer. StridedView trusts
        // its caller for the extent (it is given no size), so views past the buffer are not
        // built: they would be the harness's out-of-bounds read, not the runtime's.
        auto owner = std::make_shared<std::vector<uint8_t>>(512, 0);
        Shape strides;
        for (int i = 0; i < rank; ++i) strides.push_back(r.U8() % 8);
        if (ViewFits(shape, strides, dtype, owner->size()))
          return RuntimeValue(
              Tensor::StridedView("t", dtype, shape, strides, owner->data(), owner));
      }
      Tensor t = Zeros("t", dtype, shape);
      if (dtype != DataType::kString) {
        std::string_view bytes = r.Bytes(t.nbytes());
        if (!bytes.empty()) std::memcpy(t.mutable_raw_data(), bytes.data(), bytes.size());
      }
      if (how == 1) return RuntimeValue(t.BorrowView());
      return RuntimeValue(std::move(t));
    }
    case 3: {
      const std::string name = kNames[r.U8() % std::size(kNames)];
      std::vector<RuntimeValue::Field> fields;
      const int n = r.U8() % 5;
      for (int i = 0; i < n; ++i) {
        std::string field = kNames[r.U8() % std::size(kNames)];
        fields.emplace_back(std::move(field), ReadValue(r, depth - 1));
      }
      return RuntimeValue::Struct(name, std::move(fields));
    }
    case 4: {
      std::vector<RuntimeValue> elements;
      const int n = r.U8() % 6;
      for (int i = 0; i < n; ++i) elements.push_back(ReadValue(r, depth - 1));
      return RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(elements)));
    }
    case 5: {
      auto e = std::make_shared<EncodedValueProto>();
      std::string_view bytes = r.Bytes(r.U16() % 2048);
      if (!e->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return RuntimeValue();
      return RuntimeValue::Encoded(std::move(e));
    }
    default:
      return RuntimeValue();
  }
}

}  // namespace fuzz
