// Plan-time fusions (executor/fusion.h): an exported RMS norm, rotary embedding, SiLU and GELU
// become one fused node each with the same results; a subgraph whose inner value is read
// elsewhere (here: a graph output) is left as it is.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/text_parser.h"
#include "executor/graph_plan.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"
#include "ops/math/constant_weight.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

// RMS norm with a scale, a rotary embedding of its result, then SiLU. `extra` adds outputs.
std::shared_ptr<ModelProto> Model(const std::string& extra_outputs) {
  return std::make_shared<ModelProto>(core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "g (float[1, 2, 4] x, float[1, 2, 4] cos, float[1, 2, 4] sin) => (float[1, 2, 4] y" +
      extra_outputs +
      ")\n"
      "<float two = {2.0}, float eps = {1e-5}, int64[1] last = {-1}, float[4] w = {1, 2, 3, 4},\n"
      " int64[1] zero = {0}, int64[1] half = {2}, int64[1] big = {1000}, int64[1] one = {1}>\n"
      "{\n"
      "  sq = Pow(x, two)\n"
      "  mean = ReduceMean <keepdims = 1> (sq, last)\n"
      "  var = Add(mean, eps)\n"
      "  root = Sqrt(var)\n"
      "  inv = Reciprocal(root)\n"
      "  normed = Mul(x, inv)\n"
      "  scaled = Mul(w, normed)\n"
      "  a = Slice(scaled, zero, half, last, one)\n"
      "  b = Slice(scaled, half, big, last, one)\n"
      "  nb = Neg(b)\n"
      "  rot = Concat <axis = -1> (nb, a)\n"
      "  xc = Mul(scaled, cos)\n"
      "  rs = Mul(rot, sin)\n"
      "  r = Add(xc, rs)\n"
      "  s = Sigmoid(r)\n"
      "  y = Mul(r, s)\n"
      "}\n"));
}

std::vector<float> Run(const std::shared_ptr<ModelProto>& model, bool fuse, size_t* nodes,
                       size_t* fused) {
  RuntimeContext context;
  RuntimeSessionOptions options;
  options.fuse_subgraphs = fuse;
  RuntimeSession session(model, context, options);
  *nodes = session.plan(context).nodes().size();
  *fused = session.plan(context).fused_node_count();
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {1, 2, 4}, {0.5f, -1, 2, 3, -2, 0.25f, 1, 4}));
  feeds["cos"] =
      RuntimeValue(Tensor::FromFloat("cos", {1, 2, 4}, {1, 0.5f, 0.2f, 0.9f, 0.3f, 0.7f, 0.1f, 1}));
  feeds["sin"] =
      RuntimeValue(Tensor::FromFloat("sin", {1, 2, 4}, {0, 0.8f, 0.9f, 0.4f, 0.95f, 0.7f, 1, 0}));
  return session.Run(context, std::move(feeds)).at("y").tensor().ToFloatVector();
}

}  // namespace

TEST_CASE("an exported RMS norm, rotary embedding and SiLU run as three fused nodes") {
  size_t nodes = 0, fused = 0, plain_nodes = 0, plain_fused = 0;
  const auto model = Model("");
  const std::vector<float> y = Run(model, true, &nodes, &fused);
  const std::vector<float> ref = Run(model, false, &plain_nodes, &plain_fused);
  CHECK(fused == 3);
  CHECK(nodes == 3);
  CHECK(plain_fused == 0);
  CHECK(plain_nodes == 16);
  REQUIRE(y.size() == ref.size());
  for (size_t i = 0; i < y.size(); ++i)
    CHECK(std::abs(y[i] - ref[i]) <= 1e-6f * (1 + std::abs(ref[i])));
}

TEST_CASE("a subgraph whose inner value is also a graph output is not fused") {
  // `sq` (inside the RMS norm) and `s` (inside the SiLU) are outputs: those two patterns
  // stay as nodes; the rotary embedding in between is still fused.
  size_t nodes = 0, fused = 0, plain_nodes = 0, plain_fused = 0;
  const auto model = Model(", float[1, 2, 4] sq, float[1, 2, 4] s");
  const std::vector<float> y = Run(model, true, &nodes, &fused);
  const std::vector<float> ref = Run(model, false, &plain_nodes, &plain_fused);
  CHECK(fused == 1);
  CHECK(nodes == 16 - 7 + 1);
  for (size_t i = 0; i < y.size(); ++i)
    CHECK(std::abs(y[i] - ref[i]) <= 1e-6f * (1 + std::abs(ref[i])));
}

