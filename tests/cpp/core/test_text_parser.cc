#include <doctest/doctest.h>
#include <google/protobuf/util/message_differencer.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/text_parser.h"

using namespace onnx_light;
using namespace onnx_light::core;

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string DataPath(const std::string& name) {
  return std::string(ONNX_LIGHT_SOURCE_DIR) + "/tests/data/text_parser/" + name;
}

void CheckTensorType(const TypeProto& type, int elem_type, const std::vector<int64_t>& dims) {
  REQUIRE(type.has_tensor_type());
  CHECK(type.tensor_type().elem_type() == elem_type);
  REQUIRE(type.tensor_type().has_shape());
  REQUIRE(type.tensor_type().shape().dim_size() == static_cast<int>(dims.size()));
  for (size_t i = 0; i < dims.size(); ++i) {
    CHECK(type.tensor_type().shape().dim(static_cast<int>(i)).dim_value() == dims[i]);
  }
}

const AttributeProto& Attr(const NodeProto& node, const std::string& name) {
  for (const AttributeProto& attr : node.attribute()) {
    if (attr.name() == name) return attr;
  }
  FAIL("node has no attribute " << name);
  return node.attribute(0);
}

}  // namespace

TEST_CASE("The spec example parses into a model whose every field is as written") {
  const ModelProto model = ParseModel(
      R"(<ir_version: 10, opset_import: ["" : 18]> accumulate (float[2] delta, float[2] past))"
      R"( => (float[2] present) { present = Add(delta, past) })");
  CHECK(model.ir_version() == 10);
  REQUIRE(model.opset_import_size() == 1);
  CHECK(model.opset_import(0).has_domain());
  CHECK(model.opset_import(0).domain() == "");
  CHECK(model.opset_import(0).version() == 18);
  CHECK_FALSE(model.has_producer_name());
  CHECK_FALSE(model.has_producer_version());
  CHECK_FALSE(model.has_domain());
  CHECK_FALSE(model.has_model_version());
  CHECK_FALSE(model.has_doc_string());
  CHECK(model.metadata_props_size() == 0);
  CHECK(model.functions_size() == 0);

  const GraphProto& graph = model.graph();
  CHECK(graph.name() == "accumulate");
  REQUIRE(graph.input_size() == 2);
  CHECK(graph.input(0).name() == "delta");
  CheckTensorType(graph.input(0).type(), TensorProto::FLOAT, {2});
  CHECK(graph.input(1).name() == "past");
  CheckTensorType(graph.input(1).type(), TensorProto::FLOAT, {2});
  REQUIRE(graph.output_size() == 1);
  CHECK(graph.output(0).name() == "present");
  CheckTensorType(graph.output(0).type(), TensorProto::FLOAT, {2});
  CHECK(graph.initializer_size() == 0);
  CHECK(graph.value_info_size() == 0);

  REQUIRE(graph.node_size() == 1);
  const NodeProto& node = graph.node(0);
  CHECK(node.op_type() == "Add");
  CHECK(node.has_domain());  // upstream always writes the (empty) domain
  CHECK(node.domain() == "");
  CHECK_FALSE(node.has_name());
  CHECK(node.attribute_size() == 0);
  REQUIRE(node.input_size() == 2);
  CHECK(node.input(0) == "delta");
  CHECK(node.input(1) == "past");
  REQUIRE(node.output_size() == 1);
  CHECK(node.output(0) == "present");
}

