// RuntimeValue: what flows along a graph edge or sits in persistent state — a tensor, a
// named struct, a typed sequence or an encoded value. Copies share payload owners; only
// metadata is copied.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/runtime_sequence.h"
#include "core/tensor.h"

namespace onnx_light {
class EncodedValueProto;
class AffineLayoutProto;
class ModelProto;
class PagedCacheProto;
class TypeProto;
}  // namespace onnx_light

namespace onnx_light::core::runtime {

// Shared affine parameters that EncodedValueProto.parameter_ref names (ModelProto
// shared_parameters), kept alive by every value that refers to them.
struct ParameterCatalogue {
  std::unordered_map<std::string, std::shared_ptr<const AffineLayoutProto>> entries;
  // The model's shared parameters; entries alias into (and keep alive) the model, no copy.
  static std::shared_ptr<const ParameterCatalogue> FromModel(
      const std::shared_ptr<const ModelProto>& model);
};

class RuntimeValue {
 public:
  enum class Kind { kEmpty, kTensor, kStruct, kSequence, kEncoded };
  using Field = std::pair<std::string, RuntimeValue>;

  RuntimeValue() = default;
  explicit RuntimeValue(Tensor tensor);

  static RuntimeValue Struct(std::string type_name, std::vector<Field> fields);
  // A typed sequence; `elem_type` may be null when unknown (e.g. built by a custom kernel).
  static RuntimeValue Sequence(RuntimeSequence elements,
                               std::shared_ptr<const TypeProto> elem_type = nullptr);
  // An encoded payload (inline raw_data) and the catalogue its parameter_ref resolves in.
  static RuntimeValue Encoded(std::shared_ptr<const EncodedValueProto> encoded,
                              std::shared_ptr<const ParameterCatalogue> catalogue = nullptr);

  // A paged cache (spec "Serialized cache values"): struct {blocks: sequence of struct {start,
  // length: INT64 scalars; key, value: dense tensors or encoded values}}. Dense raw_data
  // pages borrow from `cache` (kept alive by the tensors); typed fields (float_data,
  // int32_data for FLOAT16/BFLOAT16) are packed into owned storage; encoded pages share the
  // proto. Missing payload alternatives and external page data are rejected (kInvalidArgument).
  // Ranges and capacities are checked by the consumers (state validation, kernels).
  static RuntimeValue FromPagedCache(std::shared_ptr<const PagedCacheProto> cache,
                                     std::shared_ptr<const ParameterCatalogue> catalogue = nullptr);
  // Exports a value with the paged-cache structure (IsPagedCacheStructure) without decoding
  // pages: dense pages become raw_data TensorProtos (a serialization, so their bytes are
  // written into the proto), encoded pages are copied as protos. Throws kTypeError otherwise.
  PagedCacheProto ToPagedCache() const;

  Kind kind() const { return kind_; }
  bool empty() const { return kind_ == Kind::kEmpty; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_struct() const { return kind_ == Kind::kStruct; }
  bool is_sequence() const { return kind_ == Kind::kSequence; }
  bool is_encoded() const { return kind_ == Kind::kEncoded; }
  static const char* KindName(Kind kind);

  const Tensor& tensor() const;  // throws kTypeError unless is_tensor()
  Tensor& mutable_tensor();
  Tensor TakeTensor() &&;

  const std::string& struct_name() const;
  const std::vector<Field>& fields() const;
  const RuntimeValue* FindField(const std::string& name) const;  // null when absent
  // How many values share this struct's field list (1 = this one alone; 0 for non-structs):
  // with the payloads' owner counts, whether a retained cache may be extended in place.
  long fields_use_count() const { return fields_.use_count(); }
  // The struct's shared field list (null for other kinds): an identity for memos of values
  // a kernel built itself (key on it, hold it weakly).
  const std::shared_ptr<const std::vector<Field>>& fields_ptr() const { return fields_; }
  const RuntimeValue& field(const std::string& name) const;  // throws when absent

  const RuntimeSequence& elements() const;
  RuntimeSequence& mutable_elements();
  const std::shared_ptr<const TypeProto>& sequence_elem_type() const { return elem_type_; }

  const EncodedValueProto& encoded() const;
  const std::shared_ptr<const EncodedValueProto>& encoded_ptr() const { return encoded_; }
  const std::shared_ptr<const ParameterCatalogue>& catalogue() const { return catalogue_; }

  // Same payload owners, independent metadata, no write permission anywhere inside.
  // (Tensors inside structs and sequences are sealed when the container is built.)
  RuntimeValue BorrowView() const;
  // Independent payloads: every tensor is copied into fresh storage from `allocator`, every
  // encoded value into a new proto, and struct/sequence containers are rebuilt. The type
  // descriptors and the parameter catalogue (immutable, model-owned) stay shared. A top-level
  // tensor copy is writable; tensors inside containers are sealed.
  RuntimeValue DeepCopy(Allocator& allocator = DefaultAllocator()) const;
  // Same kinds, struct names, field names and order, dtypes, shapes, payload bytes, encoded
  // protos and catalogue entries. Tensor names are ignored (feedback renames outputs to
  // inputs); an element type descriptor present on only one side does not matter.
  bool ContentEquals(const RuntimeValue& other) const;

 private:
  Kind kind_ = Kind::kEmpty;
  Tensor tensor_;
  std::string struct_name_;
  std::shared_ptr<const std::vector<Field>> fields_;
  RuntimeSequence elements_;
  std::shared_ptr<const TypeProto> elem_type_;
  std::shared_ptr<const EncodedValueProto> encoded_;
  std::shared_ptr<const ParameterCatalogue> catalogue_;
};

using RuntimeValueMap = std::unordered_map<std::string, RuntimeValue>;

// True when `value` has the runtime structure of a paged cache: one "blocks" sequence whose
// elements are structs with exactly the fields start, length, key and value. There is no
// origin marker: any value of this shape is a cache.
bool IsPagedCacheStructure(const RuntimeValue& value);
// True when `block` is one such element: a struct of exactly start, length, key and value.
bool IsPagedCacheBlock(const RuntimeValue& block);
// True when `value` is a non-empty sequence of paged caches (one per batch row).
bool IsPagedCacheRows(const RuntimeValue& value);

// True when `cache` is a non-empty paged cache (its blocks sequence and last block checked;
// the other blocks are left to the reader) that alone holds its last block all the way
// down: its field list, the blocks sequence's tree along the last path, the last block's
// field list and its key and value payloads are shared with no other value or view. Then
// nobody else can observe that page, so its spare rows may be written in place.
bool PagedCacheTailIsUnshared(const RuntimeValue& cache);

// The same for row `row` of a sequence of paged caches (one per batch row): the sequence's
// tree along the path to that row is held by `rows` alone, and so is the row's last page.
bool PagedRowTailIsUnshared(const RuntimeValue& rows, size_t row);

}  // namespace onnx_light::core::runtime