namespace {

// RMS norm written with the square as Mul(x, `other`) and the division as Div (the tiny
// decoder's form), scaled by a constant gain.
std::shared_ptr<ModelProto> DivRmsModel(const std::string& other) {
  return std::make_shared<ModelProto>(
      core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>\n"
                       "g (float[1, 2, 4] x, float[1, 2, 4] z) => (float[1, 2, 4] y)\n"
                       "<float eps = {1e-5}, int64[1] last = {-1}, float[4] w = {1, 2, 3, 4}>\n"
                       "{\n"
                       "  sq = Mul(x, " +
                       other +
                       ")\n"
                       "  mean = ReduceMean <keepdims = 1> (sq, last)\n"
                       "  var = Add(mean, eps)\n"
                       "  root = Sqrt(var)\n"
                       "  normed = Div(x, root)\n"
                       "  y = Mul(normed, w)\n"
                       "}\n"));
}

}  // namespace

TEST_CASE(
    "an RMS norm squared by Mul(x, x) and divided by Div is fused, but not one by Mul(x, z)") {
  for (const char* other : {"x", "z"}) {
    CAPTURE(other);
    const auto model = DivRmsModel(other);
    std::vector<float> out[2];
    for (bool fuse : {false, true}) {
      RuntimeContext context;
      RuntimeSessionOptions options;
      options.fuse_subgraphs = fuse;
      RuntimeSession session(model, context, options);
      const bool square = std::string(other) == "x";
      CHECK(session.plan(context).fused_node_count() == (fuse && square ? 1u : 0u));
      CHECK(session.plan(context).nodes().size() == (fuse && square ? 1u : 6u));
      RuntimeValueMap feeds;
      feeds["x"] =
          RuntimeValue(Tensor::FromFloat("x", {1, 2, 4}, {0.5f, -1, 2, 3, -2, 0.25f, 1, 4}));
      feeds["z"] = RuntimeValue(Tensor::FromFloat("z", {1, 2, 4}, {1, 2, 1, 2, 1, 2, 1, 2}));
      out[fuse] = session.Run(context, std::move(feeds)).at("y").tensor().ToFloatVector();
    }
    REQUIRE(out[0].size() == out[1].size());
    for (size_t i = 0; i < out[0].size(); ++i)
      CHECK(std::abs(out[1][i] - out[0][i]) <= 1e-6f * (1 + std::abs(out[0][i])));
  }
}

namespace {

// A [m, 20] times three FLOAT constants with K = 20 (one narrower than a panel, one not a
// multiple of 16) and once by a graph input (not a constant: stays a MatMul).
std::shared_ptr<ModelProto> GroupModel() {
  auto values = [](int count, int seed) {
    std::string s = "{";
    for (int i = 0; i < count; ++i)
      s += (i ? ", " : "") + std::to_string(((i * 37 + seed * 11) % 23 - 11) / 8.0);
    return s + "}";
  };
  return std::make_shared<ModelProto>(core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "g (float[1, M, 20] x, float[20, 3] w) => (float[1, M, 40] q, float[1, M, 16] k,\n"
      "  float[1, M, 200] v, float[1, M, 3] z)\n"
      "<float[20, 40] wq = " +
      values(800, 1) + ", float[20, 16] wk = " + values(320, 2) +
      ", float[20, 200] wv = " + values(4000, 3) +
      ">\n"
      "{\n"
      "  q = MatMul(x, wq)\n"
      "  k = MatMul(x, wk)\n"
      "  z = MatMul(x, w)\n"
      "  v = MatMul(x, wv)\n"
      "}\n"));
}

}  // namespace

