// Kernels are built from a KernelInfo that carries the opsets in force where their node sits
// (the model's opset_import, a model-local function's own, inherited by subgraphs), not the
// caller's KernelContext defaults. Softmax is the witness: opsets 1-12 coerce the input to
// 2D at axis 1 (default), opset 13 normalises along the last axis.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/text_parser.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

// x of shape [2, 3, 4].
std::vector<float> Input() {
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.25f * static_cast<float>(i % 7) - 0.1f * static_cast<float>(i);
  return x;
}

// (Log)softmax over consecutive rows of `row` elements.
std::vector<float> Rows(const std::vector<float>& x, size_t row, bool log) {
  std::vector<float> y(x.size());
  for (size_t r = 0; r < x.size(); r += row) {
    float top = x[r];
    for (size_t i = r; i < r + row; ++i) top = std::max(top, x[i]);
    double sum = 0;
    for (size_t i = r; i < r + row; ++i) sum += std::exp(static_cast<double>(x[i] - top));
    for (size_t i = r; i < r + row; ++i) {
      const double shifted = static_cast<double>(x[i] - top);
      y[i] = static_cast<float>(log ? shifted - std::log(sum) : std::exp(shifted) / sum);
    }
  }
  return y;
}
// Opsets 1-12 with the default axis 1: each batch's 3 x 4 block is one row.
std::vector<float> Legacy(bool log) { return Rows(Input(), 12, log); }
// Opset 13 with the default axis -1.
std::vector<float> Modern(bool log) { return Rows(Input(), 4, log); }

bool Near(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > 1e-5f) return false;
  return true;
}

std::vector<float> Run(const std::string& text, int64_t context_opset, bool with_cond = false) {
  auto model = std::make_shared<ModelProto>(core::ParseModel(text));
  RuntimeContext context{KernelContext(context_opset)};
  RuntimeSession session(model, context);
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {2, 3, 4}, Input()));
  if (with_cond) feeds["c"] = RuntimeValue(Tensor::FromBool("c", {}, {true}));
  return session.Run(context, std::move(feeds)).at("y").tensor().ToFloatVector();
}

std::string Header(int64_t opset, const std::string& more = "") {
  return "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + more + "]>\n";
}

}  // namespace

TEST_CASE("Softmax and LogSoftmax follow the model's opset, not the context's default") {
  CHECK_FALSE(Near(Legacy(false), Modern(false)));
  CHECK_FALSE(Near(Legacy(true), Modern(true)));
  for (const bool log : {false, true}) {
    CAPTURE(log);
    const std::string op = log ? "LogSoftmax" : "Softmax";
    const std::string body = "g (float[2, 3, 4] x) => (float[2, 3, 4] y) { y = " + op + "(x) }\n";
    CHECK(Near(Run(Header(12) + body, 18), Legacy(log)));
    CHECK(Near(Run(Header(13) + body, 11), Modern(log)));
    // Unchanged when both agree.
    CHECK(Near(Run(Header(12) + body, 12), Legacy(log)));
    CHECK(Near(Run(Header(13) + body, 18), Modern(log)));
  }
}

TEST_CASE("a model-local function's body follows the function's own opset_import") {
  const std::string call = "g (float[2, 3, 4] x) => (float[2, 3, 4] y) { y = local.F(x) }\n";
  auto function = [](int64_t opset) {
    return "<domain: \"local\", opset_import: [\"\" : " + std::to_string(opset) +
           "]>\nF (a) => (r) { r = Softmax(a) }\n";
  };
  CHECK(Near(Run(Header(18, ", \"local\" : 1") + call + function(12), 18), Legacy(false)));
  CHECK(Near(Run(Header(12, ", \"local\" : 1") + call + function(13), 11), Modern(false)));
}

TEST_CASE("control-flow bodies follow the enclosing model's opset") {
  const std::string body =
      "g (bool c, float[2, 3, 4] x) => (float[2, 3, 4] y) {\n"
      "  y = If (c) <then_branch = t () => (float[2, 3, 4] z) { z = Softmax(x) },\n"
      "              else_branch = e () => (float[2, 3, 4] z) { z = Identity(x) }>\n"
      "}\n";
  CHECK(Near(Run(Header(12) + body, 18, true), Legacy(false)));
  CHECK(Near(Run(Header(13) + body, 11, true), Modern(false)));
}

TEST_CASE("a custom kernel's KernelInfo carries its node, since-version and the model's opsets") {
  struct Seen {
    std::string node;
    int64_t since = -1, node_opset = -1, onnx = -1, absent = -1;
  } seen;
  class Copy final : public KernelBase {
   public:
    void Compute(KernelCall& call) const override { call.SetOutput(0, call.input(0)); }
  };
  RuntimeContext context{KernelContext(18)};
  context.RegisterKernelFn(
      "test", "Copy", core::symbolic::Device::kCPU,
      [&seen](const NodeProto& node, RuntimeContext&, const KernelInfo& info) {
        CHECK(&info.node() == &node);
        seen = {node.name(), info.since_version(), info.node_opset(), info.opset("ai.onnx"),
                info.opset("nowhere")};
        auto kernel = std::make_unique<Copy>();
        kernel->set_node(node);
        return std::unique_ptr<KernelBase>(std::move(kernel));
      },
      2);
  auto model = std::make_shared<ModelProto>(core::ParseModel(
      Header(12, ", \"test\" : 3") + "g (float[2] x) => (float[2] y) { y = test.Copy(x) }\n"));
  model->mutable_graph()->mutable_node(0)->set_name("copy");
  RuntimeSession session(model, context);
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {2}, {1.f, 2.f}));
  CHECK(session.Run(context, std::move(feeds)).at("y").tensor().ToFloatVector() ==
        std::vector<float>{1.f, 2.f});
  CHECK(seen.node == "copy");
  CHECK(seen.since == 2);
  CHECK(seen.node_opset == 3);
  CHECK(seen.onnx == 12);
  CHECK(seen.absent == 0);
}
