#include "ops/ai_rt/cache_page.h"

#include <utility>

#include "core/error.h"
#include "core/paged_cache.h"

namespace onnx_light::ops::ai_rt {

using core::ErrorCode;
using core::runtime::RuntimeSequence;
using core::runtime::Tensor;

namespace {

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
  // The views first: their messages name the payload ("<where>.key: ...").
  const RuntimeValue* key = block.FindField("key");
  const RuntimeValue* value = block.FindField("value");
  if (key != nullptr) page.key = PageView::Of(*key, where + ".key");
  if (value != nullptr) page.value = PageView::Of(*value, where + ".value");
  const core::runtime::PagedBlockGeometry g = core::runtime::CheckPagedCacheBlock(where, block);
  page.start = g.start;
  page.length = g.length;
  return page;
}

void RefusePagedCache(const RuntimeValue& cache, const std::string& where) {
  core::Throw(ErrorCode::kInvalidArgument,
              where +
                  " must be a paged cache {\"blocks\": [{start, length, key, value}, ...]}, "
                  "got a " +
                  RuntimeValue::KindName(cache.kind()));
}

std::vector<std::shared_ptr<const RuntimeValue>> CacheBlocks(const RuntimeValue& cache,
                                                             const std::string& where,
                                                             bool check_blocks) {
  // The structure of IsPagedCacheStructure, checked on the collected blocks: indexing the
  // sequence's tree block by block costs a search each (a few % of a 32k-token decode).
  if (!cache.is_struct() || cache.fields().size() != 1 ||
      cache.fields().front().first != "blocks" || !cache.fields().front().second.is_sequence())
    RefusePagedCache(cache, where);
  const RuntimeSequence& seq = cache.fields().front().second.elements();
  std::vector<std::shared_ptr<const RuntimeValue>> items;
  items.reserve(seq.size());
  if (!seq.empty()) CollectItems(*seq.root(), &items);
  if (check_blocks)
    for (const auto& b : items)
      if (!core::runtime::IsPagedCacheBlock(*b)) RefusePagedCache(cache, where);
  return items;
}

RuntimeValue WithBlocks(const RuntimeValue& cache, RuntimeSequence blocks) {
  const RuntimeValue& old = cache.fields().front().second;
  std::vector<RuntimeValue::Field> fields;
  fields.emplace_back("blocks",
                      RuntimeValue::Sequence(std::move(blocks), old.sequence_elem_type()));
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