TEST_CASE("A model-local function is parsed with its header, attributes and references") {
  const ModelProto model = ParseModel(ReadFile(DataPath("local_function.txt")));
  REQUIRE(model.opset_import_size() == 2);
  CHECK(model.opset_import(1).domain() == "local");
  CHECK(model.opset_import(1).version() == 1);

  const NodeProto& call = model.graph().node(0);
  CHECK(call.domain() == "local");
  CHECK(call.op_type() == "Scale");
  CHECK(Attr(call, "alpha").type() == AttributeProto::FLOAT);
  CHECK(Attr(call, "alpha").f() == 2.0f);

  REQUIRE(model.functions_size() == 1);
  const FunctionProto& fn = model.functions(0);
  CHECK(fn.name() == "Scale");
  CHECK(fn.domain() == "local");
  REQUIRE(fn.opset_import_size() == 1);
  CHECK(fn.opset_import(0).domain() == "");
  CHECK(fn.opset_import(0).version() == 18);
  REQUIRE(fn.attribute_size() == 1);
  CHECK(fn.attribute(0) == "beta");
  REQUIRE(fn.attribute_proto_size() == 1);
  CHECK(fn.attribute_proto(0).name() == "alpha");
  CHECK(fn.attribute_proto(0).type() == AttributeProto::FLOAT);
  CHECK(fn.attribute_proto(0).f() == 1.0f);
  CHECK(std::vector<std::string>(fn.input().begin(), fn.input().end()) ==
        std::vector<std::string>{"X"});
  CHECK(std::vector<std::string>(fn.output().begin(), fn.output().end()) ==
        std::vector<std::string>{"Y"});
  REQUIRE(fn.node_size() == 2);
  const AttributeProto& ref = fn.node(0).attribute(0);
  CHECK(ref.name() == "value_float");
  CHECK(ref.ref_attr_name() == "alpha");
  CHECK(ref.type() == AttributeProto::FLOAT);
  CHECK_FALSE(ref.has_f());
  CHECK(fn.node(1).op_type() == "Mul");
}

TEST_CASE("If branches are graph attributes whose nodes capture values of the outer graph") {
  const ModelProto model = ParseModel(ReadFile(DataPath("if_branches.txt")));
  REQUIRE(model.graph().node_size() == 2);
  const NodeProto& node = model.graph().node(1);
  CHECK(node.op_type() == "If");
  CHECK(node.input(0) == "c");
  REQUIRE(node.attribute_size() == 2);

  const AttributeProto& then_attr = Attr(node, "then_branch");
  CHECK(then_attr.type() == AttributeProto::GRAPH);
  const GraphProto& then_g = then_attr.g();
  CHECK(then_g.name() == "then_g");
  CHECK(then_g.input_size() == 0);
  REQUIRE(then_g.output_size() == 1);
  CHECK(then_g.output(0).name() == "z");
  CheckTensorType(then_g.output(0).type(), TensorProto::FLOAT, {2});
  REQUIRE(then_g.node_size() == 1);
  CHECK(then_g.node(0).op_type() == "Identity");
  CHECK(then_g.node(0).input(0) == "t");  // produced by the outer graph

  const GraphProto& else_g = Attr(node, "else_branch").g();
  CHECK(else_g.name() == "else_g");
  REQUIRE(else_g.node_size() == 1);
  CHECK(else_g.node(0).op_type() == "Add");
  CHECK(else_g.node(0).input(0) == "t");
  CHECK(else_g.node(0).input(1) == "x");  // an outer graph input
}

TEST_CASE("A Loop body is a graph attribute with its own inputs, outputs and nodes") {
  const ModelProto model = ParseModel(ReadFile(DataPath("loop_body.txt")));
  const GraphProto& graph = model.graph();
  REQUIRE(graph.output_size() == 2);
  const auto& steps_shape = graph.output(1).type().tensor_type().shape();
  REQUIRE(steps_shape.dim_size() == 2);
  CHECK_FALSE(steps_shape.dim(0).has_dim_value());
  CHECK_FALSE(steps_shape.dim(0).has_dim_param());
  CHECK(steps_shape.dim(1).dim_value() == 2);

  const AttributeProto& value = Attr(graph.node(0), "value");
  CHECK(value.type() == AttributeProto::TENSOR);
  CHECK(value.t().data_type() == TensorProto::BOOL);
  CHECK(value.t().dims_size() == 0);
  REQUIRE(value.t().int32_data_size() == 1);
  CHECK(value.t().int32_data(0) == 1);

  const NodeProto& loop = graph.node(1);
  CHECK(loop.op_type() == "Loop");
  CHECK(std::vector<std::string>(loop.input().begin(), loop.input().end()) ==
        std::vector<std::string>{"n", "cond", "init"});
  CHECK(std::vector<std::string>(loop.output().begin(), loop.output().end()) ==
        std::vector<std::string>{"final", "steps"});
  const GraphProto& body = Attr(loop, "body").g();
  CHECK(body.name() == "body");
  REQUIRE(body.input_size() == 3);
  CheckTensorType(body.input(0).type(), TensorProto::INT64, {});
  CheckTensorType(body.input(1).type(), TensorProto::BOOL, {});
  CheckTensorType(body.input(2).type(), TensorProto::FLOAT, {2});
  REQUIRE(body.output_size() == 3);
  CHECK(body.output(2).name() == "step");
  REQUIRE(body.node_size() == 3);
  CHECK(body.node(1).op_type() == "Add");
  CHECK(body.node(2).input(0) == "acc_out");
}

