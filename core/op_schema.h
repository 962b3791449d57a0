// Versioned operator schemas for operators this runtime defines outside the ONNX standard
// (spec "Versioned operator schema"): named inputs and outputs, allowed element types,
// attributes with type, default and check, and a type/shape-inference function over
// TypeProto. The checker (core/checker.h) and core::InferTypes (core/type_inference.h) use
// them. A schema describes a node; it registers no kernel (kernels live in
// executor/kernel_registry.h and are found independently).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

class InferenceContext;

// One input or output of an operator.
struct FormalParameter {
  enum class Kind { kTensor, kPagedCache };

  std::string name;
  Kind kind = Kind::kTensor;
  bool optional = false;
  std::vector<DataType> types;  // allowed element types of a tensor; empty: any
  std::optional<int> rank;      // required rank of a tensor whose rank is declared
  // A paged cache that may also be a sequence of paged caches, one per batch row.
  bool batch_rows = false;
};

// An attribute: its type, whether it must be present, the value in force when it is absent,
// and a check of the effective value (an empty string when valid, otherwise what is wrong,
// e.g. "must be positive").
struct AttributeSpec {
  using Check = std::function<std::string(const AttributeProto&)>;

  std::string name;
  AttributeProto::AttributeType type = AttributeProto::UNDEFINED;
  bool required = false;
  std::optional<AttributeProto> default_value;
  Check check;
};

class LightOpSchema {
 public:
  // Reads the known input types from `ctx`, throws (ctx.Fail) on a rule they break and sets
  // the output types it can infer. Unknown inputs (null) are skipped, never an error.
  using InferenceFunction = std::function<void(InferenceContext& ctx)>;

  LightOpSchema(std::string domain, std::string op_type, int since_version);

  LightOpSchema& Input(FormalParameter input);
  LightOpSchema& Output(FormalParameter output);
  LightOpSchema& Attribute(AttributeSpec attribute);
  LightOpSchema& Inference(InferenceFunction fn);

  const std::string& domain() const { return domain_; }
  const std::string& op_type() const { return op_type_; }
  int since_version() const { return since_version_; }
  const std::vector<FormalParameter>& inputs() const { return inputs_; }
  const std::vector<FormalParameter>& outputs() const { return outputs_; }
  const std::vector<AttributeSpec>& attributes() const { return attributes_; }
  const AttributeSpec* FindAttribute(const std::string& name) const;
  // "ai.rt::PagedAttention (opset 1)".
  std::string Label() const;

  // Checks `ctx.node()` (input/output counts, attribute names, types and checks, input
  // kinds, element types and ranks), then runs the inference function. Every error is
  // kInvalidModel and starts with ctx's node description.
  void Verify(InferenceContext& ctx) const;
  // Checks the declared type of output `k` of ctx.node() against the output's kind, element
  // types and rank (the same rules as for inputs).
  void VerifyOutputDeclaration(const InferenceContext& ctx, int k, const TypeProto& type) const;

 private:
  void VerifyArity(InferenceContext& ctx) const;
  void VerifyAttributes(InferenceContext& ctx) const;
  void VerifyInputTypes(InferenceContext& ctx) const;
  // `what` names the value in errors ("input 0 'q' (Q)").
  void VerifyType(const InferenceContext& ctx, const FormalParameter& param, const TypeProto& type,
                  const std::string& what) const;

  std::string domain_;
  std::string op_type_;
  int since_version_;
  std::vector<FormalParameter> inputs_;
  std::vector<FormalParameter> outputs_;
  std::vector<AttributeSpec> attributes_;
  InferenceFunction inference_;
};

// What a schema sees of one node: its proto, the declared or inferred type of each input
// (null: unknown or omitted) and the types it infers for the outputs.
class InferenceContext {
 public:
  // `model` resolves StructTypeProto.type_ref (may be null); `desc` names the node in errors.
  InferenceContext(const NodeProto& node, std::vector<const TypeProto*> input_types,
                   const ModelProto* model, std::string desc);

  const NodeProto& node() const { return node_; }
  const ModelProto* model() const { return model_; }
  const std::string& desc() const { return desc_; }
  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  const TypeProto* input_type(int i) const;
  // The node's attribute, or the schema's default when absent (null when neither exists).
  const AttributeProto* attribute(const std::string& name) const;
  void set_schema(const LightOpSchema* schema) { schema_ = schema; }

  // The inferred type of output `i` (created on first use).
  TypeProto& output_type(int i);
  const std::map<int, TypeProto>& output_types() const { return output_types_; }

  [[noreturn]] void Fail(const std::string& message) const;

 private:
  const NodeProto& node_;
  std::vector<const TypeProto*> input_types_;
  const ModelProto* model_;
  std::string desc_;
  const LightOpSchema* schema_ = nullptr;
  std::map<int, TypeProto> output_types_;
};

// The schemas in force per (domain, op type, imported opset version). The first use
// registers the built-in schemas (domain ai.rt). Thread safe.
class LightSchemaRegistry {
 public:
  static LightSchemaRegistry& Instance();
  // The schema with the largest since_version <= opset_version, or null. "" and "ai.onnx"
  // name the same domain.
  static const LightOpSchema* Get(const std::string& domain, const std::string& op_type,
                                  int64_t opset_version);

  // Adds a schema; kInvalidArgument if one with the same domain, op type and since_version
  // exists. The schema lives as long as the registry (Get returns stable pointers).
  void Register(LightOpSchema schema);
  const LightOpSchema* Find(const std::string& domain, const std::string& op_type,
                            int64_t opset_version) const;

 private:
  LightSchemaRegistry();

  mutable std::shared_mutex mutex_;
  // (domain, op type) -> since_version -> schema.
  std::map<std::pair<std::string, std::string>, std::map<int, std::unique_ptr<const LightOpSchema>>>
      schemas_;
};

// Registers ai.rt::PagedAttention and ai.rt::QuantizePagedCache, opset 1
// (core/ai_rt_schemas.cc).
void RegisterAiRtSchemas(LightSchemaRegistry& registry);

// Attribute value builders for defaults.
AttributeProto IntAttribute(const std::string& name, int64_t value);

}  // namespace onnx_light::core
