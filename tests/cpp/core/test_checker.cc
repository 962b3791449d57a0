#include <doctest/doctest.h>
#include <google/protobuf/text_format.h>

#include <string>

#include "core/checker.h"
#include "core/error.h"
#include "onnx_light.pb.h"

using onnx_light::GraphProto;
using onnx_light::ModelProto;
using onnx_light::core::CheckModel;
using onnx_light::core::CheckPersistentBindings;
using onnx_light::core::CountValueUses;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;

namespace {

// A FLOAT[2] value declaration (protobuf text format), or one of another element type.
std::string Value(const std::string& name, int elem = 1, const std::string& dims = "2") {
  std::string shape;
  size_t start = 0;
  while (start <= dims.size() && !dims.empty()) {
    size_t end = dims.find(',', start);
    if (end == std::string::npos) end = dims.size();
    const std::string d = dims.substr(start, end - start);
    shape += (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0])))
                 ? " dim { dim_value: " + d + " }"
                 : " dim { dim_param: \"" + d + "\" }";
    start = end + 1;
  }
  return "name: \"" + name + "\" type { tensor_type { elem_type: " + std::to_string(elem) +
         " shape {" + shape + " } } }";
}

std::string In(const std::string& name) { return " input { " + Value(name) + " }"; }
std::string Out(const std::string& name) { return " output { " + Value(name) + " }"; }
std::string Bind(const std::string& in, const std::string& out) {
  return " persistent_bindings { input_name: \"" + in + "\" output_name: \"" + out + "\" }";
}
std::string Node(const std::string& op, const std::string& inputs, const std::string& outputs,
                 const std::string& extra = "") {
  std::string s = " node { op_type: \"" + op + "\"";
  size_t start = 0;
  for (const std::string* list : {&inputs, &outputs}) {
    const char* field = list == &inputs ? "input" : "output";
    start = 0;
    while (start < list->size()) {
      size_t end = list->find(',', start);
      if (end == std::string::npos) end = list->size();
      s += std::string(" ") + field + ": \"" + list->substr(start, end - start) + "\"";
      start = end + 1;
    }
  }
  return s + extra + " }";
}
// A graph attribute holding `body`.
std::string GraphAttr(const std::string& name, const std::string& body) {
  return " attribute { name: \"" + name + "\" type: GRAPH g { name: \"" + name + "\" " + body +
         " } }";
}

ModelProto Model(const std::string& graph_body, const std::string& extra = "") {
  ModelProto model;
  const std::string text = "ir_version: 10 opset_import { domain: \"\" version: 18 } " + extra +
                           " graph { name: \"main\" " + graph_body + " }";
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text, &model));
  return model;
}

// The Add feedback graph of the spec: present = Add(delta, past), past <- present.
const std::string kAccumulate =
    In("delta") + In("past") + Out("present") + Node("Add", "delta,past", "present");

std::string CheckError(const ModelProto& model) {
  try {
    CheckModel(model);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidModel);
    return e.what();
  }
  return "";
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("The spec's accumulate graph with one use of its bound input passes") {
  ModelProto model = Model(kAccumulate + Bind("past", "present"));
  CHECK(CountValueUses(model.graph(), "past") == 1);
  CHECK_NOTHROW(CheckModel(model));
}

TEST_CASE("Two input positions of one node count as two uses") {
  ModelProto model = Model(In("past") + Out("present") + Node("Add", "past,past", "present") +
                           Bind("past", "present"));
  CHECK(CountValueUses(model.graph(), "past") == 2);
  CHECK(CheckError(model) ==
        "graph 'main': persistent binding 0 (input 'past' <- output 'present'): bound input "
        "'past' must have exactly one value-use, found 2");
}

TEST_CASE("A read-only Shape use counts like any other use") {
  // Passing: Shape is the only use.
  ModelProto one = Model(In("past") + Out("present") + Node("Shape", "past", "s") +
                         Node("Cast", "s", "present") + Bind("past", "present"));
  CHECK(CountValueUses(one.graph(), "past") == 1);
  CHECK_NOTHROW(CheckModel(one));
  // Failing: Shape plus Add.
  ModelProto two = Model(kAccumulate + Node("Shape", "past", "s") + Bind("past", "present"));
  CHECK(CountValueUses(two.graph(), "past") == 2);
  CHECK(Contains(CheckError(two), "bound input 'past' must have exactly one value-use, found 2"));
}