TEST_CASE("Initializers, value infos, every kind of type and attribute are parsed with values") {
  const ModelProto model = ParseModel(ReadFile(DataPath("kitchen_sink.txt")));
  CHECK(model.producer_name() == "onnx-light");
  CHECK(model.producer_version() == "0.1");
  CHECK(model.domain() == "ai.test");
  CHECK(model.model_version() == 3);
  CHECK(model.doc_string() == "a \"doc\"");
  REQUIRE(model.metadata_props_size() == 2);
  CHECK(model.metadata_props(1).key() == "k2");
  CHECK(model.metadata_props(1).value() == "v2");

  const GraphProto& g = model.graph();
  REQUIRE(g.input_size() == 8);
  const auto& a_shape = g.input(0).type().tensor_type().shape();
  CHECK(a_shape.dim(0).dim_param() == "N");
  CHECK(a_shape.dim(1).dim_value() == 3);
  const TypeProto& q = g.input(2).type();  // seq(float[?])
  REQUIRE(q.has_sequence_type());
  const auto& q_dim = q.sequence_type().elem_type().tensor_type().shape().dim(0);
  CHECK_FALSE(q_dim.has_dim_value());
  CHECK_FALSE(q_dim.has_dim_param());
  const TypeProto& m = g.input(3).type();  // map(string, int64)
  REQUIRE(m.has_map_type());
  CHECK(m.map_type().key_type() == TensorProto::STRING);
  CheckTensorType(m.map_type().value_type(), TensorProto::INT64, {});
  CheckTensorType(g.input(4).type().optional_type().elem_type(), TensorProto::FLOAT, {2});
  const auto& sparse = g.input(5).type().sparse_tensor_type();
  CHECK(sparse.elem_type() == TensorProto::FLOAT);
  CHECK(sparse.shape().dim_size() == 2);
  CheckTensorType(g.input(6).type(), TensorProto::FLOAT, {});  // `float`: a scalar
  CHECK(g.input(7).type().tensor_type().elem_type() == TensorProto::FLOAT);
  CHECK_FALSE(g.input(7).type().tensor_type().has_shape());  // `float[]`: unknown rank
  REQUIRE(g.output_size() == 2);
  CHECK(g.output(1).name() == "c");
  CHECK_FALSE(g.output(1).has_type());

  REQUIRE(g.value_info_size() == 1);
  CHECK(g.value_info(0).name() == "tmp");
  REQUIRE(g.initializer_size() == 7);
  const TensorProto& s = g.initializer(0);  // the default of input `s`
  CHECK(s.name() == "s");
  CHECK(s.data_type() == TensorProto::INT64);
  CHECK(s.int64_data(0) == 3);
  const TensorProto& w = g.initializer(1);
  CHECK(w.name() == "w");
  CHECK(w.dims(0) == 2);
  CHECK(std::vector<float>(w.float_data().begin(), w.float_data().end()) ==
        std::vector<float>{1.0f, 2.0f});
  CHECK(g.initializer(2).double_data(1) == -2.5e-3);
  CHECK(g.initializer(3).string_data(1) == "b\\c");
  CHECK(g.initializer(4).uint64_data(0) == std::numeric_limits<uint64_t>::max());
  CHECK(g.initializer(5).int32_data(1) == 0);
  CHECK(g.initializer(6).data_type() == TensorProto::FLOAT16);
  CHECK(g.initializer(6).int32_data(0) == 15360);

  REQUIRE(g.node_size() == 2);
  const NodeProto& foo = g.node(0);
  CHECK(foo.domain() == "com.microsoft");
  CHECK(foo.op_type() == "Foo");
  CHECK(std::vector<std::string>(foo.input().begin(), foo.input().end()) ==
        std::vector<std::string>{"a", "", "w"});
  CHECK(Attr(foo, "i").i() == -3);
  CHECK(Attr(foo, "f").f() == -std::numeric_limits<float>::infinity());
  CHECK(Attr(foo, "f3").f() == 1.5e-3f);
  CHECK(Attr(foo, "s").s() == "q\"x");
  CHECK(std::vector<int64_t>(Attr(foo, "is").ints().begin(), Attr(foo, "is").ints().end()) ==
        std::vector<int64_t>{1, -2});
  CHECK(Attr(foo, "fs").type() == AttributeProto::FLOATS);
  CHECK(Attr(foo, "fs").floats(1) == 2.0f);  // an int after a float joins as a float
  CHECK(Attr(foo, "ss").strings(0) == "x");
  CHECK(Attr(foo, "t").t().float_data(1) == 2.0f);
  CHECK(Attr(foo, "tp").tp().has_sequence_type());
  CHECK(Attr(foo, "e").type() == AttributeProto::FLOATS);
  CHECK(Attr(foo, "e").floats_size() == 0);

  const NodeProto& attn = g.node(1);
  CHECK(attn.name() == "attn");
  CHECK(attn.domain() == "ai.rt");
  CHECK(attn.op_type() == "PagedAttention");
  CHECK(std::vector<std::string>(attn.output().begin(), attn.output().end()) ==
        std::vector<std::string>{"b", "", "c"});
  CHECK(std::vector<std::string>(attn.input().begin(), attn.input().end()) ==
        std::vector<std::string>{"tmp", "", "s"});
}