TEST_CASE("MatMuls of one input by constant weights run as one MatMulGroup, packed or not") {
  const auto model = GroupModel();
  for (int64_t m : {1, 7}) {
    std::vector<float> x(static_cast<size_t>(m * 20)), w(60);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 13) % 17) / 9.0f - 0.8f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) - 2.0f;
    std::map<std::string, std::vector<float>> outputs[2];
    for (bool fuse : {false, true}) {
      RuntimeContext context;
      RuntimeSessionOptions options;
      options.fuse_subgraphs = fuse;
      const size_t packed_before = ops::math::PackedWeightBytes();
      RuntimeSession session(model, context, options);
      CHECK(session.plan(context).fused_node_count() == (fuse ? 1u : 0u));
      CHECK(session.plan(context).nodes().size() == (fuse ? 2u : 4u));
      CAPTURE(m);
      CAPTURE(fuse);
      // Three runs: the first unpacked, the second packs, the third uses the pack.
      for (int run = 0; run < 3; ++run) {
        RuntimeValueMap feeds;
        feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {1, m, 20}, x));
        feeds["w"] = RuntimeValue(Tensor::FromFloat("w", {20, 3}, w));
        RuntimeValueMap out = session.Run(context, std::move(feeds));
        for (const char* name : {"q", "k", "v", "z"}) {
          const Tensor& t = out.at(name).tensor();
          CHECK(t.dim(0) == 1);
          CHECK(t.dim(1) == m);
          std::vector<float> got = t.ToFloatVector();
          auto& ref = outputs[fuse][name];
          if (run == 0) ref = got;
          REQUIRE(got.size() == ref.size());
          // Packed and unpacked products differ only in the order of their sums.
          for (size_t i = 0; i < got.size(); ++i)
            CHECK(std::abs(got[i] - ref[i]) <= 1e-5f * (1 + std::abs(ref[i])));
        }
      }
      // Fused: one pack of [20, 48 + 16 + 208] floats (the weights side by side, each padded
      // to whole panels); unfused, three packs of the same sizes.
      CHECK(ops::math::PackedWeightBytes() - packed_before == 20u * (48 + 16 + 208) * 4);
    }
    for (const char* name : {"q", "k", "v", "z"}) {
      const auto& a = outputs[0][name];
      const auto& b = outputs[1][name];
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i)
        CHECK(std::abs(a[i] - b[i]) <= 1e-5f * (1 + std::abs(a[i])));
    }
  }
}

TEST_CASE("FLOAT16 MatMuls of one input run as one MatMulGroup over 16-bit panels") {
  // The same model in FLOAT16: the group reads its weights as 16 bits, side by side once
  // packed (2 bytes an element kept), and gives the separate products' bits.
  auto model = GroupModel();  // retyped: FLOAT16 inputs, outputs and initializers
  for (auto* values :
       {model->mutable_graph()->mutable_input(), model->mutable_graph()->mutable_output()})
    for (auto& v : *values)
      v.mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT16);
  for (auto& t : *model->mutable_graph()->mutable_initializer()) {
    std::vector<float> f(t.float_data().begin(), t.float_data().end());
    t.clear_float_data();
    for (float v : f) t.add_int32_data(core::FloatToHalf(v));
    t.set_data_type(TensorProto::FLOAT16);
  }
  auto halves = [](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = core::FloatToHalf(v[i]);
    return h;
  };
  for (int64_t m : {1, 3, 7}) {
    std::vector<float> x(static_cast<size_t>(m * 20)), w(60);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 13) % 17) / 9.0f - 0.8f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) - 2.0f;
    std::map<std::string, std::vector<float>> outputs[2];
    for (bool fuse : {false, true}) {
      CAPTURE(m);
      CAPTURE(fuse);
      RuntimeContext context;
      RuntimeSessionOptions options;
      options.fuse_subgraphs = fuse;
      const size_t packed_before = ops::math::PackedWeightBytes();
      RuntimeSession session(model, context, options);
      CHECK(session.plan(context).fused_node_count() == (fuse ? 1u : 0u));
      for (int run = 0; run < 3; ++run) {
        RuntimeValueMap feeds;
        feeds["x"] =
            RuntimeValue(Tensor::FromVector("x", DataType::kFloat16, {1, m, 20}, halves(x)));
        feeds["w"] = RuntimeValue(Tensor::FromVector("w", DataType::kFloat16, {20, 3}, halves(w)));
        RuntimeValueMap out = session.Run(context, std::move(feeds));
        for (const char* name : {"q", "k", "v", "z"}) {
          const Tensor& t = out.at(name).tensor();
          CHECK(t.dtype() == DataType::kFloat16);
          std::vector<float> got = t.ToFloatVector();
          auto& ref = outputs[fuse][name];
          if (run == 0) ref = got;
          CHECK(got == ref);  // row-major, then panels: the same sums in the same order
        }
      }
      CHECK(ops::math::PackedWeightBytes() - packed_before == 20u * (48 + 16 + 208) * 2);
    }
    for (const char* name : {"q", "k", "v", "z"}) CHECK(outputs[0][name] == outputs[1][name]);
  }
}