TEST_CASE("A graph output that directly returns the bound input counts as a use") {
  // Passing: the output is the only use.
  ModelProto one = Model(In("delta") + In("past") + Out("present") + Out("past") +
                         Node("Add", "delta,delta", "present") + Bind("past", "present"));
  CHECK(CountValueUses(one.graph(), "past") == 1);
  CHECK_NOTHROW(CheckModel(one));
  // Failing: returned directly and consumed by Add.
  ModelProto two = Model(kAccumulate + Out("past") + Bind("past", "present"));
  CHECK(CountValueUses(two.graph(), "past") == 2);
  CHECK(Contains(CheckError(two), "found 2"));
}

TEST_CASE("A capture inside a nested graph counts, in every branch of an If") {
  const std::string uses_past = Out("y") + Node("Identity", "past", "y");
  const std::string no_past = Out("y") + Node("Identity", "delta", "y");
  const std::string common =
      In("cond") + In("delta") + In("past") + Out("present") +
      Node("If", "cond", "present",
           GraphAttr("then_branch", uses_past) + GraphAttr("else_branch", "__ELSE__"));
  auto make = [&](const std::string& else_body) {
    std::string body = common;
    body.replace(body.find("__ELSE__"), 8, else_body);
    ModelProto m = Model(body + Bind("past", "present"));
    // cond is BOOL[].
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(9);
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    return m;
  };
  ModelProto one = make(no_past);
  CHECK(CountValueUses(one.graph(), "past") == 1);
  CHECK_NOTHROW(CheckModel(one));
  // Mutually exclusive branches still count statically.
  ModelProto two = make(uses_past);
  CHECK(CountValueUses(two.graph(), "past") == 2);
  CHECK(Contains(CheckError(two), "must have exactly one value-use, found 2"));
}

TEST_CASE("Captures are counted through graphs nested inside nested graphs") {
  const std::string inner = Out("z") + Node("Identity", "past", "z");
  const std::string outer =
      Out("y") +
      Node("If", "cond", "y", GraphAttr("then_branch", inner) + GraphAttr("else_branch", inner));
  const std::string other = Out("y") + Node("Identity", "delta", "y");
  ModelProto model = Model(In("cond") + In("delta") + In("past") + Out("present") +
                           Node("If", "cond", "present",
                                GraphAttr("then_branch", outer) + GraphAttr("else_branch", other)) +
                           Bind("past", "present"));
  CHECK(CountValueUses(model.graph(), "past") == 2);
  CHECK(Contains(CheckError(model), "found 2"));
}

TEST_CASE("A nested graph's own input or initializer of the same name shadows the outer one") {
  // The Loop body declares its own input "past": its uses do not count.
  const std::string body_with_input = In("i") + In("c") + In("past") + Out("c_out") +
                                      Out("past_out") + Node("Identity", "c", "c_out") +
                                      Node("Identity", "past", "past_out");
  ModelProto shadowed =
      Model(In("delta") + In("past") + Out("present") + Out("scan") +
            Node("Add", "delta,past", "present") +
            Node("Loop", ",,delta", "loop_out,scan", GraphAttr("body", body_with_input)) +
            Bind("past", "present"));
  CHECK(CountValueUses(shadowed.graph(), "past") == 1);
  // An initializer named like the outer value shadows it too.
  const std::string body_with_init =
      Out("y") + Node("Identity", "past", "y") +
      " initializer { name: \"past\" data_type: 1 dims: 2 float_data: [1, 2] }";
  ModelProto init_shadowed = Model(
      In("cond") + kAccumulate + Out("other") +
      Node("If", "cond", "other",
           GraphAttr("then_branch", body_with_init) + GraphAttr("else_branch", body_with_init)) +
      Bind("past", "present"));
  CHECK(CountValueUses(init_shadowed.graph(), "past") == 1);
  // Without the shadowing declaration the capture counts.
  const std::string capturing = Out("y") + Node("Identity", "past", "y");
  ModelProto captured =
      Model(In("cond") + kAccumulate + Out("other") +
            Node("If", "cond", "other",
                 GraphAttr("then_branch", capturing) + GraphAttr("else_branch", body_with_init)) +
            Bind("past", "present"));
  CHECK(CountValueUses(captured.graph(), "past") == 2);
  CHECK(Contains(CheckError(captured), "found 2"));
}

