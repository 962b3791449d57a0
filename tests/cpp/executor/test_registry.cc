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
  auto factory = [&](int version) {
    return [&chosen, version](const NodeProto&, RuntimeContext&, const KernelInfo& info) {
      chosen = version;
      CHECK(info.since_version() == version);
      return nullptr;
    };
  };
  r.Register("", "Op", core::symbolic::Device::kCPU, factory(1), 1);
  r.Register("", "Op", core::symbolic::Device::kCPU, factory(13), 13);
  RuntimeContext ctx;
  NodeProto node;
  int64_t since = 0;
  (*r.Find("", "Op", 12, core::symbolic::Device::kCPU, &since))(
      node, ctx, KernelInfo(node, ctx.kernel_ctx(), since));
  CHECK(chosen == 1);
  CHECK(since == 1);
  (*r.Find("", "Op", 18, core::symbolic::Device::kCPU, &since))(
      node, ctx, KernelInfo(node, ctx.kernel_ctx(), since));
  CHECK(chosen == 13);
  CHECK(since == 13);
  CHECK(r.Find("", "Op", 0) != nullptr);
}

TEST_CASE("Identity shares the input's bytes") {
  RuntimeContext ctx;
  NodeProto node;
  node.set_op_type("Identity");
  node.add_input("x");
  node.add_output("y");
  auto kernel =
      (*BuiltinKernels().Find("", "Identity", 18))(node, ctx, KernelInfo(node, ctx.kernel_ctx()));
  RuntimeValue x(Tensor::FromFloat("x", {2}, {1.f, 2.f}));
  RuntimeValue y;
  const RuntimeValue* inputs[] = {&x};
  RuntimeValue* outputs[] = {&y};
  KernelCall call(&ctx, node, inputs, outputs);
  kernel->Compute(call);
  CHECK(y.tensor().raw_data() == x.tensor().raw_data());
  CHECK(y.tensor().name() == "x");
}
