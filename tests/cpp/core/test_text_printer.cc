#include <doctest/doctest.h>
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/text_parser.h"
#include "core/text_printer.h"

using namespace onnx_light;
using namespace onnx_light::core;

namespace {

std::string ReadData(const std::string& name) {
  const std::string path = std::string(ONNX_LIGHT_SOURCE_DIR) + "/tests/data/text_parser/" + name;
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Equal as messages; NaN attributes compare equal to themselves.
bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b,
                 std::string* report) {
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  differencer.ReportDifferencesToString(report);
  return differencer.Compare(a, b);
}

void CheckModelRoundTrip(const std::string& text) {
  const ModelProto model = ParseModel(text);
  const std::string printed = PrintModel(model);
  CAPTURE(printed);
  const ModelProto reparsed = ParseModel(printed);
  std::string report;
  CHECK_MESSAGE(SameMessage(model, reparsed, &report), report);
  // Printing is a fixed point: the text of the re-parsed model is the same text.
  CHECK(PrintModel(reparsed) == printed);
}

}  // namespace

TEST_CASE("Printed models parse back into equal messages") {
  for (const char* name :
       {"spec.txt", "local_function.txt", "if_branches.txt", "loop_body.txt", "kitchen_sink.txt"}) {
    CAPTURE(name);
    CheckModelRoundTrip(ReadData(name));
  }
  const char* more[] = {
      // Attributes after inputs, empty slots, overloads, quoted names, labels.
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "\"my graph\" (float \"x.y\", float seq_) => (float \"out:0\", float z) {\n"
      "  [\"a node\"] \"out:0\" = Identity(\"x.y\")\n"
      "  [] z, , = local.F:ov (, \"x.y\", ) <a = 1, b: float = 2>\n}",
      // Every kind of type, external data, named tensors, lists of tensors and types.
      "g (opaque() a, opaque(foo) b, opaque(com.x, bar) c,\n"
      "   seq(optional(map(int64, seq(float[?, N])))) d, float[] e, sparse_tensor(float) f)\n"
      "  => (y) <float[2] w = [\"location\": \"w.bin\", \"offset\": \"0\"]> {\n"
      "  y = Foo <t = float[2] wt {1, 2}, e = float[2] = [\"location\": \"a\"],\n"
      "           c = complex64[1] {1, 2}, d = double[1] {1e300}, i4 = int4[2] {-8, 7},\n"
      "           tps = [float[2], seq(int64)], ts = [float[1] {1}, int64[1] {2}],\n"
      "           gs = [a () => (x) { x = Foo() }, b () => (x) { x = Bar() }]> (a)\n}",
      // Special floats, empty typed lists, empty strings.
      "g (float x) => (float y) { y = Foo <a = inf, b = -inf, c = nan, d = -0.0,"
      " h = 1.5e-45, k = 0.1, f2: floats = [], i2: ints = [], s2: strings = [],"
      " s0 = \"\", q = \"a\\\\b\\\"c\"> (x) }",
      // Every element type in an initializer.
      "g (float x) => (float y) <uint8[1] a = {255}, int16[1] b = {-3}, int32[1] c = {7},"
      " uint16[1] d = {9}, uint32[1] e = {4000000000}, bfloat16[1] f = {16256},"
      " float8e4m3fn[1] g8 = {56}, uint4[2] h = {1, 15}, float4e2m1[1] k = {3},"
      " complex128[1] l = {1, 2}, string s = {\"x\"}, int64[0] empty = {}> { y = Identity(x) }",
      // Functions with typed inputs, defaults, references and several functions.
      "<ir_version: 10, opset_import: [\"\" : 18, \"local\" : 1]>\n"
      "g (float[N] x) => (float[N] y) { y = local.F <k = [3]> (x) }\n"
      "<domain: \"local\", opset_import: [\"\" : 18], doc_string: \"d\", overload: \"ov\">\n"
      "F <k: ints = [1, 2], j = 3, alpha> (float[N] X, Y) => (float[N] Z) <float[N] t> {\n"
      "  t = LeakyRelu <alpha = @alpha> (X)\n  Z = Add(t, Y)\n}\n"
      "<domain: \"local\">\nG (A) => (B) { B = Identity <v: float = @alpha> (A) }",
  };
  for (const char* text : more) {
    CAPTURE(text);
    CheckModelRoundTrip(text);
  }
}

TEST_CASE("The spec model prints as readable text") {
  const ModelProto model = ParseModel(ReadData("spec.txt"));
  CHECK(PrintModel(model) ==
        "<ir_version: 10, opset_import: [\"\" : 18]>\n"
        "accumulate (float[2] delta, float[2] past) => (float[2] present) {\n"
        "  present = Add(delta, past)\n"
        "}\n");
}

