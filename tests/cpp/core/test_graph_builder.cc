// GraphBuilder (core/graph_builder.h), the standard-ONNX export refusal (core/standard_onnx.h)
// and the legacy graph edits (core/graph_edits.h): spec "Structured feedback" (GraphBuilder
// paragraph) and "Serialized cache values".
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/graph_builder.h"
#include "core/graph_edits.h"
#include "core/standard_onnx.h"
#include "core/text_parser.h"
#include "core/text_printer.h"
#include "onnx_light.pb.h"
#include "tests/cpp/dense_page.h"
#include "tests/cpp/expect_error.h"

using namespace onnx_light;
using namespace onnx_light::core;
using test_util::DensePage;
using test_util::ExpectError;

namespace {

// present = delta + past (bound past <- present), y = -present.
ModelProto FeedbackModel() {
  ModelProto model = ParseModel(R"(<ir_version: 10, opset_import: ["" : 18]>
feedback (float[2] delta, float[2] past) => (float[2] present, float[2] y)
  <float[2] past>
{
  [add] present = Add(delta, past)
  [neg] y = Neg(present)
})");
  auto* b = model.mutable_graph()->add_persistent_bindings();
  b->set_input_name("past");
  b->set_output_name("present");
  return model;
}

// Blocks of capacity 4 holding `lengths` tokens each, keys of width 2, values of width 3.
PagedCacheProto Cache(std::initializer_list<int64_t> lengths) {
  PagedCacheProto cache;
  int64_t start = 0;
  for (int64_t length : lengths) {
    auto* b = cache.add_blocks();
    b->set_start(start);
    b->set_length(length);
    DensePage(b->mutable_key(), 4, 2, static_cast<float>(start));
    DensePage(b->mutable_value(), 4, 3, 100.f + static_cast<float>(start));
    start += length;
  }
  return cache;
}

void AddStructValue(google::protobuf::RepeatedPtrField<ValueInfoProto>* list,
                    const std::string& name) {
  auto* v = list->Add();
  v->set_name(name);
  v->mutable_type()->mutable_struct_type()->set_type_ref("Cache");
}

// next_cache = test.AppendPage(cache, k): a paged cache bound cache <- next_cache, declared
// through ModelProto.struct_types "Cache", with an encoded initializer beside it.
ModelProto PagedModel() {
  ModelProto model;
  model.set_ir_version(10);
  auto* op = model.add_opset_import();
  op->set_version(18);
  op = model.add_opset_import();
  op->set_domain("test");
  op->set_version(1);
  model.add_struct_types()->set_name("Cache");
  GraphProto& g = *model.mutable_graph();
  g.set_name("paged");
  AddStructValue(g.mutable_input(), "cache");
  auto* k = g.add_input();
  k->set_name("k");
  k->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  AddStructValue(g.mutable_output(), "next_cache");
  auto* node = g.add_node();
  node->set_op_type("AppendPage");
  node->set_domain("test");
  node->set_name("append");
  node->add_input("cache");
  node->add_input("k");
  node->add_output("next_cache");
  auto* b = g.add_persistent_bindings();
  b->set_input_name("cache");
  b->set_output_name("next_cache");
  auto* e = g.add_encoded_initializer();
  e->set_name("codes");
  e->mutable_affine()->set_storage_type(TensorProto::INT8);
  e->set_raw_data("\x01\x02");
  PagedCacheProto cache = Cache({3});
  cache.set_name("cache");
  *g.add_paged_cache_initializer() = cache;
  return model;
}

}  // namespace

TEST_CASE("Import and Export preserve bindings, caches, encoded initializers and struct types") {
  const ModelProto model = PagedModel();
  const ModelProto exported = GraphBuilder::Import(model).Export();
  CHECK(exported.SerializeAsString() == model.SerializeAsString());
  CHECK(exported.graph().persistent_bindings(0).output_name() == "next_cache");
  CHECK(exported.graph().paged_cache_initializer(0).blocks(0).key().raw_data() ==
        model.graph().paged_cache_initializer(0).blocks(0).key().raw_data());
  CHECK(exported.graph().input(0).type().struct_type().type_ref() == "Cache");
  const ModelProto feedback = FeedbackModel();
  CHECK(GraphBuilder::Import(feedback).Export().SerializeAsString() ==
        feedback.SerializeAsString());
}