TEST_CASE("Declarations, bindings and value_info are not uses") {
  // Passing: one real use plus a value_info entry and the binding itself.
  ModelProto one =
      Model(kAccumulate + " value_info { " + Value("past") + " }" + Bind("past", "present"));
  CHECK(CountValueUses(one.graph(), "past") == 1);
  CHECK_NOTHROW(CheckModel(one));
  // Failing: declared and bound but never used.
  ModelProto zero =
      Model(In("delta") + In("past") + Out("present") + " value_info { " + Value("past") + " }" +
            Node("Identity", "delta", "present") + Bind("past", "present"));
  CHECK(CountValueUses(zero.graph(), "past") == 0);
  CHECK(Contains(CheckError(zero), "bound input 'past' must have exactly one value-use, found 0"));
}

TEST_CASE("Graphs without bindings keep ordinary sharing semantics") {
  ModelProto model =
      Model(In("x") + Out("y") + Out("x") + Node("Add", "x,x", "y") + Node("Shape", "x", "s"));
  CHECK(CountValueUses(model.graph(), "x") == 4);
  CHECK_NOTHROW(CheckModel(model));
  CHECK_NOTHROW(CheckPersistentBindings(model.graph()));
}

TEST_CASE("Unknown binding names are rejected with the binding and the name") {
  CHECK(CheckError(Model(kAccumulate + Bind("pats", "present"))) ==
        "graph 'main': persistent binding 0 (input 'pats' <- output 'present'): unknown input "
        "name 'pats' (not a graph input)");
  CHECK(CheckError(Model(kAccumulate + Bind("past", "presnt"))) ==
        "graph 'main': persistent binding 0 (input 'past' <- output 'presnt'): unknown output "
        "name 'presnt' (not a graph output)");
  // "request.cache" is a literal name, not a path into a structure.
  CHECK(Contains(CheckError(Model(kAccumulate + Bind("past.cache", "present"))),
                 "unknown input name 'past.cache'"));
}

TEST_CASE("Duplicate binding input or output names are rejected") {
  const std::string two_outputs = In("delta") + In("past") + In("past2") + Out("present") +
                                  Out("present2") + Node("Add", "delta,past", "present") +
                                  Node("Add", "delta,past2", "present2");
  CHECK(
      Contains(CheckError(Model(two_outputs + Bind("past", "present") + Bind("past", "present2"))),
               "persistent binding 1 (input 'past' <- output 'present2'): duplicate binding "
               "input name 'past'"));
  CHECK(
      Contains(CheckError(Model(two_outputs + Bind("past", "present") + Bind("past2", "present"))),
               "persistent binding 1 (input 'past2' <- output 'present'): duplicate binding "
               "output name 'present'"));
  CHECK_NOTHROW(
      CheckModel(Model(two_outputs + Bind("past", "present") + Bind("past2", "present2"))));
}

TEST_CASE("Bindings inside subgraphs are rejected") {
  const std::string body = In("a") + Out("b") + Node("Identity", "a", "b") + Bind("a", "b");
  ModelProto model = Model(
      In("cond") + In("x") + Out("y") +
      Node("If", "cond", "y",
           " name: \"branch\"" + GraphAttr("then_branch", body) + GraphAttr("else_branch", body)));
  const std::string message = CheckError(model);
  CHECK(Contains(message, "node 0 (If 'branch') attribute 'then_branch' > graph 'then_branch'"));
  CHECK(Contains(message, "persistent bindings are only allowed in the root graph"));
  CHECK_THROWS_WITH_AS(CheckPersistentBindings(model.graph()),
                       doctest::Contains("only allowed in the root graph"), Error);
}

