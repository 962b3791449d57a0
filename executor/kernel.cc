#include "executor/kernel.h"

#include "executor/attributes.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

OpsetMap default_opset(int64_t onnx_version) {
  return {{"", onnx_version}, {"ai.rt", 1}, {"com.microsoft", 1}};
}

int64_t KernelInfo::node_opset() const { return opset(node_->domain()); }

const RuntimeValue& KernelCall::input_value(size_t i) const {
  if (!has_input(i))
    Fail("required input " + std::to_string(i) +
         (static_cast<int>(i) < node_.input_size() ? " ('" + node_.input(static_cast<int>(i)) + "')"
                                                   : std::string()) +
         " is missing");
  return *inputs_[i];
}

const Tensor& KernelCall::input(size_t i) const {
  const RuntimeValue& v = input_value(i);
  if (!v.is_tensor())
    Fail("input " + std::to_string(i) + " ('" + node_.input(static_cast<int>(i)) +
         "') must be a tensor, got a " + RuntimeValue::KindName(v.kind()));
  return v.tensor();
}

Tensor& KernelCall::AllocateOutput(size_t i, DataType dtype, Shape shape) {
  const std::string name =
      static_cast<int>(i) < node_.output_size() ? node_.output(static_cast<int>(i)) : std::string();
  if (!output_wanted(i)) {
    scratch_output_ = Tensor(name, dtype, std::move(shape), allocator_);
    return scratch_output_;
  }
  *outputs_[i] = RuntimeValue(Tensor(name, dtype, std::move(shape), allocator_));
  return outputs_[i]->mutable_tensor();
}

void KernelCall::SetOutput(size_t i, Tensor tensor) {
  if (!output_wanted(i)) return;
  if (static_cast<int>(i) < node_.output_size()) tensor.set_name(node_.output(static_cast<int>(i)));
  *outputs_[i] = RuntimeValue(std::move(tensor));
}

void KernelCall::SetOutputValue(size_t i, RuntimeValue value) {
  if (!output_wanted(i)) return;
  *outputs_[i] = std::move(value);
}

BindingLease* KernelCall::append_lease(size_t input, size_t output) const {
  if (context_ == nullptr || !has_input(input) || !output_wanted(output)) return nullptr;
  for (const AppendSite& site : append_sites_)
    if (site.input == input && site.output == output) return context_->binding_lease(site.binding);
  return nullptr;
}

RuntimeContext& KernelCall::context() const {
  if (context_ == nullptr) Fail("this kernel needs a RuntimeContext");
  return *context_;
}

void KernelCall::Fail(const std::string& message) const {
  Throw(ErrorCode::kInvalidArgument, NodeLabel(node_) + ": " + message);
}

void KernelBase::set_node(const NodeProto& node) {
  node_ = &node;
  Configure(node);
}

const NodeProto& KernelBase::node() const {
  OL_CHECK(node_ != nullptr, ErrorCode::kFailedPrecondition, "kernel used before set_node()");
  return *node_;
}

}  // namespace onnx_light::core::runtime
