#include "ops/math/common.h"

#include <algorithm>
#include <cstring>

#include "core/allocator.h"
#include "core/dtype.h"
#include "executor/attributes.h"
#include "onnx_light.pb.h"
#include "ops/math/half_convert.h"

namespace onnx_light::ops::math {

using core::ErrorCode;
using core::runtime::NodeLabel;
using core::runtime::ShapeToString;

void ThrowUnsupportedType(const NodeProto& node, const std::string& what, DataType dtype) {
  core::Throw(ErrorCode::kNotImplemented, NodeLabel(node) + ": " + what + " of type " +
                                              core::DataTypeName(dtype) + " is not supported");
}

void ThrowBadInput(const NodeProto& node, const std::string& message) {
  core::Throw(ErrorCode::kInvalidArgument, NodeLabel(node) + ": " + message);
}

bool IsHalfType(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }
bool IsFloatType(DataType t) { return t == DataType::kFloat || IsHalfType(t); }

void ToFloat(DataType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DataType::kFloat:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DataType::kFloat16:
      return HalvesToFloats(static_cast<const uint16_t*>(src), dst, n);
    case DataType::kBFloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = core::BFloat16ToFloat(s[i]);
      return;
    }
    default:
      core::Throw(ErrorCode::kNotImplemented, "ToFloat: " + core::DataTypeName(type));
  }
}

void FromFloat(const float* src, DataType type, void* dst, int64_t n) {
  switch (type) {
    case DataType::kFloat:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DataType::kFloat16:
      return FloatsToHalves(src, static_cast<uint16_t*>(dst), n);
    case DataType::kBFloat16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = core::FloatToBFloat16(src[i]);
      return;
    }
    default:
      core::Throw(ErrorCode::kNotImplemented, "FromFloat: " + core::DataTypeName(type));
  }
}

namespace {

constexpr int64_t kConvertChunk = int64_t{1} << 15;  // values a task converts

// `n` values in chunks of kConvertChunk, `convert(first, count)` for each, in parallel.
template <typename Convert>
void InChunks(int64_t n, const Convert& convert) {
  if (n <= kConvertChunk) return convert(0, n);
  ParallelFor((n + kConvertChunk - 1) / kConvertChunk, 1, [&](int64_t c0, int64_t c1) {
    const int64_t first = c0 * kConvertChunk;
    convert(first, std::min(n, c1 * kConvertChunk) - first);
  });
}

std::shared_ptr<void> FloatBuffer(int64_t n) {
  return core::runtime::DefaultAllocator().Allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) *
                                                    sizeof(float));
}

}  // namespace

void ToFloatParallel(DataType type, const void* src, float* dst, int64_t n) {
  const size_t size = core::StorageBytes(type, 1);  // (FLOAT, FLOAT16 or BFLOAT16)
  InChunks(n, [&](int64_t first, int64_t count) {
    ToFloat(type, static_cast<const char*>(src) + static_cast<size_t>(first) * size, dst + first,
            count);
  });
}

void FromFloatParallel(const float* src, DataType type, void* dst, int64_t n) {
  const size_t size = core::StorageBytes(type, 1);  // (FLOAT, FLOAT16 or BFLOAT16)
  InChunks(n, [&](int64_t first, int64_t count) {
    FromFloat(src + first, type, static_cast<char*>(dst) + static_cast<size_t>(first) * size,
              count);
  });
}

void CopyColumns(const float* c, int64_t m, int64_t width, int64_t offset, int64_t n, DataType type,
                 void* out) {
  const size_t size = core::StorageBytes(type, 1);
  const int64_t grain = std::max<int64_t>(1, kConvertChunk / std::max<int64_t>(n, 1));
  ParallelFor(m, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      FromFloat(c + r * width + offset, type,
                static_cast<char*>(out) + static_cast<size_t>(r * n) * size, n);
  });
}

