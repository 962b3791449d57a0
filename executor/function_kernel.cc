#include "executor/function_kernel.h"

#include "executor/attributes.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

namespace {

std::string NormalDomain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

// Replaces attribute references (ref_attr_name) by the call's attribute, else the function's
// default, else drops the attribute (absent, as ONNX specifies); recurses into subgraphs.
void ResolveAttributeRefs(NodeProto& node, const NodeProto& call, const FunctionProto& fn) {
  auto* attrs = node.mutable_attribute();
  for (int a = 0; a < attrs->size();) {
    AttributeProto& attr = *attrs->Mutable(a);
    if (!attr.ref_attr_name().empty()) {
      const AttributeProto* value = FindAttribute(call, attr.ref_attr_name());
      if (value == nullptr)
        for (const auto& d : fn.attribute_proto())
          if (d.name() == attr.ref_attr_name()) value = &d;
      if (value == nullptr) {
        attrs->DeleteSubrange(a, 1);
        continue;
      }
      const std::string name = attr.name();
      attr = *value;
      attr.set_name(name);
    }
    if (attr.has_g())
      for (auto& n : *attr.mutable_g()->mutable_node()) ResolveAttributeRefs(n, call, fn);
    for (auto& g : *attr.mutable_graphs())
      for (auto& n : *g.mutable_node()) ResolveAttributeRefs(n, call, fn);
    ++a;
  }
}

class FunctionKernel final : public KernelBase {
 public:
  FunctionKernel(const NodeProto& call, const FunctionProto& fn, RuntimeContext& context,
                 const PlanBuildScope& scope)
      : body_(std::make_unique<GraphProto>()) {
    const std::string label = NodeLabel(call);
    OL_CHECK(call.input_size() <= fn.input_size(), ErrorCode::kInvalidModel,
             label + ": function '" + fn.name() + "' takes " + std::to_string(fn.input_size()) +
                 " inputs, the node passes " + std::to_string(call.input_size()));
    OL_CHECK(call.output_size() <= fn.output_size(), ErrorCode::kInvalidModel,
             label + ": function '" + fn.name() + "' has " + std::to_string(fn.output_size()) +
                 " outputs, the node expects " + std::to_string(call.output_size()));
    body_->set_name(fn.name());
    for (const auto& i : fn.input()) body_->add_input()->set_name(i);
    for (const auto& o : fn.output()) body_->add_output()->set_name(o);
    for (const auto& n : fn.node()) {
      NodeProto* copy = body_->add_node();
      *copy = n;
      ResolveAttributeRefs(*copy, call, fn);
    }
    PlanBuildScope sub = scope;
    sub.depth = scope.depth + 1;
    for (const auto& o : fn.opset_import()) sub.opsets.set_opset(o.domain(), o.version());
    const auto free = FreeNames(*body_);
    OL_CHECK(free.empty(), ErrorCode::kInvalidModel,
             label + ": function '" + fn.name() + "' reads '" +
                 (free.empty() ? std::string() : free.front()) + "', which it does not define");
    plan_ = GraphPlan::Build(*body_, context, sub);
    set_node(call);
  }

  void Compute(KernelCall& call) const override {
    RunFrame frame(*plan_);
    const auto& inputs = plan_->inputs();
    for (size_t i = 0; i < inputs.size() && i < call.input_count(); ++i)
      if (call.has_input(i)) frame.Set(inputs[i].slot, call.input_value(i));
    RuntimeContext child = call.context().MakeChild(&frame);
    ExecuteInline(*plan_, frame, child, RunOptions{child.cancel_requested()});
    const auto& outputs = plan_->outputs();
    for (size_t o = 0; o < call.output_count() && o < outputs.size(); ++o) {
      if (!call.output_wanted(o)) continue;
      RuntimeValue v = frame.TakeOutput(o);
      if (v.is_tensor())
        call.SetOutput(o, std::move(v).TakeTensor());
      else
        call.SetOutputValue(o, std::move(v));
    }
    if (child.events_enabled()) {
      RuntimeEvent event;
      event.action = RuntimeEventAction::kFunction;
      event.node_name = call.node().name();
      event.op_type = call.node().op_type();
      child.RecordEvent(std::move(event));
    }
  }

 private:
  std::unique_ptr<GraphProto> body_;
  std::unique_ptr<GraphPlan> plan_;
};

}  // namespace

const FunctionProto* FindModelFunction(const ModelProto* model, const std::string& domain,
                                       const std::string& name) {
  if (model == nullptr) return nullptr;
  for (const auto& f : model->functions())
    if (f.name() == name && NormalDomain(f.domain()) == domain) return &f;
  return nullptr;
}

std::unique_ptr<KernelBase> MakeFunctionKernel(const NodeProto& call_node,
                                               const FunctionProto& function,
                                               RuntimeContext& context,
                                               const PlanBuildScope& scope) {
  return std::make_unique<FunctionKernel>(call_node, function, context, scope);
}

}  // namespace onnx_light::core::runtime
