// Attribute readers for kernels' Configure(): typed lookups with defaults, and errors that
// name the node and attribute.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace onnx_light {
class NodeProto;
class AttributeProto;
class GraphProto;
}  // namespace onnx_light

namespace onnx_light::core::runtime {

const AttributeProto* FindAttribute(const NodeProto& node, const std::string& name);
bool HasAttribute(const NodeProto& node, const std::string& name);

int64_t AttrInt(const NodeProto& node, const std::string& name, int64_t default_value);
int64_t RequiredAttrInt(const NodeProto& node, const std::string& name);
float AttrFloat(const NodeProto& node, const std::string& name, float default_value);
std::string AttrString(const NodeProto& node, const std::string& name,
                       const std::string& default_value);
std::vector<int64_t> AttrInts(const NodeProto& node, const std::string& name,
                              std::vector<int64_t> default_value = {});
std::optional<std::vector<int64_t>> OptionalAttrInts(const NodeProto& node,
                                                     const std::string& name);
std::vector<float> AttrFloats(const NodeProto& node, const std::string& name,
                              std::vector<float> default_value = {});
// The `value`-style tensor attribute, converted with TensorFromProto (core/tensor_proto.h).
std::optional<Tensor> AttrTensor(const NodeProto& node, const std::string& name);
const GraphProto* AttrGraph(const NodeProto& node, const std::string& name);

// "<op_type> node '<name>'" for messages.
std::string NodeLabel(const NodeProto& node);

}  // namespace onnx_light::core::runtime