namespace {

// A Llama MLP's gating: Mul(SiLU(MatMul(x, wg)), U). With `u_product`, U = MatMul(x, wu)
// (one shape with the gate: SiluMul takes the Mul); else U is a graph input, which Mul may
// broadcast in ways SiluMul does not (the gate Mul stays).
std::shared_ptr<ModelProto> GatedModel(bool u_product) {
  return std::make_shared<ModelProto>(core::ParseModel(
      std::string("<ir_version: 10, opset_import: [\"\" : 18]>\n"
                  "g (float[M, 3] x, float[M, 4] ux) => (float[M, 4] y)\n"
                  "<float[3, 4] wg = {0.5, -1, 2, 0.25, 1, 0.75, -0.5, 1.5, -2, 0.1, 0.3, 1},\n"
                  " float[3, 4] wu = {1, 2, -1, 0.5, -0.25, 1, 1, -2, 0.5, 0.5, 3, -1}>\n"
                  "{\n"
                  "  gate = MatMul(x, wg)\n"
                  "  up = MatMul(x, wu)\n"
                  "  s = Sigmoid(gate)\n"
                  "  silu = Mul(gate, s)\n") +
      (u_product ? "  y = Mul(up, silu)\n" : "  y = Mul(silu, ux)\n") + "}\n"));
}

}  // namespace

TEST_CASE("the SiLU gate of two products of one input runs as one SiluMul") {
  for (bool u_product : {true, false}) {
    CAPTURE(u_product);
    const auto model = GatedModel(u_product);
    std::vector<float> y[2];
    for (bool fuse : {false, true}) {
      RuntimeContext context;
      RuntimeSessionOptions options;
      options.fuse_subgraphs = fuse;
      RuntimeSession session(model, context, options);
      std::map<std::string, int> ops;
      for (const auto& node : session.plan(context).nodes()) ++ops[node.proto->op_type()];
      if (fuse && u_product) {  // MatMulGroup(gate, up) and SiluMul(gate, up)
        CHECK(ops == std::map<std::string, int>{{"MatMulGroup", 1}, {"SiluMul", 1}});
      } else if (fuse) {  // the products (up is unread), SiluMul(gate), the gate Mul
        CHECK(ops == std::map<std::string, int>{{"MatMulGroup", 1}, {"Mul", 1}, {"SiluMul", 1}});
      }
      RuntimeValueMap feeds;
      feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {2, 3}, {0.5f, -1, 2, 3, -2, 0.25f}));
      feeds["ux"] = RuntimeValue(Tensor::FromFloat("ux", {2, 4}, {1, -1, 0.5f, 2, 0, 3, -2, 1}));
      y[fuse] = session.Run(context, std::move(feeds)).at("y").tensor().ToFloatVector();
    }
    REQUIRE(y[0].size() == 8);
    for (size_t i = 0; i < y[0].size(); ++i)
      CHECK(std::abs(y[1][i] - y[0][i]) <= 1e-6f * (1 + std::abs(y[0][i])));
  }
}