TEST_CASE("Numbers take exponents, signs, inf and nan, and an int becomes a declared float") {
  const NodeProto node = ParseNode(
      "y = Foo <a = 1.5e3, b = -2E-2, c = inf, d = -Infinity, e = nan, f = -7, g: float = 3,"
      " h: floats = [1, 2.5], k = 1.>(x)");
  CHECK(Attr(node, "a").f() == 1500.0f);
  CHECK(Attr(node, "b").f() == -0.02f);
  CHECK(Attr(node, "c").f() == std::numeric_limits<float>::infinity());
  CHECK(Attr(node, "d").f() == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(Attr(node, "e").f()));
  CHECK(Attr(node, "f").type() == AttributeProto::INT);
  CHECK(Attr(node, "f").i() == -7);
  CHECK(Attr(node, "g").type() == AttributeProto::FLOAT);
  CHECK(Attr(node, "g").f() == 3.0f);
  CHECK(Attr(node, "h").floats(0) == 1.0f);
  CHECK(Attr(node, "k").type() == AttributeProto::FLOAT);
}

TEST_CASE("A backslash in a string takes the next character literally") {
  const NodeProto node = ParseNode(R"(y = Foo <s = "a\"b\\c\n">(x))");
  CHECK(Attr(node, "s").s() == "a\"b\\cn");
}

TEST_CASE("Node inputs keep empty optional slots, quoted names and attributes after inputs") {
  const NodeProto node = ParseNode(R"([n1] "out:0", , z = ai.rt.Op:v2 (a, , "x.y", ) <k = 1>)");
  CHECK(node.name() == "n1");
  CHECK(node.domain() == "ai.rt");
  CHECK(node.op_type() == "Op");
  CHECK(node.overload() == "v2");
  CHECK(std::vector<std::string>(node.output().begin(), node.output().end()) ==
        std::vector<std::string>{"out:0", "", "z"});
  // A trailing comma adds nothing, as upstream.
  CHECK(std::vector<std::string>(node.input().begin(), node.input().end()) ==
        std::vector<std::string>{"a", "", "x.y"});
  CHECK(Attr(node, "k").i() == 1);
}

TEST_CASE("Symbolic, unknown and quoted dimensions are kept as written") {
  const GraphProto graph =
      ParseGraph("g (float[N, ?, 4, \"batch size\"] x) => (float[] y) { y = Identity(x) }");
  const auto& shape = graph.input(0).type().tensor_type().shape();
  REQUIRE(shape.dim_size() == 4);
  CHECK(shape.dim(0).dim_param() == "N");
  CHECK(shape.dim(1).value_case() == TensorShapeProto::Dimension::VALUE_NOT_SET);
  CHECK(shape.dim(2).dim_value() == 4);
  CHECK(shape.dim(3).dim_param() == "batch size");
  CHECK_FALSE(graph.output(0).type().tensor_type().has_shape());
}

