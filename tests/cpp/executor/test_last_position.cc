// RunOptions::last_position_outputs: a graph output produced directly by a MatMul (an LM
// head) and read by no node comes back computed for the last row along axis -2 alone; any
// other output (read by a node, produced by another op, not named) comes back whole.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/text_parser.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

std::shared_ptr<ModelProto> HeadModel() {
  return std::make_shared<ModelProto>(core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "g (float[B, S, 3] x) => (float[B, S, 2] y, float[B, S, 2] z, float[B, S, 2] nz,\n"
      "  float[B, S, 2] r)\n"
      "<float[3, 2] w = {1, -2, 0.5, 3, -1, 4}, float[3, 2] w2 = {2, 1, 0, -1, 1, 1}>\n"
      "{\n"
      "  y = MatMul(x, w)\n"
      "  a = Abs(x)\n"
      "  z = MatMul(a, w2)\n"
      "  nz = Neg(z)\n"
      "  n = Neg(x)\n"
      "  h = MatMul(n, w)\n"
      "  r = Relu(h)\n"
      "}\n"));
}

RuntimeValueMap RunHead(const RuntimeSession& session, RuntimeContext& context, int64_t b,
                        int64_t s, const std::vector<std::string>* last) {
  std::vector<float> x(static_cast<size_t>(b * s * 3));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 2.5f;
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {b, s, 3}, x));
  RunOptions options;
  options.last_position_outputs = last;
  return session.Run(context, std::move(feeds), {"y", "z", "nz", "r"}, options);
}

}  // namespace

TEST_CASE("an LM-head MatMul output wanted at the last position computes that row alone") {
  RuntimeContext context;
  RuntimeSession session(HeadModel(), context);
  CHECK(session.plan(context).fused_node_count() == 0);  // one MatMul per input: no group
  const std::vector<std::string> last = {"y", "z", "r"};
  for (int64_t b : {1, 2}) {
    for (int64_t s : {1, 5}) {
      CAPTURE(b);
      CAPTURE(s);
      RuntimeValueMap full = RunHead(session, context, b, s, nullptr);
      RuntimeValueMap trimmed = RunHead(session, context, b, s, &last);
      const Tensor& y = trimmed.at("y").tensor();
      CHECK(y.shape() == Shape{b, 1, 2});
      const std::vector<float> whole = full.at("y").tensor().ToFloatVector();
      const std::vector<float> got = y.ToFloatVector();
      for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < 2; ++j)
          CHECK(got[static_cast<size_t>(i * 2 + j)] ==
                whole[static_cast<size_t>((i * s + s - 1) * 2 + j)]);
      // z is also read by Neg, r comes from a Relu: both whole.
      CHECK(trimmed.at("z").tensor().shape() == Shape{b, s, 2});
      CHECK(trimmed.at("z").tensor().ToFloatVector() == full.at("z").tensor().ToFloatVector());
      CHECK(trimmed.at("r").tensor().shape() == Shape{b, s, 2});
      CHECK(trimmed.at("nz").tensor().shape() == Shape{b, s, 2});
    }
  }
}
