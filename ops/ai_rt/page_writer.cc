#include "ops/ai_rt/page_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/paged_cache.h"
#include "onnx_light.pb.h"
#include "ops/ai_rt/page_pool.h"
#include "ops/math/quantize.h"

namespace onnx_light::ops::ai_rt {

using core::ErrorCode;
using core::runtime::Shape;
using core::runtime::Tensor;

namespace {

// The code of x: round half to even (nearbyint under the default rounding mode), saturated.
int32_t Quantize(float x, const PageFormat& f, int32_t lo, int32_t hi) {
  const float q = std::nearbyint(x / f.scale) + static_cast<float>(f.zero_point);
  return static_cast<int32_t>(
      std::min(std::max(q, static_cast<float>(lo)), static_cast<float>(hi)));
}

void PutCode(DataType t, void* data, int64_t i, int32_t code) {
  switch (t) {
    case DataType::kInt8:
      static_cast<int8_t*>(data)[i] = static_cast<int8_t>(code);
      return;
    case DataType::kUint8:
      static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(code);
      return;
    default:
      core::PackedSet(t, data, i, code);
      return;
  }
}

void PutFloat(DataType t, void* data, int64_t i, float x) {
  switch (t) {
    case DataType::kFloat16:
      static_cast<uint16_t*>(data)[i] = core::FloatToHalf(x);
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = core::FloatToBFloat16(x);
      return;
    default:
      static_cast<float*>(data)[i] = x;
      return;
  }
}

// A FLOAT page's rows: each head's rows copied at once, the spare rows zeroed (an element at
// a time through PutFloat took 6% of a 128-token prompt's call).
void CopyFloatRows(const RowSource& src, int64_t batch, int64_t heads, int64_t capacity,
                   int64_t width, int64_t rows, float* out) {
  const auto valid = static_cast<size_t>(rows * width);
  const auto spare = static_cast<size_t>((capacity - rows) * width);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      std::memcpy(out, src.data + b * src.batch_stride + h * src.head_stride,
                  valid * sizeof(float));
      std::fill(out + valid, out + valid + spare, 0.0f);
      out += valid + spare;
    }
}

TensorProto ScalarProto(DataType t, float value, int32_t code) {
  TensorProto p;
  p.set_data_type(static_cast<int32_t>(t));
  std::string bytes(core::StorageBytes(t, 1), '\0');
  if (t == DataType::kFloat)
    std::memcpy(bytes.data(), &value, sizeof value);
  else
    PutCode(t, bytes.data(), 0, code);
  p.set_raw_data(std::move(bytes));
  return p;
}

// The deleters of the payloads EncodePage makes: their type is the certificate that a
// payload's storage belongs to the page writers, and they carry its format.
struct DensePageOwner {
  std::shared_ptr<const void> storage;
  PageFormat format;
  void operator()(const void*) { storage.reset(); }
};
struct EncodedPageOwner {
  PageFormat format;
  void operator()(const EncodedValueProto* p) const { delete p; }
};

// Writes rows [row0, row0 + rows) of every (b, h) of a [batch, heads, capacity, width] payload
// at `data`, the source's rows 0..rows.
template <class Put>
void PutRows(const RowSource& src, const Shape& dims, int64_t row0, int64_t rows, Put put) {
  for (int64_t b = 0; b < dims[0]; ++b)
    for (int64_t h = 0; h < dims[1]; ++h) {
      const float* row = src.data + b * src.batch_stride + h * src.head_stride;
      const int64_t first = ((b * dims[1] + h) * dims[2] + row0) * dims[3];
      for (int64_t e = 0; e < rows * dims[3]; ++e) put(first + e, row[e]);
    }
}

// A byte of codes that are all the zero point (each of its 8 / bits element slots).
uint8_t ZeroCodeByte(const PageFormat& f) {
  const int bits = core::ElementBits(f.storage);
  const auto code = static_cast<uint32_t>(f.zero_point) & ((1u << bits) - 1);
  uint32_t byte = 0;
  for (int at = 0; at < 8; at += bits) byte |= code << at;
  return static_cast<uint8_t>(byte);
}

}  // namespace

bool PageFormat::affine() const {
  return storage != DataType::kFloat && storage != DataType::kFloat16 &&
         storage != DataType::kBFloat16;
}

void CheckPageFormat(const PageFormat& format, const std::string& where) {
  const DataType s = format.storage;
  OL_CHECK(core::runtime::IsPageStorageType(s), ErrorCode::kInvalidArgument,
           where + ": unsupported page format " + core::DataTypeName(s) +
               " (FLOAT, FLOAT16, BFLOAT16, INT8, UINT8, INT4, UINT4, INT2, UINT2)");
  if (s == DataType::kFloat || s == DataType::kFloat16 || s == DataType::kBFloat16) return;
  OL_CHECK(std::isfinite(format.scale) && format.scale > 0, ErrorCode::kInvalidArgument,
           where + ": the " + core::DataTypeName(format.storage) +
               " scale must be positive and finite, got " + std::to_string(format.scale));
  int32_t lo = 0, hi = 0;
  math::QuantRange(format.storage, &lo, &hi);
  OL_CHECK(format.zero_point >= lo && format.zero_point <= hi, ErrorCode::kInvalidArgument,
           where + ": the zero point " + std::to_string(format.zero_point) + " is outside the " +
               core::DataTypeName(format.storage) + " range [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]");
}