TEST_CASE("A standalone function accepts typed inputs and a value-info list") {
  const FunctionProto fn = ParseFunction(
      "<domain: \"local\", opset_import: [\"\" : 18], doc_string: \"d\", overload: \"o\">\n"
      "F <k: ints = [1, 2], j = 3> (float[N] X, Y) => (float[N] Z) <float[N] t> {\n"
      "  t = Identity(X)\n  Z = Add(t, Y)\n}");
  CHECK(fn.doc_string() == "d");
  CHECK(fn.overload() == "o");
  REQUIRE(fn.attribute_proto_size() == 2);
  CHECK(fn.attribute_proto(0).ints_size() == 2);
  CHECK(fn.attribute_proto(1).i() == 3);
  CHECK(fn.input_size() == 2);
  REQUIRE(fn.value_info_size() == 3);  // typed X, typed Z, then t
  CHECK(fn.value_info(0).name() == "X");
  CHECK(fn.value_info(1).name() == "Z");
  CHECK(fn.value_info(2).name() == "t");
}

TEST_CASE("External data and named tensor literals are parsed") {
  const GraphProto graph = ParseGraph(
      "g (float x) => (float y) <float[2] w = [\"location\": \"w.bin\", \"offset\": \"8\"]> {"
      " y = Foo <t = float[2] wt {1, 2}, u = float {2.5}> (x) }");
  const TensorProto& w = graph.initializer(0);
  CHECK(w.data_location() == TensorProto::EXTERNAL);
  REQUIRE(w.external_data_size() == 2);
  CHECK(w.external_data(0).key() == "location");
  CHECK(w.external_data(0).value() == "w.bin");
  CHECK(Attr(graph.node(0), "t").t().name() == "wt");
  CHECK(Attr(graph.node(0), "u").t().dims_size() == 0);
  CHECK(Attr(graph.node(0), "u").t().float_data(0) == 2.5f);
}

TEST_CASE("Our parser builds the same messages as the onnx package's parser") {
  // The .pb files were written by onnx.parser.parse_model (tests/data/text_parser/generate.py).
  for (const char* name : {"spec", "local_function", "if_branches", "loop_body", "kitchen_sink"}) {
    CAPTURE(name);
    const ModelProto ours = ParseModel(ReadFile(DataPath(std::string(name) + ".txt")));
    const std::string reference_bytes = ReadFile(DataPath(std::string(name) + ".pb"));
    ModelProto reference;
    REQUIRE(reference.ParseFromString(reference_bytes));
    std::string report;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&report);
    CHECK_MESSAGE(differencer.Compare(reference, ours), report);
    CHECK(ours.SerializeAsString() == reference_bytes);
  }
}

