// ai.rt::QuantizePagedCache(cache, block_indices, key_scale, key_zero_point, value_scale,
// value_zero_point) -> quantized_cache (spec "Selected-block quantization"). Each zero
// point's element type selects its payload format: INT8/UINT8/INT4/UINT4/INT2/UINT2 request
// affine codes with that scale and zero point; FLOAT/FLOAT16/BFLOAT16 request dense pages
// (marker value and scale ignored). The whole cache is validated first (without decoding),
// then the indices and parameters; only then are the selected blocks decoded (their valid
// prefix) and encoded with their capacity and length kept, unused rows logical zeros.
// Unselected blocks are the same values (same owners) in the output.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "executor/attributes.h"
#include "ops/ai_rt/cache_page.h"
#include "ops/ai_rt/page_writer.h"
#include "ops/kernel_factory.h"
#include "ops/math/quantize.h"

namespace onnx_light::ops {

using core::DataType;
using core::ErrorCode;
using core::runtime::KernelCall;
using core::runtime::RuntimeSequence;
using core::runtime::RuntimeValue;
using core::runtime::Shape;
using core::runtime::Tensor;

namespace {

// The format the (scale, zero point) pair requests; throws naming the input.
ai_rt::PageFormat RequestedFormat(const KernelCall& call, size_t scale_at, size_t zero_at,
                                  const char* what) {
  const Tensor& scale = call.input(scale_at);
  const Tensor& zero = call.input(zero_at);
  const std::string side = std::string(what) + "_";
  if (scale.dtype() != DataType::kFloat || scale.numel() != 1 || scale.rank() > 1)
    call.Fail(side + "scale must be a FLOAT scalar, got " + core::DataTypeName(scale.dtype()) +
              " " + core::runtime::ShapeToString(scale.shape()));
  if (zero.numel() != 1 || zero.rank() > 1)
    call.Fail(side + "zero_point must be a scalar, got " +
              core::runtime::ShapeToString(zero.shape()));
  ai_rt::PageFormat format;
  format.storage = zero.dtype();
  if (!format.affine()) return format;  // dense marker: value and scale ignored
  if (!math::IsQuantizedIntType(zero.dtype()) || zero.dtype() == DataType::kInt16 ||
      zero.dtype() == DataType::kUint16)
    call.Fail(side + "zero_point type " + core::DataTypeName(zero.dtype()) +
              " selects no page format (INT8, UINT8, INT4, UINT4, INT2, UINT2 or FLOAT, "
              "FLOAT16, BFLOAT16)");
  format.scale = scale.data<float>()[0];
  format.zero_point = math::QuantGet(zero.dtype(), zero.raw_data(), 0);
  ai_rt::CheckPageFormat(format, core::runtime::NodeLabel(call.node()) + ": " + what);
  return format;
}

// The valid rows of every (batch, head) of `page` as FLOAT, [B, H, rows, D].
std::vector<float> DecodeValidRows(const ai_rt::PageView& page, int64_t rows) {
  const Shape& d = page.dims();
  std::vector<float> out(static_cast<size_t>(d[0] * d[1] * rows * d[3]));
  std::vector<float> buffer(static_cast<size_t>(rows * d[3]));
  for (int64_t b = 0; b < d[0]; ++b)
    for (int64_t h = 0; h < d[1]; ++h) {
      const float* src = page.Rows(b, h, 0, rows, buffer.data());
      std::copy(src, src + rows * d[3], out.begin() + ((b * d[1] + h) * rows) * d[3]);
    }
  return out;
}

RuntimeValue Convert(const ai_rt::PageView& page, int64_t rows, const ai_rt::PageFormat& format,
                     core::runtime::Allocator& allocator) {
  const Shape& d = page.dims();
  const std::vector<float> decoded = DecodeValidRows(page, rows);
  size_t written = 0;
  return ai_rt::EncodePage(format, {decoded.data(), d[1] * rows * d[3], rows * d[3]}, d[0], d[1],
                           d[2], d[3], rows, allocator, &written);
}

}  // namespace

class QuantizePagedCache final : public core::runtime::KernelBase {
 public:
  explicit QuantizePagedCache(const core::runtime::KernelContext&) {}

  void Compute(KernelCall& call) const override {
    const std::string label = core::runtime::NodeLabel(call.node());
    const RuntimeValue& cache = call.input_value(0);
    const auto blocks = ai_rt::CacheBlocks(cache, label + ": cache");
    const std::vector<ai_rt::CachePage> pages = ReadAll(label, blocks);
    const std::vector<int64_t> selected = Indices(call, blocks.size());
    const ai_rt::PageFormat key = RequestedFormat(call, 2, 3, "key");
    const ai_rt::PageFormat value = RequestedFormat(call, 4, 5, "value");
    RuntimeSequence seq = cache.fields().front().second.elements();
    for (int64_t i : selected) {
      const ai_rt::CachePage& p = pages[static_cast<size_t>(i)];
      seq.Set(static_cast<size_t>(i),
              ai_rt::MakeBlock(p.start, p.length, Convert(p.key, p.length, key, call.allocator()),
                               Convert(p.value, p.length, value, call.allocator())));
    }
    call.SetOutputValue(0, ai_rt::WithBlocks(cache, std::move(seq)));
  }

 private:
  // Every block checked (fields, contiguous ranges, capacities, consistent dims), unselected
  // ones and an empty selection included, without decoding a payload.
  static std::vector<ai_rt::CachePage> ReadAll(
      const std::string& label, const std::vector<std::shared_ptr<const RuntimeValue>>& blocks) {
    std::vector<ai_rt::CachePage> pages;
    int64_t next = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string where = label + ": cache.blocks[" + std::to_string(i) + "]";
      pages.push_back(ai_rt::ReadCachePage(*blocks[i], where));
      const ai_rt::CachePage& p = pages.back();
      OL_CHECK(p.start == next, ErrorCode::kInvalidArgument,
               where + ": start " + std::to_string(p.start) + " is not contiguous (expected " +
                   std::to_string(next) + ")");
      const Shape& k0 = pages.front().key.dims();
      const Shape& v0 = pages.front().value.dims();
      const Shape& k = p.key.dims();
      const Shape& v = p.value.dims();
      OL_CHECK(k[0] == k0[0] && k[1] == k0[1] && k[3] == k0[3] && v[3] == v0[3],
               ErrorCode::kInvalidArgument,
               where + ": key/value widths or heads are inconsistent with earlier blocks");
      next += p.length;
    }
    return pages;
  }

  static std::vector<int64_t> Indices(const KernelCall& call, size_t blocks) {
    const Tensor& t = call.input(1);
    if (t.dtype() != DataType::kInt64 || t.rank() != 1)
      call.Fail("block_indices must be a rank-1 INT64 tensor, got " +
                core::DataTypeName(t.dtype()) + " " + core::runtime::ShapeToString(t.shape()));
    std::vector<int64_t> out(t.data<int64_t>(), t.data<int64_t>() + t.numel());
    std::set<int64_t> seen;
    for (int64_t i : out) {
      if (i < 0 || i >= static_cast<int64_t>(blocks))
        call.Fail("block index " + std::to_string(i) + " is outside the cache's " +
                  std::to_string(blocks) + " blocks");
      if (!seen.insert(i).second) call.Fail("block index " + std::to_string(i) + " is repeated");
    }
    return out;
  }
};

OL_KERNEL_FACTORY(QuantizePagedCache)

}  // namespace onnx_light::ops