// `x -> Sigmoid -> Mul` (SiLU), `Mul(x, x)` (an RMS norm's last Mul) and `MatMul(x, w)` (a
// MatMulGroup candidate), each with a reader that has no outputs: the matchers read the
// readers' first output, which such a node lacks (libFuzzer finding, read past a protobuf
// repeated field; inputs in tests/fuzz/regressions/model/fusion-*-reader-without-outputs).
// The plan now passes over it and the session computes the declared output. A standard
// operator without its outputs is refused when the session is built (its schema's minimum),
// so the reader here is of another domain, which the matchers meet as it is.
TEST_CASE("a reader with no outputs does not make the fusion matchers read past its outputs") {
  const std::vector<std::string> bodies = {
      "s = Sigmoid(x)\n y = Mul(x, s)\n",
      "y = Mul(x, x)\n",
      "y = MatMul(x, w)\n",
  };
  for (const auto& body : bodies) {
    CAPTURE(body);
    auto model = std::make_shared<ModelProto>(
        core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>\n"
                         "g (float[2, 2] x) => (float[2, 2] y) <float[2, 2] w = {1, 0, 0, 1}> {\n" +
                         body + "}\n"));
    NodeProto* sink = model->mutable_graph()->add_node();  // reads y (or x), has no output
    sink->set_op_type("Identity");
    sink->set_domain("test.sink");
    sink->set_name("sink");
    sink->add_input(body.find("MatMul") != std::string::npos ? "x" : "y");
    RuntimeContext context;
    struct Sink final : KernelBase {
      void Compute(KernelCall&) const override {}
    };
    context.RegisterKernelFn("test.sink", "Identity", core::symbolic::Device::kCPU,
                             [](const NodeProto&, RuntimeContext&, const KernelInfo&) {
                               return std::unique_ptr<KernelBase>(new Sink);
                             });
    RuntimeSession session(model, context, RuntimeSessionOptions());
    RuntimeValueMap feeds;
    feeds.emplace("x", RuntimeValue(Tensor::FromFloat("x", {2, 2}, {1, 2, 3, 4})));
    const auto out = session.Run(context, std::move(feeds));
    CHECK(out.at("y").tensor().numel() == 4);
  }
}

namespace {

// torch's decomposed GELUs of x: `tanh_a` x * (0.5 * (1 + tanh(...))) (Gemma, StarCoder2),
// `tanh_b` (x * 0.5) * (1 + tanh(...)) (Phi), `erf` x * (0.5 * (1 + erf(x / sqrt 2)))
// (Falcon); `cubic` is the tanh form's 0.044715.
std::shared_ptr<ModelProto> GeluModel(const std::string& form, const std::string& cubic) {
  const std::string head =
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "g (float[2, 5] x) => (float[2, 5] y)\n"
      "<float three = {3.0}, float c = {" +
      cubic +
      "}, float k = {0.7978845834732056}, float one = {1.0}, float half = {0.5},\n"
      " float root2 = {1.4142135381698608}>\n{\n";
  std::string body;
  if (form == "erf") {
    body = "  d = Div(x, root2)\n  t = Erf(d)\n";
  } else {
    body =
        "  p = Pow(x, three)\n  m = Mul(c, p)\n  s = Add(x, m)\n  u = Mul(k, s)\n"
        "  t = Tanh(u)\n";
  }
  body += "  a = Add(t, one)\n";
  body += form == "tanh_b" ? "  xh = Mul(x, half)\n  y = Mul(xh, a)\n"
                           : "  h = Mul(half, a)\n  y = Mul(x, h)\n";
  return std::make_shared<ModelProto>(core::ParseModel(head + body + "}\n"));
}

}  // namespace

TEST_CASE("torch's decomposed GELUs (tanh and erf forms) run as one Gelu") {
  const std::vector<float> x = {-4, -2.5f, -1, -0.3f, 0, 0.2f, 0.9f, 1.7f, 3, 6};
  for (const char* form : {"tanh_a", "tanh_b", "erf"})
    for (const char* cubic : {"0.044714998453855515", "0.05"}) {
      CAPTURE(form);
      CAPTURE(cubic);
      const bool fusable = std::string(form) == "erf" || std::string(cubic) != "0.05";
      std::vector<float> out[2];
      for (bool fuse : {false, true}) {
        RuntimeContext context;
        RuntimeSessionOptions options;
        options.fuse_subgraphs = fuse;
        RuntimeSession session(GeluModel(form, cubic), context, options);
        const auto& nodes = session.plan(context).nodes();
        CHECK((nodes.size() == 1 && nodes[0].proto->op_type() == "Gelu") == (fuse && fusable));
        RuntimeValueMap feeds;
        feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {2, 5}, x));
        out[fuse] = session.Run(context, std::move(feeds)).at("y").tensor().ToFloatVector();
      }
      for (size_t i = 0; i < x.size(); ++i)
        CHECK(std::abs(out[1][i] - out[0][i]) <= 2e-6f * (1 + std::abs(out[0][i])));
    }
}

