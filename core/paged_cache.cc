// RuntimeValue <-> PagedCacheProto (spec "Serialized cache values"). The runtime form is a
// struct {blocks: sequence of struct {start, length, key, value}}; pages are never decoded.
#include "core/paged_cache.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/affine_encoding.h"
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
  OL_CHECK(encoded->data_location() != TensorProto::EXTERNAL && encoded->external_data_size() == 0,
           ErrorCode::kInvalidArgument,
           path + ": external page data is not supported; load it before building the cache");
  return RuntimeValue::Encoded(std::shared_ptr<const EncodedValueProto>(cache, encoded), catalogue);
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

// ---- page structure checks -----------------------------------------------------------------

[[noreturn]] void Fail(const std::string& what, const std::string& path,
                       const std::string& problem) {
  Throw(ErrorCode::kInvalidArgument, what + " '" + path + "': " + problem);
}

const RuntimeValue& BlockField(const std::string& where, const RuntimeValue& block,
                               const char* name) {
  const RuntimeValue* f = block.FindField(name);
  if (f == nullptr) Throw(ErrorCode::kInvalidArgument, where + ": missing field '" + name + "'");
  return *f;
}

int64_t BlockScalar(const std::string& where, const RuntimeValue& block, const char* name) {
  const RuntimeValue& v = BlockField(where, block, name);
  OL_CHECK(v.is_tensor() && v.tensor().dtype() == DataType::kInt64 && v.tensor().numel() == 1 &&
               v.tensor().rank() == 0,
           ErrorCode::kInvalidArgument, where + ": " + name + " must be an INT64 scalar tensor");
  return *v.tensor().data<int64_t>();
}

// [batch, heads, capacity, width] of a dense or encoded page payload.
Shape PageDims(const std::string& where, const char* name, const RuntimeValue& payload) {
  const auto fail = [&](const std::string& problem) {
    Throw(ErrorCode::kInvalidArgument, where + ": " + name + ": " + problem);
  };
  Shape dims;
  if (payload.is_tensor()) {
    const DataType t = payload.tensor().dtype();
    if (t != DataType::kFloat && t != DataType::kFloat16 && t != DataType::kBFloat16)
      fail("dense page payload must be FLOAT, FLOAT16 or BFLOAT16, got " + DataTypeName(t));
    dims = payload.tensor().shape();
  } else if (payload.is_encoded()) {
    dims = EncodedLogicalDims(where + ": " + name, payload.encoded());
  } else {
    fail(std::string("page payload must be a tensor or an encoded value, got a ") +
         RuntimeValue::KindName(payload.kind()));
  }
  if (dims.size() != 4)
    fail("page payload must have rank 4 [batch, heads, capacity, width], got " +
         ShapeToString(dims));
  return dims;
}

}  // namespace

PagedBlockGeometry CheckPagedCacheBlock(const std::string& where, const RuntimeValue& block,
                                        const PagePayloadCheck& check_payload,
                                        const std::string& payload_path) {
  PagedBlockGeometry g;
  g.start = BlockScalar(where, block, "start");
  g.length = BlockScalar(where, block, "length");
  if (g.length <= 0)
    Throw(ErrorCode::kInvalidArgument,
          where + ": length " + std::to_string(g.length) + " is not positive");
  const RuntimeValue& key = BlockField(where, block, "key");
  const RuntimeValue& value = BlockField(where, block, "value");
  if (check_payload) {
    check_payload(payload_path + ".key", key);
    check_payload(payload_path + ".value", value);
  }
  g.key = PageDims(where, "key", key);
  g.value = PageDims(where, "value", value);
  OL_CHECK(g.key[2] == g.value[2], ErrorCode::kInvalidArgument,
           where + ": key capacity " + std::to_string(g.key[2]) + " differs from value capacity " +
               std::to_string(g.value[2]));
  OL_CHECK(g.length <= g.key[2], ErrorCode::kInvalidArgument,
           where + ": length " + std::to_string(g.length) + " exceeds the page capacity " +
               std::to_string(g.key[2]));
  OL_CHECK(g.key[0] == g.value[0] && g.key[1] == g.value[1], ErrorCode::kInvalidArgument,
           where + ": key and value batch/head dimensions differ");
  return g;
}

void CheckPagedCachePages(const std::string& what, const std::string& path,
                          const RuntimeValue& cache, const PagePayloadCheck& check_payload) {
  const RuntimeSequence& blocks = cache.field("blocks").elements();
  int64_t next_start = 0;
  Shape first_key, first_value;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string p = path + ".blocks[" + std::to_string(i) + "]";
    const std::string where = what + " '" + p + "'";
    const PagedBlockGeometry g = CheckPagedCacheBlock(where, blocks[i], check_payload, p);
    OL_CHECK(g.start == next_start, ErrorCode::kInvalidArgument,
             where + ": start " + std::to_string(g.start) + " is not contiguous (expected " +
                 std::to_string(next_start) + ")");
    next_start += g.length;
    const Shape& k = g.key;
    const Shape& v = g.value;
    if (i == 0) {
      first_key = k;
      first_value = v;
    } else if (k[0] != first_key[0] || k[1] != first_key[1] || k[3] != first_key[3] ||
               v[3] != first_value[3]) {
      Fail(what, p, "key/value widths or heads are inconsistent with earlier blocks");
    }
  }
}

