// Validation of persistent values against their graph declarations (spec "Structured
// feedback", "Serialized cache values"). Nothing here decodes or copies a payload: tensors
// are checked by dtype and shape, encoded values by layout, parameter shapes and byte size,
// paged caches by page ranges and capacities.
//
// Every error names the binding key and the path inside it ("cache.blocks[2].key").
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/affine_encoding.h"
#include "core/runtime_value.h"

namespace onnx_light {
class ModelProto;
class StructTypeProto;
class TypeProto;
}  // namespace onnx_light

namespace onnx_light::core::runtime {

// Symbol name -> concrete size, bound while validating one value.
using SymbolBindings = std::map<std::string, int64_t>;

// ResolveAffineStorageType and the affine checks live in core/affine_encoding.h.

class ValueValidator {
 public:
  // `model` must outlive the validator (struct_types are read from it, never copied).
  explicit ValueValidator(const ModelProto& model);
  ValueValidator(const ValueValidator&) = delete;
  ValueValidator& operator=(const ValueValidator&) = delete;

  // Declarations themselves are checked once, by core::ResolvePersistentBindings
  // (core/persistent_bindings.h); a declaration given here is assumed to have passed it.

  // Checks a value for retention against its declaration: kind, dtype, rank, concrete
  // dimensions (symbols bind consistently within the value), no strings, struct fields by
  // name, sequences element-wise (memoized per unchanged tree), encoded layouts and their
  // parameter references, paged-cache page structure. Thread safe.
  void ValidatePersistent(const std::string& key, const RuntimeValue& value,
                          const TypeProto& declared) const;

  // For current feeds: every encoded value inside `value` carries a catalogue that resolves
  // its parameter_ref, and has an inline payload.
  void CheckEncodedReferences(const std::string& key, const RuntimeValue& value) const;

  // The struct a declaration denotes, following type_ref through ModelProto.struct_types.
  const StructTypeProto& ResolveStruct(const std::string& path, const StructTypeProto& type) const;

  // Test counters: sequence elements actually walked, tree nodes (whole subtrees) answered
  // by the memo, and live memo entries.
  size_t sequence_elements_validated() const { return elements_validated_.load(); }
  size_t sequence_memo_hits() const { return memo_hits_.load(); }
  size_t memo_size() const;

 private:
  struct MemoEntry {
    std::weak_ptr<const RuntimeSequence::Node> tree;  // weak: never keeps pages alive
    const TypeProto* elem_type;
    SymbolBindings symbols;  // the concrete sizes the subtree bound
  };

  void CheckValue(const std::string& path, const RuntimeValue& value, const TypeProto& declared,
                  SymbolBindings& symbols, bool paged_field) const;
  void CheckTensor(const std::string& path, const Tensor& tensor, const TypeProto& declared,
                   SymbolBindings& symbols, bool paged_field) const;
  void CheckEncoded(const std::string& path, const RuntimeValue& value, const TypeProto& declared,
                    SymbolBindings& symbols) const;
  void CheckEncodedPayload(const std::string& path, const RuntimeValue& value) const;
  void CheckStruct(const std::string& path, const RuntimeValue& value, const TypeProto& declared,
                   SymbolBindings& symbols) const;
  void CheckSequence(const std::string& path, const RuntimeValue& value, const TypeProto& declared,
                     SymbolBindings& symbols) const;
  // Validates one tree node (elements from `offset` on); unchanged nodes come from the memo.
  void CheckSequenceNode(const std::string& path, const RuntimeSequence::Node& node,
                         const std::shared_ptr<const RuntimeSequence::Node>& handle, size_t offset,
                         const TypeProto* elem_type, SymbolBindings& symbols) const;
  void CheckPagedCache(const std::string& path, const RuntimeValue& value) const;

  const ModelProto& model_;
  mutable std::mutex memo_mutex_;
  mutable std::unordered_map<const void*, std::vector<MemoEntry>> memo_;
  mutable std::atomic<size_t> elements_validated_{0};
  mutable std::atomic<size_t> memo_hits_{0};
  mutable size_t memo_prune_at_ = 256;  // guarded by memo_mutex_
};

}  // namespace onnx_light::core::runtime
