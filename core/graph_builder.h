// GraphBuilder (spec "Structured feedback", "Serialized cache values"): imports a model,
// applies graph rewrites that keep the persistence contract, and exports it again. Persistent
// bindings, paged_cache_initializer, encoded_initializer, struct_types and the struct type
// references of declarations are preserved exactly; import and export validate them
// (CheckModel, CheckPersistentBindings and the paged-cache page rules of core/paged_cache.h).
//
// Supported rewrites keep the contract themselves (a rename moves every use, binding and
// value_info entry). mutable_graph() allows direct edits, after which Export() rejects what
// they broke, e.g. a binding naming an input that no longer exists. Errors are
// Error(kInvalidArgument) for a bad rewrite request and Error(kInvalidModel) for a model that
// breaks a rule; messages name the value, node, binding or cache block at fault.
#pragma once

#include <string>

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

class GraphBuilder {
 public:
  // A copy of `model`, validated.
  static GraphBuilder Import(const ModelProto& model);
  static GraphBuilder Import(ModelProto&& model);

  // The edited model, validated again; bytes are those of the imported model for everything
  // no rewrite touched.
  ModelProto Export() const;
  // Export() as a plain ONNX model (core/standard_onnx.h): refused with kInvalidModel, naming
  // them, when the model has bindings, cache or encoded initializers or struct types.
  std::string ExportStandardOnnx() const;

  const ModelProto& model() const { return model_; }
  // Direct edits: nothing follows them; Export() validates the result.
  GraphProto* mutable_graph() { return model_.mutable_graph(); }

  // Renames a graph input (with its same-named initializer default, if any); every use,
  // binding and value_info entry follows. `to` must be a new name.
  void RenameInput(const std::string& from, const std::string& to);
  // Renames a graph output and the node output producing it; uses, bindings and value_info
  // follow. An output that passes a graph input or initializer through is renamed there.
  void RenameOutput(const std::string& from, const std::string& to);

  // Appends `node`; its outputs must be new names.
  void AddNode(NodeProto node);
  // Removes the node named `name`. Refused, naming them, while any of its outputs is read by
  // another node, returned as a graph output or named by a binding.
  void RemoveNode(const std::string& name);

  void AddInput(ValueInfoProto input);
  // Refused while bound, or while read with no same-named initializer left to supply it
  // (with one, the default becomes a constant).
  void RemoveInput(const std::string& name);
  void AddOutput(ValueInfoProto output);
  void RemoveOutput(const std::string& name);  // refused while bound
  // Names are unique across all initializer categories.
  void AddInitializer(TensorProto initializer);
  // Removes the initializer of any category named `name`; refused while a node reads it and
  // no graph input of that name would remain to supply it.
  void RemoveInitializer(const std::string& name);

  // Adds input_name <- output_name, checked by CheckPersistentBindings (nothing changes when
  // it is refused).
  void AddPersistentBinding(const std::string& input_name, const std::string& output_name);
  void RemovePersistentBinding(const std::string& input_name);

  // Adds `cache` as paged_cache_initializer `name` (its default when `name` is also a graph
  // input). The name must be new across all initializer categories; the cache is validated
  // as persistent state validates caches, errors naming the block and field.
  void MakePagedCacheInitializer(const std::string& name, PagedCacheProto cache);

 private:
  GraphBuilder() = default;
  void Validate(const char* when) const;
  void RenameValue(const std::string& from, const std::string& to, const std::string& op);

  ModelProto model_;
};

// Validates one paged-cache initializer of `model` (payload alternatives, external data,
// page ranges and capacities, parameter references): Error(`code`) naming it, the block and
// the field.
void CheckPagedCacheInitializer(const PagedCacheProto& cache, const ModelProto& model,
                                ErrorCode code);

}  // namespace onnx_light::core
