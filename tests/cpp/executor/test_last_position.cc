// RunOptions::last_position_outputs: a graph output produced by a MatMul (an LM head),
// directly or through row-wise elementwise nodes with one-element constants (a logit soft
// cap or scale), and read by no node comes back computed for the last row along axis -2
// alone; any other output (read by a node, after a node that mixes rows, not named) comes
// back whole.
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
      "  float[B, S, 2] r, float[B, S, 2] capped, float[B, 2, S] tr)\n"
      "<float[3, 2] w = {1, -2, 0.5, 3, -1, 4}, float[3, 2] w2 = {2, 1, 0, -1, 1, 1},\n"
      "  float cap = {3}>\n"
      "{\n"
      "  y = MatMul(x, w)\n"
      "  a = Abs(x)\n"
      "  z = MatMul(a, w2)\n"
      "  nz = Neg(z)\n"
      "  n = Neg(x)\n"
      "  h = MatMul(n, w)\n"
      "  r = Relu(h)\n"
      "  sg = Sigmoid(x)\n"
      "  c = MatMul(sg, w2)\n"
      "  cd = Div(c, cap)\n"
      "  ct = Tanh(cd)\n"
      "  capped = Mul(cap, ct)\n"
      "  rx = Relu(x)\n"
      "  m = MatMul(rx, w)\n"
      "  tr = Transpose <perm = [0, 2, 1]> (m)\n"
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
  return session.Run(context, std::move(feeds), {"y", "z", "nz", "r", "capped", "tr"}, options);
}

}  // namespace

TEST_CASE("an LM-head MatMul output wanted at the last position computes that row alone") {
  RuntimeContext context;
  RuntimeSession session(HeadModel(), context);
  CHECK(session.plan(context).fused_node_count() == 0);  // one MatMul per input: no group
  const std::vector<std::string> last = {"y", "z", "r", "capped", "tr"};
  for (int64_t b : {1, 2}) {
    for (int64_t s : {1, 5}) {
      CAPTURE(b);
      CAPTURE(s);
      RuntimeValueMap full = RunHead(session, context, b, s, nullptr);
      RuntimeValueMap trimmed = RunHead(session, context, b, s, &last);
      // y directly, r through a Relu, capped through Div, Tanh and Mul by a scalar: the last
      // row of each, equal to the last row of the whole.
      for (const char* name : {"y", "r", "capped"}) {
        CAPTURE(name);
        const Tensor& t = trimmed.at(name).tensor();
        CHECK(t.shape() == Shape{b, 1, 2});
        const std::vector<float> whole = full.at(name).tensor().ToFloatVector();
        const std::vector<float> got = t.ToFloatVector();
        for (int64_t i = 0; i < b; ++i)
          for (int64_t j = 0; j < 2; ++j)
            CHECK(
                got[static_cast<size_t>(i * 2 + j)] ==  // (tanh's vector and tail paths)
                doctest::Approx(whole[static_cast<size_t>((i * s + s - 1) * 2 + j)]).epsilon(1e-6));
      }
      // z is also read by Neg, tr is a Transpose (it mixes rows into columns): both whole.
      CHECK(trimmed.at("z").tensor().shape() == Shape{b, s, 2});
      CHECK(trimmed.at("z").tensor().ToFloatVector() == full.at("z").tensor().ToFloatVector());
      CHECK(trimmed.at("tr").tensor().shape() == Shape{b, 2, s});
      CHECK(trimmed.at("tr").tensor().ToFloatVector() == full.at("tr").tensor().ToFloatVector());
      CHECK(trimmed.at("nz").tensor().shape() == Shape{b, s, 2});
    }
  }
}
