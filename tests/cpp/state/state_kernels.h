// Test kernels for the state tests (domain "test"), observing pointers and failing or
// cancelling on demand.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/text_parser.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace state_test {

using namespace onnx_light::core::runtime;

struct StepProbe {
  std::atomic<int> calls{0};     // Compute calls so far (all nodes)
  std::atomic<int> fail_at{-1};  // the Compute call index that throws
  std::mutex mu;
  std::vector<const void*> input_data;                // data pointer of input 0 per call
  std::function<void(const std::string& node)> hook;  // runs at the start of each call
};

// test.Step(x [, y]) -> x + y (or x + 1 when y is absent), FLOAT.
class StepKernel final : public KernelBase {
 public:
  explicit StepKernel(StepProbe& probe) : probe_(probe) {}
  void Compute(KernelCall& call) const override {
    const int index = probe_.calls.fetch_add(1);
    if (probe_.hook) probe_.hook(call.node().name());
    {
      std::lock_guard<std::mutex> lock(probe_.mu);
      probe_.input_data.push_back(call.input(0).raw_data());
    }
    if (index == probe_.fail_at.load())
      onnx_light::core::Throw(onnx_light::core::ErrorCode::kRuntime,
                              "injected failure in node '" + call.node().name() + "'");
    const Tensor& x = call.input(0);
    Tensor& y = call.AllocateOutput(0, onnx_light::core::DataType::kFloat, x.shape());
    float* out = y.mutable_data<float>();
    for (int64_t i = 0; i < x.numel(); ++i)
      out[i] = x.data<float>()[i] + (call.has_input(1) ? call.input(1).data<float>()[i] : 1.f);
  }

 private:
  StepProbe& probe_;
};

// test.Resize(x) -> a FLOAT tensor of shape [1] (breaks a [2] declaration).
class WrongShapeKernel final : public KernelBase {
 public:
  void Compute(KernelCall& call) const override {
    call.AllocateOutput(0, onnx_light::core::DataType::kFloat, {1}).mutable_data<float>()[0] = 0;
  }
};

inline void RegisterStateKernels(RuntimeContext& context, StepProbe& probe) {
  context.RegisterKernelFn(
      "test", "Step", onnx_light::core::symbolic::Device::kCPU,
      [&probe](const onnx_light::NodeProto& node, RuntimeContext&, const KernelInfo&) {
        auto k = std::make_unique<StepKernel>(probe);
        k->set_node(node);
        return std::unique_ptr<KernelBase>(std::move(k));
      });
  context.RegisterKernelFn(
      "test", "WrongShape", onnx_light::core::symbolic::Device::kCPU,
      [](const onnx_light::NodeProto& node, RuntimeContext&, const KernelInfo&) {
        auto k = std::make_unique<WrongShapeKernel>();
        k->set_node(node);
        return std::unique_ptr<KernelBase>(std::move(k));
      });
}

inline std::shared_ptr<onnx_light::ModelProto> Parse(const std::string& text) {
  return std::make_shared<onnx_light::ModelProto>(onnx_light::core::ParseModel(text));
}

inline void Bind(onnx_light::ModelProto& model, const std::string& in, const std::string& out) {
  auto* b = model.mutable_graph()->add_persistent_bindings();
  b->set_input_name(in);
  b->set_output_name(out);
}

// past -> Step -> t0 -> ... -> Step(delta) -> present: `nodes` nodes, present = past + nodes-1
// + delta. Binding past <- present.
inline std::shared_ptr<onnx_light::ModelProto> ChainModel(int nodes) {
  std::string body;
  for (int i = 0; i < nodes; ++i) {
    const std::string in = i == 0 ? "past" : "t" + std::to_string(i - 1);
    const std::string out = i == nodes - 1 ? "present" : "t" + std::to_string(i);
    body += out + " = test.Step(" + in + (i == nodes - 1 ? ", delta" : "") + ")\n";
  }
  auto model = Parse(
      "<ir_version: 10, opset_import: [\"\" : 18, \"test\" : 1]>\n"
      "chain (float[2] delta, float[2] past) => (float[2] present) {\n" +
      body + "}");
  Bind(*model, "past", "present");
  return model;
}

inline std::vector<float> Read(const RuntimeValue& v) { return v.tensor().ToFloatVector(); }

}  // namespace state_test
