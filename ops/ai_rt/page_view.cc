#include "ops/ai_rt/page_view.h"

#include <immintrin.h>

#include "core/affine_encoding.h"
#include "core/error.h"
#include "core/tensor_proto.h"
#include "onnx_light.pb.h"
#include "ops/math/cpu_features.h"
#include "ops/math/quantize.h"

namespace onnx_light::ops::ai_rt {

using core::ErrorCode;
using core::runtime::Tensor;

namespace {

[[noreturn]] void Fail(const std::string& where, const std::string& message) {
  core::Throw(ErrorCode::kInvalidArgument, where + ": " + message);
}

std::vector<float> FloatsOf(const TensorProto& proto) {
  const Tensor t = core::runtime::TensorFromProto(proto);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DataType::kFloat16:
        out[static_cast<size_t>(i)] = core::HalfToFloat(t.data<uint16_t>()[i]);
        break;
      case DataType::kBFloat16:
        out[static_cast<size_t>(i)] = core::BFloat16ToFloat(t.data<uint16_t>()[i]);
        break;
      default:
        out[static_cast<size_t>(i)] = t.data<float>()[i];
        break;
    }
  }
  return out;
}

std::vector<int32_t> CodesOf(const TensorProto& proto) {
  const Tensor t = core::runtime::TensorFromProto(proto);
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] = math::QuantGet(t.dtype(), t.raw_data(), i);
  return out;
}

}  // namespace

PageView PageView::Of(const RuntimeValue& payload, const std::string& where) {
  PageView view;
  if (payload.is_tensor()) {
    const Tensor& t = payload.tensor();
    if (t.dtype() != DataType::kFloat && t.dtype() != DataType::kFloat16 &&
        t.dtype() != DataType::kBFloat16)
      Fail(where, "dense page payload must be FLOAT, FLOAT16 or BFLOAT16, got " +
                      core::DataTypeName(t.dtype()));
    if (!t.contiguous()) Fail(where, "page payload must be a dense tensor, not a strided view");
    view.format_ = t.dtype();
    view.dims_ = t.shape();
    view.data_ = t.raw_data();
  } else if (payload.is_encoded()) {
    if (payload.encoded().layout_case() != EncodedValueProto::kAffine)
      Fail(where,
           "only affine encoded pages are supported; structured encodings need another "
           "consumer");
    const core::runtime::AffineEncoding enc = core::runtime::ResolveAffineEncoding(where, payload);
    if (enc.storage == DataType::kInt16 || enc.storage == DataType::kUint16)
      Fail(where, "16-bit affine pages are not supported (INT8, UINT8, INT4, UINT4, INT2, UINT2)");
    if (static_cast<DataType>(enc.scale->data_type()) != DataType::kFloat)
      Fail(where, "affine page scales must be FLOAT, got " +
                      core::DataTypeName(static_cast<DataType>(enc.scale->data_type())));
    const auto logical =
        static_cast<DataType>(payload.encoded().logical_type().tensor_type().elem_type());
    if (logical != DataType::kFloat)
      Fail(where, "affine page logical type must be FLOAT, got " + core::DataTypeName(logical));
    view.format_ = enc.storage;
    view.dims_ = enc.dims;
    view.data_ = payload.encoded().raw_data().data();
    view.affine_ = true;
    view.scales_ = FloatsOf(*enc.scale);
    view.zero_points_ =
        enc.zero_point ? CodesOf(*enc.zero_point) : std::vector<int32_t>(view.scales_.size(), 0);
    view.axis_ = enc.axis;
    view.block_ = enc.block_size;
    view.param_dims_ = Shape(enc.scale->dims().begin(), enc.scale->dims().end());
  } else {
    Fail(where, std::string("page payload must be a tensor or an encoded value, got ") +
                    RuntimeValue::KindName(payload.kind()));
  }
  if (view.dims_.size() != 4)
    Fail(where, "page payload must have rank 4 [batch, heads, capacity, width], got " +
                    core::runtime::ShapeToString(view.dims_));
  for (int64_t d : view.dims_)
    if (d <= 0)
      Fail(where, "page dims " + core::runtime::ShapeToString(view.dims_) + " must be positive");
  view.PrepareRows();
  return view;
}

