// Model-local functions (FunctionProto): each call site compiles the function body once, with
// the call's attribute references resolved, into a sub-plan run inline in a child context.
#pragma once

#include <memory>
#include <string>

#include "executor/graph_plan.h"

namespace onnx_light {
class FunctionProto;
class ModelProto;
}  // namespace onnx_light

namespace onnx_light::core::runtime {

// The function `domain`::`name` declared by `model`, or null (also when model is null).
const FunctionProto* FindModelFunction(const ModelProto* model, const std::string& domain,
                                       const std::string& name);

std::unique_ptr<KernelBase> MakeFunctionKernel(const NodeProto& call_node,
                                               const FunctionProto& function,
                                               RuntimeContext& context,
                                               const PlanBuildScope& scope);

}  // namespace onnx_light::core::runtime