TEST_CASE("String-typed bound values are rejected, also inside structs and sequences") {
  auto with_type = [](const std::string& type_text) {
    ModelProto m = Model(kAccumulate + Bind("past", "present"));
    for (auto* v : {m.mutable_graph()->mutable_input(1), m.mutable_graph()->mutable_output(0)}) {
      v->clear_type();
      REQUIRE(google::protobuf::TextFormat::ParseFromString(type_text, v->mutable_type()));
    }
    return m;
  };
  CHECK(Contains(CheckError(with_type("tensor_type { elem_type: 8 }")),
                 "input 'past': string tensors cannot be persistent"));
  CHECK(Contains(
      CheckError(with_type("struct_type { name: \"cache\" field { name: \"k\" type { "
                           "tensor_type { elem_type: 1 } } } field { name: \"label\" type { "
                           "tensor_type { elem_type: 8 } } } }")),
      "input 'past'.label: string tensors cannot be persistent"));
  CHECK(Contains(CheckError(with_type("sequence_type { elem_type { tensor_type { elem_type: 8 "
                                      "} } }")),
                 "input 'past'[]: string tensors cannot be persistent"));
  // Through a catalogue reference.
  ModelProto ref = with_type("struct_type { type_ref: \"Cache\" }");
  REQUIRE(google::protobuf::TextFormat::ParseFromString(
      "name: \"Cache\" field { name: \"tag\" type { tensor_type { elem_type: 8 } } }",
      ref.add_struct_types()));
  CHECK(Contains(CheckError(ref), "input 'past'.tag: string tensors cannot be persistent"));
  // A supported structure passes.
  CHECK_NOTHROW(CheckModel(with_type(
      "struct_type { name: \"cache\" field { name: \"k\" type { tensor_type { elem_type: 1 } } "
      "} field { name: \"pages\" type { sequence_type { elem_type { tensor_type { elem_type: "
      "10 } } } } } }")));
}

TEST_CASE("Map, optional, sparse and opaque bound types are rejected, also when nested") {
  auto with_type = [](const std::string& type_text) {
    ModelProto m = Model(kAccumulate + Bind("past", "present"));
    for (auto* v : {m.mutable_graph()->mutable_input(1), m.mutable_graph()->mutable_output(0)}) {
      v->clear_type();
      REQUIRE(google::protobuf::TextFormat::ParseFromString(type_text, v->mutable_type()));
    }
    return m;
  };
  const std::string tensor = "tensor_type { elem_type: 1 }";
  CHECK(Contains(CheckError(with_type("map_type { key_type: 7 value_type { " + tensor + " } }")),
                 "input 'past': map values cannot be persistent"));
  CHECK(Contains(CheckError(with_type("optional_type { elem_type { " + tensor + " } }")),
                 "input 'past': optional values cannot be persistent"));
  CHECK(Contains(CheckError(with_type("sparse_tensor_type { elem_type: 1 }")),
                 "input 'past': sparse tensors cannot be persistent"));
  CHECK(Contains(CheckError(with_type("opaque_type { name: \"x\" }")),
                 "input 'past': opaque values cannot be persistent"));
  CHECK(Contains(CheckError(with_type("sequence_type { elem_type { map_type { key_type: 7 "
                                      "value_type { " +
                                      tensor + " } } } }")),
                 "input 'past'[]: map values cannot be persistent"));
  CHECK(Contains(CheckError(with_type("struct_type { name: \"s\" field { name: \"o\" type { "
                                      "optional_type { elem_type { " +
                                      tensor + " } } } } }")),
                 "input 'past'.o: optional values cannot be persistent"));
}

TEST_CASE("Bound input and output types must be compatible, symbolic dims are allowed") {
  auto pair = [](int in_elem, const std::string& in_dims, int out_elem,
                 const std::string& out_dims) {
    return Model(In("delta") + " input { " + Value("past", in_elem, in_dims) + " }" + " output { " +
                 Value("present", out_elem, out_dims) + " }" +
                 Node("Add", "delta,past", "present") + Bind("past", "present"));
  };
  CHECK_NOTHROW(CheckModel(pair(1, "1,seq,4", 1, "1,next,4")));
  CHECK_NOTHROW(CheckModel(pair(1, "2", 1, "n")));
  CHECK(Contains(CheckError(pair(1, "2", 10, "2")),
                 "element types differ (FLOAT vs FLOAT16) (input and output types are "
                 "incompatible)"));
  CHECK(Contains(CheckError(pair(1, "1,4", 1, "1,4,1")), "ranks differ (2 vs 3)"));
  CHECK(Contains(CheckError(pair(1, "1,4", 1, "1,5")), "dimension 1 differs (4 vs 5)"));
}

