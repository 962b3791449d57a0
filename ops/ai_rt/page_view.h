// One payload (key or value) of one paged-cache page, checked once and read as FLOAT rows.
// A payload is a dense FLOAT/FLOAT16/BFLOAT16 tensor or an affine EncodedValueProto
// (INT8/UINT8/INT4/UINT4/INT2/UINT2 codes, FLOAT/FLOAT16/BFLOAT16 scales, per-tensor, per-axis
// or blocked) of logical shape [batch, kv_heads, capacity, width]. The view points into the
// payload's storage; it is valid while the payload lives (the page keeps it alive).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "ops/math/code_dot.h"

namespace onnx_light::ops::ai_rt {

using core::DataType;
using core::runtime::RuntimeValue;
using core::runtime::Shape;

class PageView {
 public:
  PageView() = default;
  // Checks the payload (kind, dtype, rank 4, concrete dims, affine parameters and payload
  // extent) and prepares it for reading. Throws kInvalidArgument "<where>: ...".
  static PageView Of(const RuntimeValue& payload, const std::string& where);

  const Shape& dims() const { return dims_; }
  int64_t capacity() const { return dims_[2]; }
  int64_t width() const { return dims_[3]; }
  // FLOAT, FLOAT16, BFLOAT16 (dense) or the affine code type.
  DataType format() const { return format_; }
  bool dense_float() const { return format_ == DataType::kFloat; }
  // Affine codes: reading decodes them (counted as dequantized bytes).
  bool quantized() const { return affine_; }

  // Rows [r0, r0 + n) of (batch b, head h): a pointer into the page when it is dense FLOAT,
  // else the rows decoded into `buffer` (n * width floats) and `buffer` returned.
  const float* Rows(int64_t b, int64_t h, int64_t r0, int64_t n, float* buffer) const;
  // Rows [r0, r0 + n) of (b, h) as stored, for math::GroupCodeDots/GroupCodeWeightedRowSums
  // (no decoding): false when their affine parameters vary within the rows (per-axis along
  // the rows or the width, blocked), which only Rows can read.
  bool CodeRowsAt(int64_t b, int64_t h, int64_t r0, int64_t n, math::CodeRows* out) const {
    if (!rows_uniform_) return CodeRowsSlow(b, h, r0, n, out);
    *out = {rows_code_, data_,       ((b * heads_ + h) * capacity_ + r0) * width_,
            n,          rows_scale_, rows_zero_};
    return true;
  }
  // True when CodeRowsAt reads every (batch, head) with the same code, scale and zero point:
  // head h + 1's rows then start HeadElements() elements after head h's.
  bool HeadsUniform() const { return rows_uniform_; }
  int64_t HeadElements() const { return capacity_ * width_; }
  // Asks for rows [r0, r0 + n) of (b, h) to be brought into L2 (the next block's rows while
  // this one is scored: the hardware prefetcher stops at page boundaries).
  void Prefetch(int64_t b, int64_t h, int64_t r0, int64_t n) const;
  // Element d of row r of (b, h) as FLOAT.
  float At(int64_t b, int64_t h, int64_t r, int64_t d) const;

 private:
  int64_t FirstElement(int64_t b, int64_t h, int64_t r) const {
    return ((b * heads_ + h) * capacity_ + r) * width_;
  }
  // Index of the scale/zero point of element (b, h, r, d) for per-axis and blocked layouts.
  int64_t ParamIndex(const int64_t coord[4]) const;
  void DecodeAffine(int64_t e0, int64_t n, const int64_t coord[4], float* out) const;
  bool CodeRowsSlow(int64_t b, int64_t h, int64_t r0, int64_t n, math::CodeRows* out) const;
  // Prepares the fields below (the end of Of).
  void PrepareRows();

  // What CodeRowsAt, Rows and Prefetch read, first (one cache line, no heap): the dims and,
  // when one scale and zero point hold for every row (dense, or per-tensor affine), the code
  // and those parameters.
  const void* data_ = nullptr;
  int64_t heads_ = 0, capacity_ = 0, width_ = 0;
  float rows_scale_ = 1.0f, rows_zero_ = 0.0f;
  DataType format_ = DataType::kUndefined;
  math::RowCode rows_code_ = math::RowCode::kFloat;
  bool rows_uniform_ = false;
  bool affine_ = false;
  Shape dims_;
  // Affine parameters: one each for a per-tensor layout, else per parameter index.
  std::vector<float> scales_;
  std::vector<int32_t> zero_points_;
  int64_t axis_ = -1, block_ = 0;
  Shape param_dims_;  // the scale's dims for a blocked layout
};

}  // namespace onnx_light::ops::ai_rt