TEST_CASE("Import validates the model, its bindings and its cache initializers") {
  ModelProto model = FeedbackModel();
  model.mutable_graph()->mutable_persistent_bindings(0)->set_input_name("gone");
  ExpectError([&] { GraphBuilder::Import(model); }, ErrorCode::kInvalidModel,
              {"GraphBuilder::Import", "persistent binding 0", "unknown input name 'gone'"});
  ModelProto paged = PagedModel();
  paged.mutable_graph()->mutable_paged_cache_initializer(0)->mutable_blocks(0)->set_length(9);
  ExpectError(
      [&] { GraphBuilder::Import(paged); }, ErrorCode::kInvalidModel,
      {"paged_cache_initializer 'cache.blocks[0]'", "length 9 exceeds the page capacity 4"});
}

TEST_CASE("RenameInput moves every use, the binding, value_info and the default") {
  auto builder = GraphBuilder::Import(FeedbackModel());
  builder.RenameInput("past", "history");
  const ModelProto m = builder.Export();
  const GraphProto& g = m.graph();
  CHECK(g.input(1).name() == "history");
  CHECK(g.node(0).input(1) == "history");
  CHECK(g.value_info(0).name() == "history");
  CHECK(g.persistent_bindings(0).input_name() == "history");
  CHECK(g.persistent_bindings(0).output_name() == "present");

  auto paged = GraphBuilder::Import(PagedModel());
  paged.RenameInput("cache", "kv");
  const ModelProto p = paged.Export();
  CHECK(p.graph().paged_cache_initializer(0).name() == "kv");
  CHECK(p.graph().node(0).input(0) == "kv");
  CHECK(p.graph().persistent_bindings(0).input_name() == "kv");
  ExpectError([&] { builder.RenameInput("delta", "present"); }, ErrorCode::kInvalidArgument,
              {"RenameInput", "'present' is already a value name"});
  ExpectError([&] { builder.RenameInput("nope", "x"); }, ErrorCode::kInvalidArgument,
              "'nope' is not a graph input");
}

TEST_CASE("RenameOutput moves the producing node output, its uses and the binding") {
  auto builder = GraphBuilder::Import(FeedbackModel());
  builder.RenameOutput("present", "next");
  const ModelProto m = builder.Export();
  CHECK(m.graph().output(0).name() == "next");
  CHECK(m.graph().node(0).output(0) == "next");
  CHECK(m.graph().node(1).input(0) == "next");
  CHECK(m.graph().persistent_bindings(0).output_name() == "next");
  ExpectError([&] { builder.RenameOutput("delta", "d"); }, ErrorCode::kInvalidArgument,
              "'delta' is not a graph output");
}

TEST_CASE("A direct rename leaves a dangling binding that Export rejects, naming it") {
  auto builder = GraphBuilder::Import(FeedbackModel());
  builder.mutable_graph()->mutable_input(1)->set_name("renamed");
  builder.mutable_graph()->mutable_node(0)->set_input(1, "renamed");
  ExpectError([&] { builder.Export(); }, ErrorCode::kInvalidModel,
              {"GraphBuilder::Export", "persistent binding 0 (input 'past' <- output 'present')",
               "unknown input name 'past'"});
  auto outputs = GraphBuilder::Import(FeedbackModel());
  outputs.mutable_graph()->mutable_output(0)->set_name("p2");
  outputs.mutable_graph()->mutable_node(0)->set_output(0, "p2");
  outputs.mutable_graph()->mutable_node(1)->set_input(0, "p2");
  ExpectError([&] { outputs.Export(); }, ErrorCode::kInvalidModel,
              {"persistent binding 0", "unknown output name 'present'"});
}

TEST_CASE("AddNode and RemoveNode keep the graph sorted and refuse to orphan a value") {
  auto builder = GraphBuilder::Import(FeedbackModel());
  builder.AddNode(ParseNode("[abs] z = Abs(y)"));
  ValueInfoProto z;
  z.set_name("z");
  builder.AddOutput(z);
  CHECK(builder.Export().graph().node(2).name() == "abs");
  ExpectError([&] { builder.AddNode(ParseNode("[again] z = Abs(y)")); },
              ErrorCode::kInvalidArgument, {"AddNode 'again'", "output 'z' is already defined"});
  ExpectError([&] { builder.RemoveNode("neg"); }, ErrorCode::kInvalidArgument,
              {"RemoveNode 'neg'", "output 'y' is still used by", "node 2 (Abs 'abs')",
               "graph output 'y'"});
  ExpectError(
      [&] { builder.RemoveNode("add"); }, ErrorCode::kInvalidArgument,
      {"output 'present'", "graph output 'present'", "persistent binding 'past' <- 'present'"});
  ExpectError([&] { builder.RemoveNode("missing"); }, ErrorCode::kInvalidArgument,
              "no node has that name");
  builder.RemoveOutput("z");
  builder.RemoveNode("abs");
  CHECK(builder.Export().SerializeAsString() == FeedbackModel().SerializeAsString());

  // A node producing a value an existing node reads goes before that reader.
  auto sorted = GraphBuilder::Import(FeedbackModel());
  sorted.mutable_graph()->mutable_node(1)->set_input(0, "t");
  sorted.AddNode(ParseNode("[copy] t = Identity(present)"));
  const ModelProto m = sorted.Export();
  CHECK(m.graph().node(1).name() == "copy");
  CHECK(m.graph().node(2).name() == "neg");
}