void PageView::PrepareRows() {
  heads_ = dims_[1];
  capacity_ = dims_[2];
  width_ = dims_[3];
  math::CodeRows rows;
  // Dense, or one parameter for the whole payload (per-axis along the batch or the heads
  // stays with CodeRowsSlow: its parameter follows the coordinates).
  rows_uniform_ = false;
  if (CodeRowsSlow(0, 0, 0, 1, &rows) && (!affine_ || axis_ < 0)) {
    rows_uniform_ = true;
    rows_code_ = rows.code;
    rows_scale_ = rows.scale;
    rows_zero_ = rows.zero;
  }
}

int64_t PageView::ParamIndex(const int64_t coord[4]) const {
  if (axis_ < 0) return 0;
  if (block_ == 0) return coord[axis_];
  int64_t index = 0;
  for (int64_t a = 0; a < 4; ++a) {
    const int64_t c = a == axis_ ? coord[a] / block_ : coord[a];
    index = index * param_dims_[static_cast<size_t>(a)] + c;
  }
  return index;
}

namespace {

// 16-bit floats to FLOAT: F16C when the CPU has it (chosen at run time), else portable.
__attribute__((target("avx2,f16c"))) void HalfToFloatF16c(const uint16_t* in, int64_t n,
                                                          float* out) {
  int64_t t = 0;
  for (; t + 8 <= n; t += 8)
    _mm256_storeu_ps(out + t,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + t))));
  for (; t < n; ++t) out[t] = core::HalfToFloat(in[t]);
}

void HalfToFloats(const uint16_t* in, int64_t n, float* out) {
  if (math::CpuHasAvx2FmaF16c()) return HalfToFloatF16c(in, n, out);
  for (int64_t t = 0; t < n; ++t) out[t] = core::HalfToFloat(in[t]);
}

void BFloat16ToFloats(const uint16_t* in, int64_t n, float* out) {
  auto* bits = reinterpret_cast<uint32_t*>(out);
  for (int64_t t = 0; t < n; ++t) bits[t] = static_cast<uint32_t>(in[t]) << 16;
}

// Codes e0 .. e0 + n of a per-tensor page, (code - zero) * scale, one loop per code width so
// that the compiler vectorises it.
template <class Code>
void Affine8(const Code* c, int64_t n, float zero, float scale, float* out) {
  for (int64_t t = 0; t < n; ++t) out[t] = (static_cast<float>(c[t]) - zero) * scale;
}

// Packed codes (`bits` 4 or 2, low bits first), sign-extended when `is_signed`.
void AffinePacked(const uint8_t* bytes, int64_t e0, int64_t n, int bits, bool is_signed, float zero,
                  float scale, float* out) {
  const int per_byte = 8 / bits, mask = (1 << bits) - 1, sign = 1 << (bits - 1);
  int64_t t = 0;
  auto one = [&](int64_t e) {
    int v = (bytes[e / per_byte] >> (bits * (e % per_byte))) & mask;
    if (is_signed && v >= sign) v -= 1 << bits;
    return (static_cast<float>(v) - zero) * scale;
  };
  for (; t < n && (e0 + t) % per_byte != 0; ++t) out[t] = one(e0 + t);
  // Whole bytes: a lookup of each byte's decoded values would be faster still; this keeps
  // the loop branch-free for the compiler.
  const uint8_t* b = bytes + (e0 + t) / per_byte;
  for (; t + per_byte <= n; t += per_byte, ++b)
    for (int k = 0; k < per_byte; ++k) {
      int v = (*b >> (bits * k)) & mask;
      v -= is_signed && v >= sign ? (1 << bits) : 0;
      out[t + k] = (static_cast<float>(v) - zero) * scale;
    }
  for (; t < n; ++t) out[t] = one(e0 + t);
}

}  // namespace

