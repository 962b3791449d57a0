#include "executor/attributes.h"

#include "core/error.h"
#include "core/tensor_proto.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

std::string NodeLabel(const NodeProto& node) {
  return node.op_type() + " node '" + node.name() + "'";
}

const AttributeProto* FindAttribute(const NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool HasAttribute(const NodeProto& node, const std::string& name) {
  return FindAttribute(node, name) != nullptr;
}

namespace {
const AttributeProto* Typed(const NodeProto& node, const std::string& name,
                            AttributeProto::AttributeType type) {
  const AttributeProto* a = FindAttribute(node, name);
  if (a == nullptr) return nullptr;
  if (!a->ref_attr_name().empty())
    Throw(ErrorCode::kInvalidModel, NodeLabel(node) + ": attribute '" + name +
                                        "' is an unresolved reference to '" + a->ref_attr_name() +
                                        "'");
  if (a->type() != type && a->type() != AttributeProto::UNDEFINED)
    Throw(ErrorCode::kInvalidModel, NodeLabel(node) + ": attribute '" + name + "' has type " +
                                        AttributeProto::AttributeType_Name(a->type()) +
                                        ", expected " + AttributeProto::AttributeType_Name(type));
  return a;
}
}  // namespace

int64_t AttrInt(const NodeProto& node, const std::string& name, int64_t default_value) {
  const AttributeProto* a = Typed(node, name, AttributeProto::INT);
  return a ? a->i() : default_value;
}

int64_t RequiredAttrInt(const NodeProto& node, const std::string& name) {
  const AttributeProto* a = Typed(node, name, AttributeProto::INT);
  OL_CHECK(a != nullptr, ErrorCode::kInvalidModel,
           NodeLabel(node) + ": missing required attribute '" + name + "'");
  return a->i();
}

float AttrFloat(const NodeProto& node, const std::string& name, float default_value) {
  const AttributeProto* a = Typed(node, name, AttributeProto::FLOAT);
  return a ? a->f() : default_value;
}

std::string AttrString(const NodeProto& node, const std::string& name,
                       const std::string& default_value) {
  const AttributeProto* a = Typed(node, name, AttributeProto::STRING);
  return a ? a->s() : default_value;
}

std::vector<int64_t> AttrInts(const NodeProto& node, const std::string& name,
                              std::vector<int64_t> default_value) {
  const AttributeProto* a = Typed(node, name, AttributeProto::INTS);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : default_value;
}

std::optional<std::vector<int64_t>> OptionalAttrInts(const NodeProto& node,
                                                     const std::string& name) {
  const AttributeProto* a = Typed(node, name, AttributeProto::INTS);
  if (a == nullptr) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<float> AttrFloats(const NodeProto& node, const std::string& name,
                              std::vector<float> default_value) {
  const AttributeProto* a = Typed(node, name, AttributeProto::FLOATS);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : default_value;
}

std::optional<Tensor> AttrTensor(const NodeProto& node, const std::string& name) {
  const AttributeProto* a = Typed(node, name, AttributeProto::TENSOR);
  if (a == nullptr) return std::nullopt;
  return TensorFromProto(a->t());
}

const GraphProto* AttrGraph(const NodeProto& node, const std::string& name) {
  const AttributeProto* a = Typed(node, name, AttributeProto::GRAPH);
  return a ? &a->g() : nullptr;
}

}  // namespace onnx_light::core::runtime