TEST_CASE("Inputs, outputs and initializers are added and removed under the binding rules") {
  auto builder = GraphBuilder::Import(FeedbackModel());
  ExpectError([&] { builder.RemoveInput("past"); }, ErrorCode::kInvalidArgument,
              {"RemoveInput 'past'", "bound by persistent binding 'past' <- 'present'"});
  ExpectError([&] { builder.RemoveInput("delta"); }, ErrorCode::kInvalidArgument,
              {"RemoveInput 'delta'", "still used by node 0 (Add 'add')"});
  ExpectError([&] { builder.RemoveOutput("present"); }, ErrorCode::kInvalidArgument,
              {"RemoveOutput 'present'", "bound by persistent binding"});
  TensorProto w;
  w.set_name("delta");
  w.set_data_type(TensorProto::FLOAT);
  w.add_dims(2);
  w.add_float_data(1.f);
  w.add_float_data(2.f);
  builder.AddInitializer(w);  // a default of input 'delta'
  ExpectError([&] { builder.AddInitializer(w); }, ErrorCode::kInvalidArgument,
              {"AddInitializer", "'delta' is already used by initializer",
               "unique across all initializer categories"});
  builder.RemoveInput("delta");  // the default now supplies the value as a constant
  CHECK(builder.Export().graph().input_size() == 1);
  ExpectError([&] { builder.RemoveInitializer("delta"); }, ErrorCode::kInvalidArgument,
              {"RemoveInitializer 'delta'", "still used by node 0"});
  ValueInfoProto delta;
  delta.set_name("delta");
  builder.AddInput(delta);
  builder.RemoveInitializer("delta");
  ExpectError([&] { builder.AddInput(delta); }, ErrorCode::kInvalidArgument,
              "'delta' is already a graph input");
  ValueInfoProto nowhere;
  nowhere.set_name("nowhere");
  ExpectError([&] { builder.AddOutput(nowhere); }, ErrorCode::kInvalidArgument,
              "'nowhere' is not produced by any node, input or initializer");
  CHECK(builder.Export().graph().initializer_size() == 0);
}

TEST_CASE(
    "AddPersistentBinding is checked by CheckPersistentBindings and changes nothing if refused") {
  ModelProto model = FeedbackModel();
  model.mutable_graph()->clear_persistent_bindings();
  auto builder = GraphBuilder::Import(model);
  ExpectError([&] { builder.AddPersistentBinding("past", "nothing"); }, ErrorCode::kInvalidArgument,
              {"AddPersistentBinding", "unknown output name 'nothing'"});
  CHECK(builder.model().graph().persistent_bindings_size() == 0);
  builder.AddPersistentBinding("past", "present");
  ExpectError([&] { builder.AddPersistentBinding("past", "y"); }, ErrorCode::kInvalidArgument,
              {"AddPersistentBinding", "duplicate binding input name 'past'"});
  CHECK(builder.model().graph().persistent_bindings_size() == 1);
  CHECK(builder.Export().SerializeAsString() == FeedbackModel().SerializeAsString());
  builder.RemovePersistentBinding("past");
  CHECK(builder.Export().graph().persistent_bindings_size() == 0);
  ExpectError([&] { builder.RemovePersistentBinding("past"); }, ErrorCode::kInvalidArgument,
              "no binding has input 'past'");
}

TEST_CASE("MakePagedCacheInitializer adds a validated cache under a new name") {
  ModelProto model = PagedModel();
  model.mutable_graph()->clear_paged_cache_initializer();
  auto builder = GraphBuilder::Import(model);
  builder.MakePagedCacheInitializer("cache", Cache({3, 2}));
  const ModelProto m = builder.Export();
  REQUIRE(m.graph().paged_cache_initializer_size() == 1);
  CHECK(m.graph().paged_cache_initializer(0).name() == "cache");
  CHECK(m.graph().paged_cache_initializer(0).blocks(1).start() == 3);
  ExpectError([&] { builder.MakePagedCacheInitializer("cache", Cache({1})); },
              ErrorCode::kInvalidArgument,
              {"MakePagedCacheInitializer", "'cache' is already used by paged_cache_initializer"});
  ExpectError([&] { builder.MakePagedCacheInitializer("codes", Cache({1})); },
              ErrorCode::kInvalidArgument, "'codes' is already used by encoded_initializer");
  ExpectError([&] { builder.MakePagedCacheInitializer("next_cache", Cache({1})); },
              ErrorCode::kInvalidArgument, "'next_cache' is already a node output");
}

