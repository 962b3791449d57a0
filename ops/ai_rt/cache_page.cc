#include "ops/ai_rt/cache_page.h"

#include <utility>

#include "core/error.h"

namespace onnx_light::ops::ai_rt {

using core::ErrorCode;
using core::runtime::RuntimeSequence;
using core::runtime::Tensor;

namespace {

int64_t ScalarInt64(const RuntimeValue* v, const std::string& where) {
  OL_CHECK(v != nullptr && v->is_tensor() && v->tensor().dtype() == DataType::kInt64 &&
               v->tensor().numel() == 1 && v->tensor().rank() == 0,
           ErrorCode::kInvalidArgument, where + " must be an INT64 scalar tensor");
  return *v->tensor().data<int64_t>();
}

void CollectItems(const RuntimeSequence::Node& node,
                  std::vector<std::shared_ptr<const RuntimeValue>>* out) {
  if (node.leaf) {
    out->insert(out->end(), node.items.begin(), node.items.end());
    return;
  }
  for (const auto& child : node.children) CollectItems(*child, out);
}

}  // namespace

CachePage ReadCachePage(const RuntimeValue& block, const std::string& where) {
  CachePage page;
  page.start = ScalarInt64(block.FindField("start"), where + ".start");
  page.length = ScalarInt64(block.FindField("length"), where + ".length");
  page.key = PageView::Of(block.field("key"), where + ".key");
  page.value = PageView::Of(block.field("value"), where + ".value");
  OL_CHECK(page.start >= 0, ErrorCode::kInvalidArgument,
           where + ": start " + std::to_string(page.start) + " is negative");
  OL_CHECK(page.length > 0, ErrorCode::kInvalidArgument,
           where + ": length " + std::to_string(page.length) + " is not positive");
  OL_CHECK(page.key.capacity() == page.value.capacity(), ErrorCode::kInvalidArgument,
           where + ": key capacity " + std::to_string(page.key.capacity()) +
               " differs from value capacity " + std::to_string(page.value.capacity()));
  OL_CHECK(page.length <= page.key.capacity(), ErrorCode::kInvalidArgument,
           where + ": length " + std::to_string(page.length) + " exceeds the page capacity " +
               std::to_string(page.key.capacity()));
  OL_CHECK(page.key.dims()[0] == page.value.dims()[0] && page.key.dims()[1] == page.value.dims()[1],
           ErrorCode::kInvalidArgument, where + ": key and value batch/head dimensions differ");
  return page;
}

std::vector<std::shared_ptr<const RuntimeValue>> CacheBlocks(const RuntimeValue& cache,
                                                             const std::string& where) {
  OL_CHECK(core::runtime::IsPagedCacheStructure(cache), ErrorCode::kInvalidArgument,
           where + " must be a paged cache {\"blocks\": [{start, length, key, value}, ...]}, "
                   "got a " + RuntimeValue::KindName(cache.kind()));
  const RuntimeSequence& seq = cache.fields().front().second.elements();
  std::vector<std::shared_ptr<const RuntimeValue>> items;
  items.reserve(seq.size());
  if (!seq.empty()) CollectItems(*seq.root(), &items);
  return items;
}

RuntimeValue WithBlocks(const RuntimeValue& cache, RuntimeSequence blocks) {
  const RuntimeValue& old = cache.fields().front().second;
  std::vector<RuntimeValue::Field> fields;
  fields.emplace_back("blocks", RuntimeValue::Sequence(std::move(blocks), old.sequence_elem_type()));
  return RuntimeValue::Struct(cache.struct_name(), std::move(fields));
}

RuntimeValue MakeBlock(int64_t start, int64_t length, RuntimeValue key, RuntimeValue value) {
  std::vector<RuntimeValue::Field> fields;
  fields.emplace_back("start", RuntimeValue(Tensor::FromInt64("start", {}, {start})));
  fields.emplace_back("length", RuntimeValue(Tensor::FromInt64("length", {}, {length})));
  fields.emplace_back("key", std::move(key));
  fields.emplace_back("value", std::move(value));
  return RuntimeValue::Struct(std::string(), std::move(fields));
}

}  // namespace onnx_light::ops::ai_rt