TEST_CASE("Nodes must be topologically sorted and reference defined values") {
  ModelProto unsorted = Model(In("x") + Out("z") + Node("Relu", "y", "z", " name: \"second\"") +
                              Node("Relu", "x", "y", " name: \"first\""));
  CHECK(CheckError(unsorted) ==
        "graph 'main': node 0 (Relu 'second'): input 0 'y' is not a graph input, initializer, "
        "earlier node output or outer-scope value (graph not topologically sorted?)");
  ModelProto sorted = Model(In("x") + Out("z") + Node("Relu", "x", "y") + Node("Relu", "y", "z"));
  CHECK_NOTHROW(CheckModel(sorted));
  // Omitted optional inputs ("") are fine.
  CHECK_NOTHROW(CheckModel(Model(In("x") + Out("y") + Node("Clip", "x,,", "y"))));
}

TEST_CASE("Each value is defined once") {
  CHECK(Contains(
      CheckError(Model(In("x") + Out("y") + Node("Relu", "x", "y") + Node("Relu", "x", "y"))),
      "node 1 (Relu): output 'y' is already defined (graphs must be in SSA form)"));
  CHECK(Contains(CheckError(Model(In("x") + In("x") + Out("x"))),
                 "graph input 'x' is declared twice"));
  CHECK(Contains(CheckError(Model(In("x") + Out("y") + Node("Relu", "x", "x"))),
                 "output 'x' is already defined"));
  // A subgraph node may not redefine an outer value either.
  const std::string body = Out("x") + Node("Identity", "c", "x");
  CHECK(Contains(
      CheckError(Model(
          In("c") + In("x") + Out("y") +
          Node("If", "c", "y", GraphAttr("then_branch", body) + GraphAttr("else_branch", body)))),
      "attribute 'then_branch' > graph 'then_branch': node 0 (Identity): output 'x' "
      "is already defined"));
  // An initializer may also be declared as an input (a default value).
  CHECK_NOTHROW(CheckModel(Model(In("x") + Out("y") + Node("Relu", "x", "y") +
                                 " initializer { name: \"x\" data_type: 1 dims: 2 float_data: "
                                 "[1, 2] }")));
}

TEST_CASE("Graph outputs must be produced") {
  CHECK(CheckError(Model(In("x") + Out("y") + Out("w") + Node("Relu", "x", "y"))) ==
        "graph 'main': graph output 'w' is not produced by any node, input or initializer");
}

TEST_CASE("Subgraphs see outer-scope values defined before their node") {
  const std::string body = Out("b") + Node("Add", "x,early", "b");
  ModelProto ok =
      Model(In("c") + In("x") + Out("y") + Node("Relu", "x", "early") +
            Node("If", "c", "y", GraphAttr("then_branch", body) + GraphAttr("else_branch", body)));
  CHECK_NOTHROW(CheckModel(ok));
  ModelProto late =
      Model(In("c") + In("x") + Out("y") +
            Node("If", "c", "y", GraphAttr("then_branch", body) + GraphAttr("else_branch", body)) +
            Node("Relu", "x", "early"));
  CHECK(Contains(CheckError(late),
                 "node 0 (If) attribute 'then_branch' > graph 'then_branch': "
                 "node 0 (Add): input 1 'early' is not a graph input"));
}

TEST_CASE("Node domains must be imported or name a model-local function") {
  CHECK(
      Contains(CheckError(Model(In("x") + Out("y") + Node("Foo", "x", "y", " domain: \"custom\""))),
               "node 0 (custom::Foo): domain 'custom' is not imported in opset_import"));
  CHECK_NOTHROW(CheckModel(Model(In("x") + Out("y") + Node("Foo", "x", "y", " domain: \"custom\""),
                                 "opset_import { domain: \"custom\" version: 1 }")));
  CHECK_NOTHROW(
      CheckModel(Model(In("x") + Out("y") + Node("Relu", "x", "y", " domain: \"ai.onnx\""))));
  const std::string fn =
      "functions { name: \"Double\" domain: \"local\" input: \"a\" output: \"b\" "
      "opset_import { domain: \"\" version: 18 } node { op_type: \"Add\" input: \"a\" input: "
      "\"a\" output: \"b\" } }";
  CHECK_NOTHROW(
      CheckModel(Model(In("x") + Out("y") + Node("Double", "x", "y", " domain: \"local\""), fn)));
}

