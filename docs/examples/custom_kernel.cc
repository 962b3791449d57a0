// A custom kernel registered on a RuntimeContext, used by a RuntimeSession.
// Built and run by CTest ("docs example: custom_kernel"); exits nonzero on a wrong result.
#include <cstdio>
#include <memory>

#include "executor/attributes.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

// y = x * scale. The constructor side (Configure) parses attributes once per node;
// Compute is const and thread safe: it keeps no per-call state in members.
class Scale final : public KernelBase {
 public:
  explicit Scale(const KernelInfo&) {}
  void Configure(const NodeProto& node) override { scale_ = AttrFloat(node, "scale", 1.f); }
  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    if (x.dtype() != core::DataType::kFloat) call.Fail("x must be FLOAT");
    Tensor& y = call.AllocateOutput(0, core::DataType::kFloat, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i)
      y.mutable_data<float>()[i] = x.data<float>()[i] * scale_;
  }

 private:
  float scale_ = 1.f;
};

int main() {
  // graph (x) => (y) { h = Scale<scale=2>(x); y = Identity(h) }
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  auto* opset = model->add_opset_import();
  opset->set_domain("");
  opset->set_version(18);
  auto* custom = model->add_opset_import();
  custom->set_domain("example");
  custom->set_version(1);
  GraphProto* graph = model->mutable_graph();
  graph->add_input()->set_name("x");
  graph->add_output()->set_name("y");
  NodeProto* scale = graph->add_node();
  scale->set_name("scale");
  scale->set_op_type("Scale");
  scale->set_domain("example");
  scale->add_input("x");
  scale->add_output("h");
  AttributeProto* attr = scale->add_attribute();
  attr->set_name("scale");
  attr->set_type(AttributeProto::FLOAT);
  attr->set_f(2.f);
  NodeProto* identity = graph->add_node();
  identity->set_name("identity");
  identity->set_op_type("Identity");
  identity->add_input("h");
  identity->add_output("y");

  RuntimeContext context(KernelContext(18));
  context.RegisterKernelFn("example", "Scale", core::symbolic::Device::kCPU, &MakeKernel<Scale>);

  RuntimeSession session(model);  // the plan is compiled on the first Run, then reused
  for (int call = 0; call < 2; ++call) {
    RuntimeValueMap feeds;
    feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {3}, {1.f, 2.f, 3.f}));
    RuntimeValueMap outputs = session.Run(context, std::move(feeds));
    std::vector<float> y = outputs.at("y").tensor().ToFloatVector();
    std::printf("y = [%g, %g, %g]\n", y[0], y[1], y[2]);
    if (y != std::vector<float>{2.f, 4.f, 6.f}) return 1;
  }
  return 0;
}