TEST_CASE("Subgraphs, attributes and local functions print indented and in order") {
  CHECK(PrintModel(ParseModel(ReadData("if_branches.txt"))) ==
        "<ir_version: 10, opset_import: [\"\" : 18]>\n"
        "choose (bool c, float[2] x) => (float[2] y) {\n"
        "  t = Neg(x)\n"
        "  y = If (c) <then_branch = then_g () => (float[2] z) {\n"
        "    z = Identity(t)\n"
        "  }, else_branch = else_g () => (float[2] z) {\n"
        "    z = Add(t, x)\n"
        "  }>\n"
        "}\n");
  CHECK(PrintModel(ParseModel(ReadData("local_function.txt"))) ==
        "<ir_version: 10, opset_import: [\"\" : 18, \"local\" : 1]>\n"
        "main (float[N] x) => (float[N] y) {\n"
        "  y = local.Scale <alpha = 2.0> (x)\n"
        "}\n"
        "\n"
        "<domain: \"local\", opset_import: [\"\" : 18]>\n"
        "Scale <beta, alpha: float = 1.0> (X) => (Y) {\n"
        "  a = Constant <value_float: float = @alpha> ()\n"
        "  Y = Mul(X, a)\n"
        "}\n");
}

TEST_CASE("Long lists wrap one item per line within 100 columns") {
  const std::string text = PrintModel(ParseModel(ReadData("kitchen_sink.txt")));
  std::istringstream lines(text);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    CHECK_MESSAGE(line.size() <= 100, line);
    ++count;
  }
  CHECK(count == 43);
  CHECK(text.find("<\n  ir_version: 10,\n  opset_import: [\"\" : 18, \"com.microsoft\" : 1, "
                  "\"ai.rt\" : 1],\n") == 0);
  CHECK(text.find("  tmp = com.microsoft.Foo <\n    i = -3,\n    f = -inf,\n") !=
        std::string::npos);
  CHECK(text.find("  > (a, \"\", w)\n") != std::string::npos);
}

TEST_CASE("Graphs and functions print on their own") {
  const GraphProto graph = ParseGraph("g (float[N] x) => (float[N] y) { y = Relu(x) }");
  CHECK(PrintGraph(graph) == "g (float[N] x) => (float[N] y) {\n  y = Relu(x)\n}\n");
  const FunctionProto fn = ParseFunction("<domain: \"d\"> F <a> (X) => (Y) { Y = Relu(X) }");
  CHECK(PrintFunction(fn) == "<domain: \"d\">\nF <a> (X) => (Y) {\n  Y = Relu(X)\n}\n");
  CHECK(PrintNode(ParseNode("y, , z = a.b.Op <k = [1, 2]> (x, )")) ==
        "y, \"\", z = a.b.Op <k = [1, 2]> (x)");
}

TEST_CASE("Names that are not plain identifiers or that spell a type are quoted") {
  const GraphProto graph = ParseGraph(
      "g (float \"a b\", int64 \"float\", float \"seq\") => (float \"y\\\"\") {"
      " \"y\\\"\" = Sum(\"a b\", \"float\", \"seq\") }");
  const std::string text = PrintGraph(graph);
  CHECK(text ==
        "g (float \"a b\", int64 \"float\", float \"seq\") => (float \"y\\\"\") {\n"
        "  \"y\\\"\" = Sum(\"a b\", \"float\", \"seq\")\n}\n");
  std::string report;
  CHECK_MESSAGE(SameMessage(graph, ParseGraph(text), &report), report);
}

TEST_CASE("Floats print in their shortest exact form and always read back as floats") {
  const NodeProto node = ParseNode("y = Foo <a = 1.0, b = 0.1, c = 3e-38, d = 16777216.0> (x)");
  CHECK(PrintNode(node) == "y = Foo <a = 1.0, b = 0.1, c = 3e-38, d = 16777216.0> (x)");
  const NodeProto back = ParseNode(PrintNode(node));
  for (int i = 0; i < node.attribute_size(); ++i) {
    CHECK(back.attribute(i).type() == AttributeProto::FLOAT);
    const float original = node.attribute(i).f();
    const float reread = back.attribute(i).f();
    CHECK(std::memcmp(&original, &reread, sizeof(float)) == 0);
  }
}

