// RuntimeValue <-> PagedCacheProto (spec "Serialized cache values"). The runtime form is a
// struct {blocks: sequence of struct {start, length, key, value}}; pages are never decoded.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/runtime_value.h"
#include "core/tensor_proto.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {
namespace {

std::string BlockPath(size_t i) { return "paged cache blocks[" + std::to_string(i) + "]"; }

RuntimeValue PageFromProto(const std::shared_ptr<const PagedCacheProto>& cache,
                           const std::string& path, const TensorProto* dense,
                           const EncodedValueProto* encoded,
                           const std::shared_ptr<const ParameterCatalogue>& catalogue) {
  if (dense != nullptr) {
    OL_CHECK(dense->data_location() != TensorProto::EXTERNAL, ErrorCode::kInvalidArgument,
             path + ": external page data is not supported; load it before building the cache");
    // The cache proto owns raw_data; the tensor borrows it and keeps the proto alive.
    return RuntimeValue(TensorFromProto(*dense, cache));
  }
  OL_CHECK(encoded->data_location() != TensorProto::EXTERNAL &&
               encoded->external_data_size() == 0,
           ErrorCode::kInvalidArgument,
           path + ": external page data is not supported; load it before building the cache");
  return RuntimeValue::Encoded(std::shared_ptr<const EncodedValueProto>(cache, encoded),
                               catalogue);
}

void PageToProto(const RuntimeValue& page, const std::string& path, TensorProto* dense,
                 EncodedValueProto* encoded) {
  if (page.is_tensor()) {
    TensorToProto(page.tensor(), dense);
    dense->clear_name();
    return;
  }
  OL_CHECK(page.is_encoded(), ErrorCode::kTypeError,
           path + ": a page payload must be a tensor or an encoded value, got " +
               RuntimeValue::KindName(page.kind()));
  encoded->CopyFrom(page.encoded());
}

int64_t ScalarInt64(const RuntimeValue& v, const std::string& path) {
  OL_CHECK(v.is_tensor() && v.tensor().dtype() == DataType::kInt64 && v.tensor().numel() == 1,
           ErrorCode::kTypeError, path + " must be an INT64 scalar tensor");
  return v.tensor().data<int64_t>()[0];
}

}  // namespace

std::shared_ptr<const ParameterCatalogue> ParameterCatalogue::FromModel(
    const std::shared_ptr<const ModelProto>& model) {
  auto catalogue = std::make_shared<ParameterCatalogue>();
  for (const auto& p : model->shared_parameters())
    catalogue->entries[p.name()] = std::shared_ptr<const AffineLayoutProto>(model, &p);
  return catalogue;
}

bool IsPagedCacheStructure(const RuntimeValue& value) {
  if (!value.is_struct() || value.fields().size() != 1) return false;
  const auto& [name, blocks] = value.fields().front();
  if (name != "blocks" || !blocks.is_sequence()) return false;
  const RuntimeSequence& seq = blocks.elements();
  for (size_t i = 0; i < seq.size(); ++i) {
    const RuntimeValue& b = seq[i];
    if (!b.is_struct() || b.fields().size() != 4) return false;
    for (const char* f : {"start", "length", "key", "value"})
      if (b.FindField(f) == nullptr) return false;
  }
  return true;
}

bool PagedCacheTailIsUnshared(const RuntimeValue& cache) {
  if (!IsPagedCacheStructure(cache) || cache.fields_use_count() != 1) return false;
  const RuntimeSequence& seq = cache.fields().front().second.elements();
  if (seq.empty()) return false;
  const std::shared_ptr<const RuntimeSequence::Node>* node = &seq.root();
  if (node->use_count() != 1) return false;
  while (!(*node)->leaf) {
    node = &(*node)->children.back();
    if (node->use_count() != 1) return false;
  }
  const std::shared_ptr<const RuntimeValue>& block = (*node)->items.back();
  if (block.use_count() != 1 || block->fields_use_count() != 1) return false;
  for (const char* name : {"key", "value"}) {
    const RuntimeValue& payload = block->field(name);
    const long holders = payload.is_tensor() ? payload.tensor().owner_use_count()
                                             : payload.encoded_ptr().use_count();
    if (holders != 1) return false;
  }
  return true;
}

RuntimeValue RuntimeValue::FromPagedCache(std::shared_ptr<const PagedCacheProto> cache,
                                          std::shared_ptr<const ParameterCatalogue> catalogue) {
  OL_CHECK(cache != nullptr, ErrorCode::kInvalidArgument, "null paged cache");
  std::vector<RuntimeValue> blocks;
  blocks.reserve(static_cast<size_t>(cache->blocks_size()));
  for (int i = 0; i < cache->blocks_size(); ++i) {
    const PagedCacheBlockProto& b = cache->blocks(i);
    const std::string path = BlockPath(static_cast<size_t>(i));
    OL_CHECK(b.has_key() || b.has_encoded_key(), ErrorCode::kInvalidArgument,
             path + ": missing key payload (set key or encoded_key)");
    OL_CHECK(b.has_value() || b.has_encoded_value(), ErrorCode::kInvalidArgument,
             path + ": missing value payload (set value or encoded_value)");
    std::vector<Field> fields;
    fields.emplace_back("start", RuntimeValue(Tensor::FromInt64("start", {}, {b.start()})));
    fields.emplace_back("length", RuntimeValue(Tensor::FromInt64("length", {}, {b.length()})));
    fields.emplace_back("key", PageFromProto(cache, path + ".key", b.has_key() ? &b.key() : nullptr,
                                             b.has_key() ? nullptr : &b.encoded_key(), catalogue));
    fields.emplace_back("value",
                        PageFromProto(cache, path + ".value", b.has_value() ? &b.value() : nullptr,
                                      b.has_value() ? nullptr : &b.encoded_value(), catalogue));
    blocks.push_back(Struct(std::string(), std::move(fields)));
  }
  std::vector<Field> cache_fields;
  cache_fields.emplace_back("blocks", Sequence(RuntimeSequence::FromValues(std::move(blocks))));
  return Struct(std::string(), std::move(cache_fields));
}

PagedCacheProto RuntimeValue::ToPagedCache() const {
  OL_CHECK(IsPagedCacheStructure(*this), ErrorCode::kTypeError,
           "ToPagedCache: the value does not have the paged-cache structure {\"blocks\": [{start, "
           "length, key, value}, ...]}");
  PagedCacheProto out;
  const RuntimeSequence& seq = fields().front().second.elements();
  for (size_t i = 0; i < seq.size(); ++i) {
    const RuntimeValue& b = seq[i];
    const std::string path = BlockPath(i);
    PagedCacheBlockProto* block = out.add_blocks();
    block->set_start(ScalarInt64(b.field("start"), path + ".start"));
    block->set_length(ScalarInt64(b.field("length"), path + ".length"));
    const RuntimeValue& key = b.field("key");
    const RuntimeValue& value = b.field("value");
    PageToProto(key, path + ".key", key.is_tensor() ? block->mutable_key() : nullptr,
                key.is_encoded() ? block->mutable_encoded_key() : nullptr);
    PageToProto(value, path + ".value", value.is_tensor() ? block->mutable_value() : nullptr,
                value.is_encoded() ? block->mutable_encoded_value() : nullptr);
  }
  return out;
}

}  // namespace onnx_light::core::runtime