std::shared_ptr<const ParameterCatalogue> ParameterCatalogue::FromModel(
    const std::shared_ptr<const ModelProto>& model) {
  auto catalogue = std::make_shared<ParameterCatalogue>();
  for (const auto& p : model->shared_parameters())
    catalogue->entries[p.name()] = std::shared_ptr<const AffineLayoutProto>(model, &p);
  return catalogue;
}

bool IsPagedCacheBlock(const RuntimeValue& block) {
  if (!block.is_struct()) return false;
  const std::vector<RuntimeValue::Field>& fields = block.fields();
  if (fields.size() != 4) return false;
  // Blocks are built start, length, key, value: compared in place, no std::string made per
  // name (a batched decode step checks every page of every row's cache of every layer).
  static constexpr const char* kNames[4] = {"start", "length", "key", "value"};
  bool in_order = true;
  for (size_t i = 0; i < 4 && in_order; ++i) in_order = fields[i].first == kNames[i];
  if (in_order) return true;
  for (const char* name : kNames) {
    bool found = false;
    for (const auto& f : fields) found = found || f.first == name;
    if (!found) return false;
  }
  return true;
}

bool IsPagedCacheStructure(const RuntimeValue& value) {
  if (!value.is_struct() || value.fields().size() != 1) return false;
  const auto& [name, blocks] = value.fields().front();
  if (name != "blocks" || !blocks.is_sequence()) return false;
  const RuntimeSequence& seq = blocks.elements();
  for (size_t i = 0; i < seq.size(); ++i)
    if (!IsPagedCacheBlock(seq[i])) return false;
  return true;
}

bool IsPagedCacheRows(const RuntimeValue& value) {
  if (!value.is_sequence() || value.elements().empty()) return false;
  for (size_t r = 0; r < value.elements().size(); ++r)
    if (!IsPagedCacheStructure(value.elements()[r])) return false;
  return true;
}

bool PagedCacheTailIsUnshared(const RuntimeValue& cache) {
  // The structure of the cache and of its last block (the one written in place); the
  // earlier blocks are the reader's to check (PagedAttention refuses a malformed cache
  // before it writes anything). Walking every block here cost each row, layer and step a
  // search per page (issue 15's batched decode).
  if (!cache.is_struct() || cache.fields().size() != 1 || cache.fields_use_count() != 1)
    return false;
  const auto& [name, blocks] = cache.fields().front();
  if (name != "blocks" || !blocks.is_sequence()) return false;
  const RuntimeSequence& seq = blocks.elements();
  if (seq.empty()) return false;
  const std::shared_ptr<const RuntimeSequence::Node>* node = &seq.root();
  if (node->use_count() != 1) return false;
  while (!(*node)->leaf) {
    node = &(*node)->children.back();
    if (node->use_count() != 1) return false;
  }
  const std::shared_ptr<const RuntimeValue>& block = (*node)->items.back();
  if (!IsPagedCacheBlock(*block) || block.use_count() != 1 || block->fields_use_count() != 1)
    return false;
  for (const char* name : {"key", "value"}) {
    const RuntimeValue& payload = block->field(name);
    const long holders = payload.is_tensor() ? payload.tensor().owner_use_count()
                                             : payload.encoded_ptr().use_count();
    if (holders != 1) return false;
  }
  return true;
}

bool PagedRowTailIsUnshared(const RuntimeValue& rows, size_t row) {
  if (!rows.is_sequence() || row >= rows.elements().size()) return false;
  const std::shared_ptr<const RuntimeSequence::Node>* node = &rows.elements().root();
  while (true) {
    if (node->use_count() != 1) return false;
    if ((*node)->leaf) break;
    for (const auto& child : (*node)->children) {  // the subtree holding `row`
      if (row < child->size) {
        node = &child;
        break;
      }
      row -= child->size;
    }
  }
  const std::shared_ptr<const RuntimeValue>& item = (*node)->items[row];
  return item.use_count() == 1 && PagedCacheTailIsUnshared(*item);
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

bool IsPageStorageType(DataType t) {
  if (t == DataType::kFloat || t == DataType::kFloat16 || t == DataType::kBFloat16) return true;
  return IsAffineCodeType(t) && t != DataType::kInt16 && t != DataType::kUint16;
}

}  // namespace onnx_light::core::runtime