TEST_CASE("MakePagedCacheInitializer rejects invalid caches naming the block and field") {
  auto builder = GraphBuilder::Import(FeedbackModel());
  PagedCacheProto gap = Cache({2, 2});
  gap.mutable_blocks(1)->set_start(3);
  ExpectError([&] { builder.MakePagedCacheInitializer("c", gap); }, ErrorCode::kInvalidArgument,
              {"paged_cache_initializer 'c.blocks[1]'", "start 3 is not contiguous (expected 2)"});
  PagedCacheProto late = Cache({2});
  late.mutable_blocks(0)->set_start(1);
  ExpectError([&] { builder.MakePagedCacheInitializer("c", late); }, ErrorCode::kInvalidArgument,
              {"'c.blocks[0]'", "start 1 is not contiguous"});
  PagedCacheProto long_block = Cache({2});
  long_block.mutable_blocks(0)->set_length(5);
  ExpectError([&] { builder.MakePagedCacheInitializer("c", long_block); },
              ErrorCode::kInvalidArgument,
              {"'c.blocks[0]'", "length 5 exceeds the page capacity 4"});
  PagedCacheProto empty_block = Cache({2});
  empty_block.mutable_blocks(0)->set_length(0);
  ExpectError([&] { builder.MakePagedCacheInitializer("c", empty_block); },
              ErrorCode::kInvalidArgument, {"'c.blocks[0]'", "length 0 is not positive"});
  PagedCacheProto missing = Cache({2, 1});
  missing.mutable_blocks(1)->clear_key();
  ExpectError([&] { builder.MakePagedCacheInitializer("c", missing); }, ErrorCode::kInvalidArgument,
              {"paged_cache_initializer 'c'", "blocks[1]", "missing key payload"});
  PagedCacheProto external = Cache({1});
  external.mutable_blocks(0)->mutable_value()->set_data_location(TensorProto::EXTERNAL);
  ExpectError([&] { builder.MakePagedCacheInitializer("c", external); },
              ErrorCode::kInvalidArgument, {"blocks[0].value", "external page data"});
  PagedCacheProto widths = Cache({1, 1});
  widths.mutable_blocks(1)->clear_key();
  DensePage(widths.mutable_blocks(1)->mutable_key(), 4, 5, 0);
  ExpectError([&] { builder.MakePagedCacheInitializer("c", widths); }, ErrorCode::kInvalidArgument,
              {"'c.blocks[1]'", "widths or heads are inconsistent with earlier blocks"});
  CHECK(builder.model().graph().paged_cache_initializer_size() == 0);
}

TEST_CASE("Standard ONNX export refuses what it cannot preserve, naming it") {
  const ModelProto plain = ParseModel(R"(<ir_version: 10, opset_import: ["" : 18]>
g (float[2] x) => (float[2] y) { y = Relu(x) })");
  CHECK(ExportStandardOnnx(plain) == plain.SerializeAsString());
  CHECK(GraphBuilder::Import(plain).ExportStandardOnnx() == plain.SerializeAsString());
  ExpectError([&] { GraphBuilder::Import(FeedbackModel()).ExportStandardOnnx(); },
              ErrorCode::kInvalidModel,
              {"standard ONNX export cannot preserve",
               "graph.persistent_bindings ('past' <- "
               "'present')"});
  ExpectError([&] { ExportStandardOnnx(PagedModel()); }, ErrorCode::kInvalidModel,
              {"struct_types ('Cache')", "graph.input[0].type.struct_type",
               "graph.encoded_initializer ('codes')",
               "graph.persistent_bindings ('cache' <- "
               "'next_cache')",
               "graph.paged_cache_initializer ('cache')", "refused rather than silently dropped"});
}

TEST_CASE("The ONNX text printer refuses bindings and cache initializers, naming them") {
  ExpectError([&] { PrintModel(FeedbackModel()); }, ErrorCode::kInvalidModel,
              {"ONNX text export cannot preserve",
               "graph.persistent_bindings ('past' <- "
               "'present')"});
  GraphProto cache_only = ParseGraph("g (float[2] x) => (float[2] y) { y = Relu(x) }");
  *cache_only.add_paged_cache_initializer() = Cache({1});
  cache_only.mutable_paged_cache_initializer(0)->set_name("kv");
  ExpectError([&] { PrintGraph(cache_only); }, ErrorCode::kInvalidModel,
              {"GraphProto", "paged_cache_initializer ('kv')"});
}

