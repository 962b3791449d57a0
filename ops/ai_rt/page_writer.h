// New paged-cache payloads: FLOAT rows encoded into a dense FLOAT/FLOAT16/BFLOAT16 tensor or
// an affine EncodedValueProto with a scalar scale and zero point (round half to even,
// saturated to the code range). Shared by PagedAttention (appends) and QuantizePagedCache
// (conversions of selected pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "core/runtime_value.h"

namespace onnx_light::ops::ai_rt {

using core::DataType;
using core::runtime::RuntimeValue;

// A page format: dense (FLOAT, FLOAT16, BFLOAT16: scale and zero point unused) or affine
// (INT8, UINT8, INT4, UINT4, INT2, UINT2).
struct PageFormat {
  DataType storage = DataType::kFloat;
  float scale = 1.0f;
  int32_t zero_point = 0;
  bool affine() const;
  bool operator==(const PageFormat&) const = default;
};

// Throws kInvalidArgument "<where>: ..." unless `format` can be written: a supported type,
// for affine a positive finite scale and a zero point within the code range.
void CheckPageFormat(const PageFormat& format, const std::string& where);

// FLOAT rows: element (b, h, r, d) at data[b * batch_stride + h * head_stride + r * width + d].
struct RowSource {
  const float* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0;
};

// A payload of logical shape [batch, heads, capacity, width] whose first `rows` rows of each
// (b, h) come from `src` and whose other rows are logical zeros (never read from `src`).
// Dense payloads come from `allocator`. `written` grows by the payload bytes of the rows.
RuntimeValue EncodePage(const PageFormat& format, const RowSource& src, int64_t batch,
                        int64_t heads, int64_t capacity, int64_t width, int64_t rows,
                        core::runtime::Allocator& allocator, size_t* written);

// The format of a payload EncodePage made (its certificate: the payload's storage belongs to
// the page writers, so its spare rows may be written when nobody else can see them), or
// null for any other payload (imported, borrowed, built by someone else).
const PageFormat* WritablePageFormat(const RuntimeValue& payload);

// Writes rows [row0, row0 + rows) of every (b, h) of a payload EncodePage made, from `src`
// (its rows 0..rows), in the payload's format. Only for rows no alias can observe: the
// caller holds the page alone (PagedTail::kExclusive) and the rows are past its length.
void WriteRows(const RuntimeValue& payload, const RowSource& src, int64_t row0, int64_t rows,
               size_t* written);

}  // namespace onnx_light::ops::ai_rt