FloatView::FloatView(const Tensor& t) {
  if (t.dtype() == DataType::kFloat) {
    // The first element: a kernel that accepts a strided input indexes it by its strides.
    ptr_ = static_cast<const float*>(t.strided_data());
    return;
  }
  buffer_ = FloatBuffer(t.numel());
  auto* values = static_cast<float*>(buffer_.get());
  ToFloatParallel(t.dtype(), t.raw_data(), values, t.numel());
  ptr_ = values;
}

FloatSink::FloatSink(Tensor& out) : out_(out) {
  if (out.dtype() == DataType::kFloat) {
    ptr_ = out.mutable_data<float>();
    return;
  }
  buffer_ = FloatBuffer(out.numel());
  ptr_ = static_cast<float*>(buffer_.get());
}

void FloatSink::Finish() {
  if (out_.dtype() != DataType::kFloat)
    FromFloatParallel(ptr_, out_.dtype(), out_.mutable_raw_data(), out_.numel());
}

int64_t NormalizeAxis(const NodeProto& node, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    ThrowBadInput(node, std::string(what) + " " + std::to_string(axis) +
                            " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> IntValues(const NodeProto& node, const Tensor& t, const char* what) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::kInt64) {
    std::copy_n(t.data<int64_t>(), t.numel(), v.begin());
  } else if (t.dtype() == DataType::kInt32) {
    std::copy_n(t.data<int32_t>(), t.numel(), v.begin());
  } else {
    ThrowUnsupportedType(node, what, t.dtype());
  }
  return v;
}

int64_t ScalarInt(const NodeProto& node, const Tensor& t, const char* what) {
  if (t.numel() != 1)
    ThrowBadInput(
        node, std::string(what) + " must hold one value, got shape " + ShapeToString(t.shape()));
  return IntValues(node, t, what)[0];
}

}  // namespace onnx_light::ops::math

namespace onnx_light::ops::math {
std::vector<int64_t> BroadcastIndex(const Shape& out_shape, const Shape& in_shape) {
  const size_t r = out_shape.size();
  std::vector<int64_t> in_strides(r, 0);
  const std::vector<int64_t> s = core::runtime::DenseStrides(in_shape);
  for (size_t i = 0; i < in_shape.size(); ++i) {
    const size_t o = r - in_shape.size() + i;
    in_strides[o] = in_shape[i] == 1 ? 0 : s[i];
  }
  const int64_t n = core::runtime::ShapeNumel(out_shape);
  std::vector<int64_t> index(static_cast<size_t>(n));
  std::vector<int64_t> counter(r, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    index[static_cast<size_t>(i)] = off;
    for (size_t d = r; d-- > 0;) {
      if (++counter[d] < out_shape[d]) {
        off += in_strides[d];
        break;
      }
      off -= in_strides[d] * (counter[d] - 1);
      counter[d] = 0;
    }
  }
  return index;
}
const Tensor& LastRows(const KernelCall& call, const Tensor& a, Tensor& holder) {
  if (a.rank() < 2 || a.dim(-2) <= 1) return a;
  const Tensor dense = a.Contiguous(call.allocator());
  Shape shape = dense.shape();
  const int64_t m = shape[shape.size() - 2];
  shape[shape.size() - 2] = 1;
  holder = Tensor(dense.name(), dense.dtype(), shape, call.allocator());
  const size_t row = core::StorageBytes(dense.dtype(), dense.dim(-1));
  const auto* src = static_cast<const char*>(dense.raw_data());
  auto* dst = static_cast<char*>(holder.mutable_raw_data());
  const int64_t per_matrix = m * dense.dim(-1);
  const int64_t matrices = per_matrix == 0 ? 0 : dense.numel() / per_matrix;
  for (int64_t i = 0; i < matrices; ++i)
    std::memcpy(dst + static_cast<size_t>(i) * row, src + static_cast<size_t>(i * m + m - 1) * row,
                row);
  return holder;
}

}  // namespace onnx_light::ops::math
