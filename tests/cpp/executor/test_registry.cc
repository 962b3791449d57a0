#include <doctest/doctest.h>

#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

TEST_CASE("the built-in registry finds Identity and picks the newest version <= opset") {
  const KernelRegistry& builtins = BuiltinKernels();
  CHECK(builtins.Contains("", "Identity"));
  CHECK(builtins.Find("ai.onnx", "Identity", 18) != nullptr);
  CHECK(builtins.Find("", "NoSuchOp", 18) == nullptr);
  KernelRegistry r;
  int chosen = 0;
  r.Register("", "Op", core::symbolic::Device::kCPU,
             [&](const NodeProto&, RuntimeContext&) { chosen = 1; return nullptr; }, 1);
  r.Register("", "Op", core::symbolic::Device::kCPU,
             [&](const NodeProto&, RuntimeContext&) { chosen = 13; return nullptr; }, 13);
  RuntimeContext ctx;
  NodeProto node;
  (*r.Find("", "Op", 12))(node, ctx);
  CHECK(chosen == 1);
  (*r.Find("", "Op", 18))(node, ctx);
  CHECK(chosen == 13);
  CHECK(r.Find("", "Op", 0) != nullptr);
}

TEST_CASE("Identity shares the input's bytes") {
  RuntimeContext ctx;
  NodeProto node;
  node.set_op_type("Identity");
  node.add_input("x");
  node.add_output("y");
  auto kernel = (*BuiltinKernels().Find("", "Identity", 18))(node, ctx);
  RuntimeValue x(Tensor::FromFloat("x", {2}, {1.f, 2.f}));
  RuntimeValue y;
  const RuntimeValue* inputs[] = {&x};
  RuntimeValue* outputs[] = {&y};
  KernelCall call(&ctx, node, inputs, outputs);
  kernel->Compute(call);
  CHECK(y.tensor().raw_data() == x.tensor().raw_data());
  CHECK(y.tensor().name() == "x");
}