TEST_CASE("ExtractModel keeps the nodes, initializers and declarations the outputs need") {
  const ModelProto model = ParseModel(R"(<ir_version: 10, opset_import: ["" : 18]>
g (float[2] x, float[2] u) => (float[2] y, float[2] v) <float[2] w = {1, 2}, float[2] t>
{
  [a] t = Add(x, w)
  [r] y = Relu(t)
  [n] v = Neg(u)
})");
  const ModelProto tail = ExtractModel(model, {"t"}, {"y"});
  REQUIRE(tail.graph().node_size() == 1);
  CHECK(tail.graph().node(0).name() == "r");
  CHECK(tail.graph().input(0).name() == "t");
  CHECK(tail.graph().input(0).type().tensor_type().elem_type() == TensorProto::FLOAT);
  CHECK(tail.graph().initializer_size() == 0);
  const ModelProto head = ExtractModel(model, {"x"}, {"t"});
  CHECK(head.graph().node(0).name() == "a");
  CHECK(head.graph().initializer(0).name() == "w");
  CHECK(head.opset_import(0).version() == 18);
  ExpectError([&] { ExtractModel(model, {}, {"y"}); }, ErrorCode::kInvalidArgument,
              "depend on graph input 'x', which is not among the extracted inputs");
  ExpectError([&] { ExtractModel(model, {"x"}, {"nope"}); }, ErrorCode::kInvalidArgument,
              "'nope' is not a value of graph 'g'");
}

TEST_CASE("AddPrefix renames every value and node, MergeModels connects two models") {
  const ModelProto relu = ParseModel(R"(<ir_version: 10, opset_import: ["" : 18]>
g (float[2] x) => (float[2] y) <float[2] w = {1, 2}> { [r] y = Add(x, w) })");
  const ModelProto p = AddPrefix(relu, "a/");
  CHECK(p.graph().input(0).name() == "a/x");
  CHECK(p.graph().output(0).name() == "a/y");
  CHECK(p.graph().initializer(0).name() == "a/w");
  CHECK(p.graph().node(0).name() == "a/r");
  CHECK(p.graph().node(0).input(1) == "a/w");

  const ModelProto merged = MergeModels(relu, AddPrefix(relu, "b/"), {{"y", "b/x"}});
  const GraphProto& g = merged.graph();
  REQUIRE(g.node_size() == 2);
  CHECK(g.node(1).input(0) == "y");
  CHECK(g.input_size() == 1);
  CHECK(g.output_size() == 1);
  CHECK(g.output(0).name() == "b/y");
  CHECK(g.initializer_size() == 2);
  ExpectError(
      [&] {
        MergeModels(relu, relu, {{"y", "x"}});
      },
      ErrorCode::kInvalidArgument, {"both models use the value names 'w'", "AddPrefix"});
  ExpectError(
      [&] {
        MergeModels(relu, relu, {{"x", "x"}});
      },
      ErrorCode::kInvalidArgument, "io_map source 'x' is not an output of the first model");
}

TEST_CASE("Extraction, prefixing and merging reject cache initializers and bindings") {
  ModelProto cache_only = PagedModel();
  cache_only.mutable_graph()->clear_persistent_bindings();
  ExpectError(
      [&] {
        ExtractModel(cache_only, {"cache", "k"}, {"next_cache"});
      },
      ErrorCode::kInvalidModel,
      {"ExtractModel cannot preserve paged_cache_initializer 'cache'",
       "use GraphBuilder for supported graph edits"});
  ExpectError([&] { AddPrefix(cache_only, "p/"); }, ErrorCode::kInvalidModel,
              "AddPrefix cannot preserve paged_cache_initializer 'cache'");
  const ModelProto plain = ParseModel(R"(<ir_version: 10, opset_import: ["" : 18]>
g (float[2] x) => (float[2] y) { y = Relu(x) })");
  ExpectError([&] { MergeModels(plain, cache_only, {}); }, ErrorCode::kInvalidModel,
              "MergeModels (second model) cannot preserve paged_cache_initializer 'cache'");
  ExpectError([&] { AddPrefix(FeedbackModel(), "p/"); }, ErrorCode::kInvalidModel,
              "AddPrefix cannot preserve persistent binding 'past' <- 'present'");
}