void PageView::DecodeAffine(int64_t e0, int64_t n, const int64_t coord[4], float* out) const {
  const auto* u16 = static_cast<const uint16_t*>(data_);
  if (format_ == DataType::kFloat16) return HalfToFloats(u16 + e0, n, out);
  if (format_ == DataType::kBFloat16) return BFloat16ToFloats(u16 + e0, n, out);
  if (axis_ < 0) {
    const float scale = scales_[0], zero = static_cast<float>(zero_points_[0]);
    const auto* bytes = static_cast<const uint8_t*>(data_);
    switch (format_) {
      case DataType::kInt8:
        return Affine8(static_cast<const int8_t*>(data_) + e0, n, zero, scale, out);
      case DataType::kUint8:
        return Affine8(bytes + e0, n, zero, scale, out);
      case DataType::kInt4:
        return AffinePacked(bytes, e0, n, 4, true, zero, scale, out);
      case DataType::kUint4:
        return AffinePacked(bytes, e0, n, 4, false, zero, scale, out);
      case DataType::kInt2:
        return AffinePacked(bytes, e0, n, 2, true, zero, scale, out);
      case DataType::kUint2:
        return AffinePacked(bytes, e0, n, 2, false, zero, scale, out);
      default:
        break;
    }
  }
  auto code = [&](int64_t e) { return static_cast<float>(math::QuantGet(format_, data_, e)); };
  // Per-axis or blocked: the parameter follows the element's coordinates.
  int64_t c[4] = {coord[0], coord[1], coord[2], coord[3]};
  for (int64_t t = 0; t < n; ++t) {
    const auto p = static_cast<size_t>(ParamIndex(c));
    out[t] = (code(e0 + t) - static_cast<float>(zero_points_[p])) * scales_[p];
    for (int64_t a = 3; a >= 0 && ++c[a] == dims_[static_cast<size_t>(a)]; --a) c[a] = 0;
  }
}

void PageView::Prefetch(int64_t b, int64_t h, int64_t r0, int64_t n) const {
  const int64_t e0 = FirstElement(b, h, r0);
  const size_t first = core::StorageBytes(format_, e0);
  const size_t bytes = core::StorageBytes(format_, n * dims_[3]);
  const char* p = static_cast<const char*>(data_) + first;
  // Into L2 (prefetcht1), not L1: the block is read a few microseconds later, and filling L1
  // evicted the rows being computed on (FLOAT at 32k tokens: 46 -> 37 ms on one thread).
  for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(p + at, 0, 2);
}

float PageView::At(int64_t b, int64_t h, int64_t r, int64_t d) const {
  const int64_t e = FirstElement(b, h, r) + d;
  if (format_ == DataType::kFloat) return static_cast<const float*>(data_)[e];
  const int64_t coord[4] = {b, h, r, d};
  float out = 0;
  DecodeAffine(e, 1, coord, &out);
  return out;
}

const float* PageView::Rows(int64_t b, int64_t h, int64_t r0, int64_t n, float* buffer) const {
  const int64_t e0 = FirstElement(b, h, r0);
  if (format_ == DataType::kFloat) return static_cast<const float*>(data_) + e0;
  const int64_t coord[4] = {b, h, r0, 0};
  DecodeAffine(e0, n * dims_[3], coord, buffer);
  return buffer;
}

bool PageView::CodeRowsSlow(int64_t b, int64_t h, int64_t r0, int64_t n,
                            math::CodeRows* out) const {
  using math::RowCode;
  RowCode code;
  switch (format_) {
    case DataType::kFloat:
      code = RowCode::kFloat;
      break;
    case DataType::kFloat16:
      code = RowCode::kHalf;
      break;
    case DataType::kBFloat16:
      code = RowCode::kBFloat16;
      break;
    case DataType::kInt8:
      code = RowCode::kInt8;
      break;
    case DataType::kUint8:
      code = RowCode::kUint8;
      break;
    case DataType::kInt4:
      code = RowCode::kInt4;
      break;
    case DataType::kUint4:
      code = RowCode::kUint4;
      break;
    case DataType::kInt2:
      code = RowCode::kInt2;
      break;
    case DataType::kUint2:
      code = RowCode::kUint2;
      break;
    default:
      return false;
  }
  float scale = 1.0f, zero = 0.0f;
  if (affine_) {
    // One parameter for the rows: per-tensor, or per-axis along the batch or head axis.
    if (axis_ >= 0 && (block_ != 0 || axis_ > 1)) return false;
    const auto p = static_cast<size_t>(axis_ < 0 ? 0 : axis_ == 0 ? b : h);
    scale = scales_[p];
    zero = static_cast<float>(zero_points_[p]);
  }
  *out = {code, data_, FirstElement(b, h, r0), n, scale, zero};
  return true;
}

}  // namespace onnx_light::ops::ai_rt