TEST_CASE("Model-local functions must not be recursive") {
  const std::string fns =
      "functions { name: \"F\" domain: \"local\" input: \"a\" output: \"b\" node { op_type: "
      "\"G\" domain: \"local\" input: \"a\" output: \"b\" } } "
      "functions { name: \"G\" domain: \"local\" input: \"a\" output: \"b\" node { op_type: "
      "\"F\" domain: \"local\" input: \"a\" output: \"b\" } }";
  CHECK(Contains(
      CheckError(Model(In("x") + Out("y") + Node("F", "x", "y", " domain: \"local\""), fns)),
      "model-local function 'local::F' is recursive (local::F -> local::G -> "
      "local::F)"));
}

TEST_CASE("Attribute fields must agree with the attribute type") {
  CHECK(Contains(CheckError(Model(In("x") + Out("y") +
                                  Node("LeakyRelu", "x", "y",
                                       " attribute { name: \"alpha\" type: INT f: 0.1 }"))),
                 "node 0 (LeakyRelu) attribute 'alpha' has type INT but sets field 'f'"));
  CHECK(Contains(CheckError(Model(In("x") + Out("y") +
                                  Node("LeakyRelu", "x", "y",
                                       " attribute { name: \"alpha\" type: FLOAT f: 0.1 i: 2 }"))),
                 "attribute 'alpha' sets more than one value field ('f' and 'i')"));
  CHECK(Contains(
      CheckError(Model(In("x") + Out("y") +
                       Node("LeakyRelu", "x", "y", " attribute { name: \"alpha\" f: 0.1 }"))),
      "attribute 'alpha' has no type"));
  CHECK_NOTHROW(CheckModel(
      Model(In("x") + Out("y") +
            Node("LeakyRelu", "x", "y", " attribute { name: \"alpha\" type: FLOAT f: 0.1 }"))));
}

TEST_CASE("ir_version must be present") {
  ModelProto model = Model(In("x") + Out("y") + Node("Relu", "x", "y"));
  model.clear_ir_version();
  CHECK(CheckError(model) == "model has no ir_version");
}

TEST_CASE("Function bodies are checked with their own scope and attribute references") {
  const std::string call = In("x") + Out("y") +
                           Node("Scale", "x", "y",
                                " domain: \"local\" attribute { name: \"alpha\" type: FLOAT "
                                "f: 2 }");
  const std::string fn_head =
      "functions { name: \"Scale\" domain: \"local\" input: \"a\" output: \"b\" attribute: "
      "\"alpha\" ";
  const std::string leaky =
      "node { op_type: \"LeakyRelu\" input: \"a\" output: \"b\" attribute { name: \"alpha\" "
      "type: FLOAT ref_attr_name: \"__REF__\" } } }";
  auto with_ref = [&](const std::string& ref) {
    std::string f = fn_head + leaky;
    f.replace(f.find("__REF__"), 7, ref);
    return Model(call, f);
  };
  CHECK_NOTHROW(CheckModel(with_ref("alpha")));
  CHECK(Contains(CheckError(with_ref("beta")),
                 "function 'local::Scale': node 0 (LeakyRelu) attribute 'alpha' refers to "
                 "'beta', which the function does not declare"));
  // A function body cannot see the caller's values.
  CHECK(Contains(CheckError(Model(call, fn_head + "node { op_type: \"Add\" input: \"a\" input: "
                                                  "\"x\" output: \"b\" } }")),
                 "function 'local::Scale': node 0 (Add): input 1 'x' is not a graph input"));
  CHECK(Contains(CheckError(Model(call, fn_head + "node { op_type: \"Relu\" input: \"a\" "
                                                  "output: \"c\" } }")),
                 "function 'local::Scale': output 'b' is not produced"));
  // ref_attr_name is meaningless in a graph.
  CHECK(Contains(CheckError(Model(In("x") + Out("y") +
                                  Node("LeakyRelu", "x", "y",
                                       " attribute { name: \"alpha\" type: FLOAT "
                                       "ref_attr_name: \"alpha\" }"))),
                 "refers to function attribute 'alpha' outside a function body"));
}