namespace {

// Grouped-query attention as the TorchScript exporter writes transformers' attention: the KV
// heads repeated by Unsqueeze/Expand/Reshape, softmax(dtype=float32) kept as a Cast to FLOAT
// before the value product, and the output reshaped with the repeated V's dimension 3 read by
// Shape/Gather (`gather` picks it; 1, the head count, changes with the repeat). 4 query heads
// over 2 KV heads of 4, 3 queries over 5 keys.
std::shared_ptr<ModelProto> TorchScriptAttentionModel(int gather) {
  return std::make_shared<ModelProto>(core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "g (float[1, 4, 3, 4] q, float[1, 2, 5, 4] k, float[1, 2, 5, 4] v) =>\n"
      "  (float[1, 3, 16] y)\n"
      "<int64[1] two = {2}, int64[5] rep = {1, 2, 2, 5, 4}, int64[4] heads = {1, 4, 5, 4},\n"
      " float scale = {0.5}, int64 dim = {" +
      std::to_string(gather) +
      "}, int64[1] zero = {0}, int64[1] a = {1}, int64[1] b = {3}, int64[1] m = {-1}>\n"
      "{\n"
      "  ku = Unsqueeze(k, two)\n"
      "  ke = Expand(ku, rep)\n"
      "  kr = Reshape(ke, heads)\n"
      "  vu = Unsqueeze(v, two)\n"
      "  ve = Expand(vu, rep)\n"
      "  vr = Reshape(ve, heads)\n"
      "  kt = Transpose <perm = [0, 1, 3, 2]> (kr)\n"
      "  s = MatMul(q, kt)\n"
      "  ss = Mul(s, scale)\n"
      "  p = Softmax <axis = -1> (ss)\n"
      "  pc = Cast <to = 1> (p)\n"
      "  o = MatMul(pc, vr)\n"
      "  ot = Transpose <perm = [0, 2, 1, 3]> (o)\n"
      "  vs = Shape(vr)\n"
      "  d = Gather <axis = 0> (vs, dim)\n"
      "  du = Unsqueeze(d, zero)\n"
      "  ds = Mul(du, du)\n"
      "  shape = Concat <axis = 0> (a, b, ds)\n"
      "  y = Reshape(ot, shape)\n"
      "}\n"));
}

}  // namespace

TEST_CASE(
    "TorchScript's attention (a Cast to FLOAT, the repeated V's shape read) runs fused, "
    "its Shape reading the un-repeated V") {
  // Gather 3 (the head size, 4: the output is [1, 3, 16]) is the same on the un-repeated V;
  // Gather 1 (the 4 repeated heads) is not, so that model stays unfused ([1, 3, 16] too).
  for (int gather : {3, 1}) {
    CAPTURE(gather);
    const auto model = TorchScriptAttentionModel(gather);
    std::vector<float> out[2];
    for (bool fuse : {false, true}) {
      RuntimeContext context;
      RuntimeSessionOptions options;
      options.fuse_subgraphs = fuse;
      RuntimeSession session(model, context, options);
      size_t fused_attention = 0;
      for (const auto& node : session.plan(context).nodes())
        fused_attention += node.proto->op_type() == "ScaledDotProductAttention";
      CHECK(fused_attention == (fuse && gather == 3 ? 1u : 0u));
      RuntimeValueMap feeds;
      auto values = [](int n, int seed) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = ((i * 7 + seed) % 11 - 5) / 4.0f;
        return v;
      };
      feeds["q"] = RuntimeValue(Tensor::FromFloat("q", {1, 4, 3, 4}, values(48, 1)));
      feeds["k"] = RuntimeValue(Tensor::FromFloat("k", {1, 2, 5, 4}, values(40, 2)));
      feeds["v"] = RuntimeValue(Tensor::FromFloat("v", {1, 2, 5, 4}, values(40, 3)));
      out[fuse] = session.Run(context, std::move(feeds)).at("y").tensor().ToFloatVector();
    }
    REQUIRE(out[0].size() == 48);
    REQUIRE(out[1].size() == 48);
    for (size_t i = 0; i < out[0].size(); ++i) CHECK(std::abs(out[1][i] - out[0][i]) <= 1e-5f);
  }
}