namespace {

struct BadInput {
  const char* text;
  int line;
  int column;
  const char* message;
};

// Each case: the text, where the offending token starts, and the message it gets.
const BadInput kBadInputs[] = {
    {"<ir_version: 10>\ng (float x) => (float y) {\n  y = Foo <s = \"abc> (x)\n}", 3, 16,
     "unterminated string literal"},
    {"g (float x => (float y) { y = Identity(x) }", 1, 12,
     "expected ')' to close the inputs of graph 'g', found '=>'"},
    {"g (float[2] x) => (float y) { y = Identity(x }", 1, 46,
     "expected ')' to close the inputs of 'Identity', found '}'"},
    {"g (flot[2] x) => (float y) { y = Identity(x) }", 1, 4, "unknown type 'flot'"},
    {"g (seq(flot) x) => (float y) { y = Identity(x) }", 1, 8, "unknown type 'flot'"},
    {"<ir_version: 10, opset: [\"\" : 18]>\ng (float x) => (float y) { y = Identity(x) }", 1, 18,
     "unknown keyword 'opset' in the model header"},
    {"g (float x) => (float y) {\n  y = Foo <a = 1, a = 2> (x)\n}", 2, 19,
     "duplicate attribute 'a'"},
    {"g (float x) => (float y) { y = Foo <a = 1.5e> (x) }", 1, 41,
     "invalid number '1.5e': the exponent has no digits"},
    {"g (float x) => (float y) { y = Foo <a = 12abc> (x) }", 1, 41, "invalid number '12abc'"},
    {"g (float x) (float y) { y = Identity(x) }", 1, 13,
     "expected '=>' between the inputs and outputs of graph 'g', found '('"},
    {"g (float x) = > (float y) { y = Identity(x) }", 1, 13,
     "expected '=>' between the inputs and outputs of graph 'g', found '='"},
    {"g (float x) => (float y) {\n  y = Identity(x)\n", 3, 1,
     "expected '}' to close the body of graph 'g', found end of input"},
    {"g (float x) => (float y) {\n  y Identity(x)\n}", 2, 5,
     "expected '=' after the outputs of a node, found 'Identity'"},
    {"g (float x) => (float y) { y = (x) }", 1, 32, "expected an operator name, found '('"},
    {"g (float x) => (float y) { y = Foo <a: integer = 1> (x) }", 1, 40,
     "unknown attribute type 'integer'"},
    {"g (float x) => (float y) { y = Foo <a: int = \"s\"> (x) }", 1, 46,
     "attribute 'a' is declared int but the value is string"},
    {"g (float x) => (float y) { y = Foo <a = []> (x) }", 1, 41,
     "empty list for attribute 'a' needs a type annotation"},
    {"g (float x) => (float y) { y = Foo <a: int = []> (x) }", 1, 46,
     "attribute 'a' is declared int but given a list"},
    {"g (float x) => (float y) { y = Foo <a = [1, 2.5]> (x) }", 1, 45,
     "list attribute 'a' mixes int and float elements"},
    {"g (float[2, *] x) => (float y) { y = Identity(x) }", 1, 13,
     "expected a dimension (a number, a symbol or '?'), found '*'"},
    {"g (map(flot, int64) x) => (float y) { y = Identity(x) }", 1, 8,
     "unknown element type 'flot' as the map key type"},
    {"g (float x) => (float y) <float[N] w = {1.0}> { y = Identity(x) }", 1, 27,
     "a tensor value needs numeric dimensions, not 'N'"},
    {"g (float x) => (float y) <float[3] w = {1.0, 2.0}> { y = Identity(x) }", 1, 40,
     "tensor 'w' has 2 values but its shape holds 3"},
    {"<ir_version: 99999999999999999999>\ng (float x) => (float y) { y = Identity(x) }", 1, 14,
     "integer '99999999999999999999' is out of the int64 range"},
    {"g (float x) => (float y) <int64[1] w = {1.5}> { y = Identity(x) }", 1, 41,
     "expected an integer, found '1.5'"},
    {"<opset_import: [onnx : 18]>\ng (float x) => (float y) { y = Identity(x) }", 1, 17,
     "expected a quoted opset domain"},
    {"g (float x) => (float y) { y = Identity(x) }\n<domain: \"local\", version: 1>\n"
     "f (a) => (b) { b = Identity(a) }",
     2, 19, "unknown keyword 'version' in a function header"},
    {"g (float x) => (float y) { y = Foo <a = -foo> (x) }", 1, 41, "invalid number '-foo'"},
    {"g (float x) => (float y) <int8[1] w = {3000000000}> { y = Identity(x) }", 1, 40,
     "value 3000000000 does not fit the tensor's element type int8"},
    {"<ir_version: 10, ir_version: 11>\ng (float x) => (float y) { y = Identity(x) }", 1, 18,
     "duplicate key 'ir_version' in the model header"},
    {"<ir_version: 10\ng (float x) => (float y) { y = Identity(x) }", 2, 1,
     "expected '>' to close the model header, found 'g'"},
    {"g (float x) => (float y) {\n  y = Identity(x)\n  $\n}", 3, 3,
     "expected '=' after the outputs of a node, found '$'"},
    {"g (float x) => (float y) { y = Foo <a = > (x) }", 1, 41,
     "expected an attribute value, found '>'"},
    {"g (float x) => (float y) <uint64[1] u = {-1}> { y = Identity(x) }", 1, 42,
     "expected an unsigned integer, found '-1'"},
    {"g (float[2 x) => (float y) { y = Identity(x) }", 1, 12,
     "expected ']' to close the tensor shape, found 'x'"},
    {"g (float x) => (float y) { y = Identity(x) }\nf <a, a> (x) => (y) { y = Identity(x) }", 2, 7,
     "duplicate attribute 'a'"},
    {"g (float x) => (float y) <float[1] w = 1.0> { y = Identity(x) }", 1, 40,
     "expected '{' with the tensor values or '[' with its external data, found '1.0'"},
    {"g (float x) => (float y) { y = Foo <a = [@b]> (x) }", 1, 42,
     "an attribute reference cannot be a list element"},
    {"", 1, 1, "expected a graph name, found end of input"},
    {"g (float x) => (float y) { y = Foo <a = 1e99> (x) }", 1, 41,
     "number '1e99' is out of the float range"},
    {"# header comment\ng (float x) => (float y) { y = Identity(x) } extra", 2, 51,
     "expected '(' to open the inputs of function 'extra', found end of input"},
    {"g (float x) => (float y) { y = Foo <t = float[2] {1, \"a\"}> (x) }", 1, 54,
     "expected a number, found a string"},
};

}  // namespace

