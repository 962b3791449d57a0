#include "executor/control_flow/subgraph.h"

#include <algorithm>
#include <cstring>

#include "executor/attributes.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

Subgraph::Subgraph(const NodeProto& node, const std::string& attribute, RuntimeContext& context)
    : attribute_(attribute) {
  const GraphProto* body = AttrGraph(node, attribute);
  OL_CHECK(body != nullptr, ErrorCode::kInvalidModel,
           NodeLabel(node) + ": missing graph attribute '" + attribute + "'");
  const PlanBuildScope* scope = CurrentPlanBuildScope();
  OL_CHECK(scope != nullptr, ErrorCode::kFailedPrecondition,
           NodeLabel(node) + ": control-flow kernels are created while a plan is built");
  PlanBuildScope sub = *scope;
  sub.depth = scope->depth + 1;
  const std::vector<std::string> captures = FreeNames(*body);
  const std::vector<std::string> implicit = ImplicitInputs(node);
  for (const auto& name : captures) {
    auto it = std::find(implicit.begin(), implicit.end(), name);
    capture_inputs_.push_back(static_cast<size_t>(node.input_size()) +
                              static_cast<size_t>(it - implicit.begin()));
  }
  plan_ = GraphPlan::Build(*body, context, sub, captures);
}

void Subgraph::Run(KernelCall& call, RunFrame& frame, std::vector<RuntimeValue>& inputs,
                   std::vector<RuntimeValue>& outputs) const {
  frame.Reset();
  const auto& plan_inputs = plan_->inputs();
  if (inputs.size() != plan_inputs.size())
    call.Fail("the '" + attribute_ + "' body declares " + std::to_string(plan_inputs.size()) +
              " inputs, the node provides " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) frame.Set(plan_inputs[i].slot, std::move(inputs[i]));
  const auto& captures = plan_->capture_slots();
  for (size_t c = 0; c < captures.size(); ++c)
    if (call.has_input(capture_inputs_[c]))
      frame.Set(captures[c], call.input_value(capture_inputs_[c]));
  RuntimeContext child = call.context().MakeChild(&frame);
  ExecuteInline(*plan_, frame, child, RunOptions{child.cancel_requested()});
  outputs.resize(plan_->outputs().size());
  for (size_t o = 0; o < outputs.size(); ++o) {
    outputs[o] = frame.TakeOutput(o);
    if (outputs[o].empty())
      call.Fail("the '" + attribute_ + "' body did not produce its output '" +
                plan_->outputs()[o].name + "'");
  }
  if (child.events_enabled()) {
    RuntimeEvent event;
    event.action = RuntimeEventAction::kSubgraph;
    event.node_name = call.node().name();
    event.op_type = call.node().op_type();
    child.RecordEvent(std::move(event));
  }
}

bool ScalarBool(const KernelCall& call, const Tensor& t, const std::string& what) {
  if (t.dtype() != DataType::kBool || t.numel() != 1)
    call.Fail(what + " must be a single BOOL, got " + DataTypeName(t.dtype()) + " " +
              ShapeToString(t.shape()));
  return *static_cast<const uint8_t*>(t.raw_data()) != 0;
}

int64_t ScalarInt64(const KernelCall& call, const Tensor& t, const std::string& what) {
  if (t.dtype() != DataType::kInt64 || t.numel() != 1)
    call.Fail(what + " must be a single INT64, got " + DataTypeName(t.dtype()) + " " +
              ShapeToString(t.shape()));
  return *t.data<int64_t>();
}

namespace {
size_t ElementBytes(DataType dtype, const char* what) {
  const int bits = ElementBits(dtype);
  OL_CHECK(bits > 0 && bits % 8 == 0, ErrorCode::kNotImplemented,
           std::string(what) + " of " + DataTypeName(dtype) + " tensors is not supported");
  return static_cast<size_t>(bits / 8);
}
int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}
}  // namespace

Tensor SliceAlongAxis(const Tensor& t, int64_t axis, int64_t index, Allocator& allocator) {
  const size_t es = ElementBytes(t.dtype(), "slicing");
  const size_t a = static_cast<size_t>(axis);
  Shape shape = t.shape();
  const int64_t n = shape[a];
  shape.erase(shape.begin() + axis);
  const size_t outer = static_cast<size_t>(Product(t.shape(), 0, a));
  const size_t inner = static_cast<size_t>(Product(t.shape(), a + 1, t.shape().size())) * es;
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  if (axis == 0)  // a contiguous block: a view on the same owner
    return Tensor::Borrow(t.name(), t.dtype(), std::move(shape),
                          src + static_cast<size_t>(index) * inner, t.owner());
  Tensor out(t.name(), t.dtype(), std::move(shape), allocator);
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  for (size_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * inner,
                src + (o * static_cast<size_t>(n) + static_cast<size_t>(index)) * inner, inner);
  return out;
}

Tensor StackAlongAxis(const std::vector<Tensor>& parts, int64_t axis, Allocator& allocator,
                      const std::string& name) {
  const Tensor& first = parts.front();
  for (const Tensor& p : parts)
    OL_CHECK(p.dtype() == first.dtype() && p.shape() == first.shape(), ErrorCode::kInvalidArgument,
             "scan output '" + name + "' changes from " + DataTypeName(first.dtype()) + " " +
                 ShapeToString(first.shape()) + " to " + DataTypeName(p.dtype()) + " " +
                 ShapeToString(p.shape()) + " between iterations");
  const size_t es = ElementBytes(first.dtype(), "stacking");
  const size_t a = static_cast<size_t>(axis);
  Shape shape = first.shape();
  shape.insert(shape.begin() + axis, static_cast<int64_t>(parts.size()));
  const size_t outer = static_cast<size_t>(Product(first.shape(), 0, a));
  const size_t inner = static_cast<size_t>(Product(first.shape(), a, first.shape().size())) * es;
  Tensor out(name, first.dtype(), std::move(shape), allocator);
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  const size_t count = parts.size();
  for (size_t t = 0; t < count; ++t) {
    const auto* src = static_cast<const uint8_t*>(parts[t].raw_data());
    for (size_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * count + t) * inner, src + o * inner, inner);
  }
  return out;
}

Tensor EmptyStack(const KernelCall& call, const GraphProto& body, size_t output_index, int64_t axis,
                  Allocator& allocator) {
  const auto& decl = body.output(static_cast<int>(output_index));
  if (!decl.type().has_tensor_type() || decl.type().tensor_type().elem_type() == 0)
    call.Fail("no iteration ran and the body output '" + decl.name() +
              "' declares no element type for the empty scan output");
  const auto& tt = decl.type().tensor_type();
  Shape shape;
  for (const auto& d : tt.shape().dim()) shape.push_back(d.has_dim_value() ? d.dim_value() : 0);
  if (axis > static_cast<int64_t>(shape.size())) axis = static_cast<int64_t>(shape.size());
  shape.insert(shape.begin() + axis, 0);
  return Tensor(decl.name(), static_cast<DataType>(tt.elem_type()), std::move(shape), allocator);
}

}  // namespace onnx_light::core::runtime