RuntimeValue EncodePage(const PageFormat& format, const RowSource& src, int64_t batch,
                        int64_t heads, int64_t capacity, int64_t width, int64_t rows,
                        core::runtime::Allocator& allocator, size_t* written) {
  const Shape dims{batch, heads, capacity, width};
  const int64_t valid = batch * heads * rows * width;
  *written += core::StorageBytes(format.storage, valid);
  if (!format.affine()) {
    // The process heap's pages come from the page pool's huge-page slabs (page_pool.h).
    std::shared_ptr<void> storage;
    if (&allocator == &core::runtime::DefaultAllocator())
      storage = PagePool::Instance().Allocate(
          core::StorageBytes(format.storage, core::runtime::ShapeNumel(dims)));
    Tensor page;
    if (storage == nullptr) page = Tensor("", format.storage, dims, allocator);
    void* data = storage != nullptr ? storage.get() : page.mutable_raw_data();
    if (format.storage == DataType::kFloat) {
      CopyFloatRows(src, batch, heads, capacity, width, rows, static_cast<float*>(data));
    } else {  // zero bits are +0 in FLOAT16 and BFLOAT16
      std::memset(data, 0, core::StorageBytes(format.storage, core::runtime::ShapeNumel(dims)));
      PutRows(src, dims, 0, rows,
              [&](int64_t e, float x) { PutFloat(format.storage, data, e, x); });
    }
    std::shared_ptr<const void> owner(
        data, DensePageOwner{storage != nullptr ? std::shared_ptr<const void>(std::move(storage))
                                                : page.owner(),
                             format});
    return RuntimeValue(Tensor::Borrow("", format.storage, dims, data, std::move(owner)));
  }
  std::shared_ptr<EncodedValueProto> encoded(new EncodedValueProto, EncodedPageOwner{format});
  AffineLayoutProto* layout = encoded->mutable_affine();
  layout->set_storage_type(static_cast<int32_t>(format.storage));
  *layout->mutable_scale() = ScalarProto(DataType::kFloat, format.scale, 0);
  *layout->mutable_zero_point() = ScalarProto(format.storage, 0, format.zero_point);
  auto* logical = encoded->mutable_logical_type()->mutable_tensor_type();
  logical->set_elem_type(static_cast<int32_t>(DataType::kFloat));
  for (int64_t d : dims) logical->mutable_shape()->add_dim()->set_dim_value(d);
  // The spare rows hold the code of 0 (the zero point), written a byte at a time: one
  // element at a time, the 15 spare rows of a decode step's new page cost 8% of an INT4
  // step at 32k tokens (perf/bench_paged_attention.cc).
  std::string codes(core::StorageBytes(format.storage, core::runtime::ShapeNumel(dims)),
                    static_cast<char>(ZeroCodeByte(format)));
  int32_t lo = 0, hi = 0;
  math::QuantRange(format.storage, &lo, &hi);
  PutRows(src, dims, 0, rows, [&](int64_t e, float x) {
    PutCode(format.storage, codes.data(), e, Quantize(x, format, lo, hi));
  });
  encoded->set_raw_data(std::move(codes));
  return RuntimeValue::Encoded(std::move(encoded));
}

const PageFormat* WritablePageFormat(const RuntimeValue& payload) {
  if (payload.is_tensor()) {
    const auto* owner = std::get_deleter<DensePageOwner>(payload.tensor().owner());
    return owner != nullptr ? &owner->format : nullptr;
  }
  if (payload.is_encoded()) {
    const auto* owner = std::get_deleter<EncodedPageOwner>(payload.encoded_ptr());
    return owner != nullptr ? &owner->format : nullptr;
  }
  return nullptr;
}

void WriteRows(const RuntimeValue& payload, const RowSource& src, int64_t row0, int64_t rows,
               size_t* written) {
  const PageFormat* format = WritablePageFormat(payload);
  OL_CHECK(format != nullptr, ErrorCode::kFailedPrecondition,
           "WriteRows: the payload was not made by EncodePage");
  if (payload.is_tensor()) {
    const Tensor& t = payload.tensor();
    // The certificate says these bytes are ours; the caller says no alias can see the rows.
    void* data = const_cast<void*>(t.raw_data());
    PutRows(src, t.shape(), row0, rows,
            [&](int64_t e, float x) { PutFloat(format->storage, data, e, x); });
    *written +=
        core::StorageBytes(format->storage, t.shape()[0] * t.shape()[1] * rows * t.shape()[3]);
    return;
  }
  // An EncodedValueProto made by EncodePage is never const underneath (see EncodedPageOwner).
  auto* encoded = const_cast<EncodedValueProto*>(payload.encoded_ptr().get());
  const auto& shape = encoded->logical_type().tensor_type().shape();
  const Shape dims{shape.dim(0).dim_value(), shape.dim(1).dim_value(), shape.dim(2).dim_value(),
                   shape.dim(3).dim_value()};
  int32_t lo = 0, hi = 0;
  math::QuantRange(format->storage, &lo, &hi);
  char* codes = encoded->mutable_raw_data()->data();
  PutRows(src, dims, row0, rows, [&](int64_t e, float x) {
    PutCode(format->storage, codes, e, Quantize(x, *format, lo, hi));
  });
  *written += core::StorageBytes(format->storage, dims[0] * dims[1] * rows * dims[3]);
}

}  // namespace onnx_light::ops::ai_rt