TEST_CASE("Raw-data initializers print as values that parse back into the typed fields") {
  GraphProto graph = ParseGraph("g (float x) => (float y) { y = Identity(x) }");
  TensorProto* w = graph.add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(3);
  const float values[] = {0.5f, -2.0f, 3.25f};
  w->set_raw_data(std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  TensorProto* q = graph.add_initializer();
  q->set_name("q");
  q->set_data_type(TensorProto::INT4);
  q->add_dims(3);
  q->set_raw_data(std::string("\x8F\x07", 2));  // -1 and -8 in the first byte, 7 in the second
  TensorProto* h = graph.add_initializer();
  h->set_name("h");
  h->set_data_type(TensorProto::FLOAT16);
  h->add_dims(1);
  h->set_raw_data(std::string("\x00\x3C", 2));  // 1.0 in IEEE half precision

  const std::string text = PrintGraph(graph);
  CHECK(text ==
        "g (float x) => (float y) <\n"
        "  float[3] w = {0.5, -2.0, 3.25},\n"
        "  int4[3] q = {-1, -8, 7},\n"
        "  float16[1] h = {15360}\n"
        "> {\n"
        "  y = Identity(x)\n"
        "}\n");
  const GraphProto back = ParseGraph(text);
  REQUIRE(back.initializer_size() == 3);
  CHECK(std::vector<float>(back.initializer(0).float_data().begin(),
                           back.initializer(0).float_data().end()) ==
        std::vector<float>{0.5f, -2.0f, 3.25f});
  CHECK(back.initializer(1).int32_data_size() == 3);
  CHECK(back.initializer(2).int32_data(0) == 15360);

  w->set_raw_data(std::string(4, '\0'));  // one float for three elements
  CHECK_THROWS_WITH_AS(PrintGraph(graph), "tensor 'w' has 4 bytes of raw data, needs 12", Error);
}

TEST_CASE("What the syntax cannot express is refused, not printed wrongly") {
  NodeProto node = ParseNode("y = Foo (x)");
  AttributeProto* attr = node.add_attribute();
  attr->set_name("sp");
  attr->set_type(AttributeProto::SPARSE_TENSOR);
  try {
    PrintNode(node);
    FAIL("sparse tensor attribute printed");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
    CHECK(std::string(e.what()) == "sparse tensor attribute 'sp' has no text form");
  }
  GraphProto graph = ParseGraph("g (float x) => (float y) { y = Identity(x) }");
  graph.mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(0);
  CHECK_THROWS_WITH_AS(PrintGraph(graph), "element type 0 of 'x' has no text form", Error);
}

TEST_CASE("A model written by the onnx package with raw-data initializers prints its values") {
  // Built by tests/data/text_parser/generate.py with onnx.numpy_helper (raw_data tensors).
  ModelProto model;
  REQUIRE(model.ParseFromString(ReadData("raw_initializers.onnx")));
  REQUIRE(model.graph().initializer(0).has_raw_data());
  const std::string text = PrintModel(model);
  CHECK(text ==
        "<ir_version: 10, opset_import: [\"\" : 18]>\n"
        "real (float[N, 2] x) => (int64[] z, float[2] h32) <\n"
        "  float[2, 3] W = {0.0, 0.25, 0.5, 0.75, 1.0, 1.25},\n"
        "  int64[2] B = {-1, 3},\n"
        "  float16[2] H = {15872, 49152}\n"  // half-precision bit patterns, as upstream
        "> {\n"
        "  [mm] t = MatMul(x, W)\n"
        "  y = Cast <to = 7> (t)\n"
        "  z = Reshape <allowzero = 0> (y, B)\n"
        "  h32 = Cast <to = 1> (H)\n"
        "}\n");

  // Everything but the storage of the initializers comes back identical.
  const ModelProto back = ParseModel(text);
  ModelProto expected = model;
  expected.mutable_graph()->clear_initializer();
  // The parser always writes a node's (empty) domain, as upstream's does.
  for (NodeProto& node : *expected.mutable_graph()->mutable_node()) {
    if (!node.has_domain()) node.set_domain("");
  }
  ModelProto actual = back;
  actual.mutable_graph()->clear_initializer();
  std::string report;
  CHECK_MESSAGE(SameMessage(expected, actual, &report), report);
  REQUIRE(back.graph().initializer_size() == 3);
  CHECK(std::vector<float>(back.graph().initializer(0).float_data().begin(),
                           back.graph().initializer(0).float_data().end()) ==
        std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f});
  CHECK(back.graph().initializer(1).int64_data(0) == -1);
  CHECK(back.graph().initializer(2).int32_data(1) == 49152);  // -2.0 in half precision
  for (int i = 0; i < 3; ++i) {
    CHECK(back.graph().initializer(i).name() == model.graph().initializer(i).name());
    CHECK(back.graph().initializer(i).data_type() == model.graph().initializer(i).data_type());
  }
}