TEST_CASE("Malformed texts raise TextParseError at the offending token with a clear message") {
  static_assert(sizeof(kBadInputs) / sizeof(kBadInputs[0]) >= 25);
  for (const BadInput& bad : kBadInputs) {
    CAPTURE(bad.text);
    try {
      ParseModel(bad.text);
      FAIL("no error for: " << bad.text);
    } catch (const TextParseError& e) {
      CHECK(e.code() == ErrorCode::kInvalidModel);
      CHECK(e.line() == bad.line);
      CHECK(e.column() == bad.column);
      CHECK_MESSAGE(e.message().find(bad.message) != std::string::npos, e.message());
      const std::string prefix =
          "line " + std::to_string(bad.line) + ", column " + std::to_string(bad.column) + ": ";
      CHECK(std::string(e.what()) == prefix + e.message());
    }
  }
}

TEST_CASE("Standalone graphs, functions and nodes reject trailing text") {
  try {
    ParseNode("y = Identity(x) z");
    FAIL("trailing text accepted");
  } catch (const TextParseError& e) {
    CHECK(e.line() == 1);
    CHECK(e.column() == 17);
    CHECK(std::string(e.what()) == "line 1, column 17: unexpected 'z' after the end of the node");
  }
  CHECK_THROWS_WITH_AS(ParseGraph("g () => () {} }"),
                       "line 1, column 15: unexpected '}' after the end of the graph",
                       TextParseError);
  CHECK_THROWS_WITH_AS(ParseFunction("f (a) => (b) { b = Identity(a) } ;"),
                       "line 1, column 34: unexpected ';' after the end of the function",
                       TextParseError);
  // A TextParseError is an Error, so callers that catch Error see it too.
  CHECK_THROWS_AS(ParseGraph("g"), Error);
}

TEST_CASE("Every truncation of a valid model is either a valid model or a TextParseError") {
  const std::string text =
      ReadFile(DataPath("kitchen_sink.txt")) + ReadFile(DataPath("local_function.txt")).substr(56);
  REQUIRE_NOTHROW(ParseModel(text));
  int parsed = 0;
  for (size_t size = 0; size < text.size(); ++size) {
    CAPTURE(size);
    try {
      ParseModel(std::string_view(text).substr(0, size));
      ++parsed;
    } catch (const TextParseError& e) {
      CHECK(e.line() >= 1);
      CHECK(e.column() >= 1);
    }
  }
  // Complete models: the cut right after the closing '}' of the graph, of the first function
  // (`main ...`, read as a function here) and of the last one, and the first two of these
  // followed by their newline.
  CHECK(parsed == 5);
}

TEST_CASE("Deeply nested types and subgraphs are refused instead of exhausting the stack") {
  std::string type;
  for (int i = 0; i < 100000; ++i) type += "seq(";
  try {
    ParseGraph("g (" + type + "float" + std::string(100000, ')') + " x) => () {}");
    FAIL("accepted 100000 nested types");
  } catch (const TextParseError& e) {
    CHECK(e.line() == 1);
    CHECK(e.column() == 4 + 99 * 4);  // the graph is the first level, the 100th seq the 101st
    CHECK(e.message() == "nesting deeper than 100 levels");
  }
  std::string graph = "g () => () { y = If (c) <then_branch = ";
  for (int i = 0; i < 200; ++i) graph += "g () => () { y = If (c) <then_branch = ";
  CHECK_THROWS_WITH_AS(ParseGraph(graph), doctest::Contains("nesting deeper than 100 levels"),
                       TextParseError);
}
