// LightOpSchema and its use by CheckModel and InferTypes (spec "Versioned operator schema",
// "Selected-block quantization": the schema sentences of ai.rt::PagedAttention and
// ai.rt::QuantizePagedCache, opset 1).
#include <doctest/doctest.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "core/checker.h"
#include "core/error.h"
#include "core/op_schema.h"
#include "core/type_inference.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"
#include "tests/cpp/expect_error.h"

using namespace onnx_light;
using namespace onnx_light::core;
using test_util::ExpectError;

namespace {

// A tensor type: elem type and comma-separated dims ("B,8,L,16"; digits are concrete,
// "?" unknown, anything else symbolic). `dims` = "-" leaves the rank unknown.
std::string T(int elem, const std::string& dims = "-") {
  std::string s = "tensor_type { elem_type: " + std::to_string(elem);
  if (dims == "-") return s + " }";
  s += " shape {";
  size_t start = 0;
  while (!dims.empty() && start <= dims.size()) {
    size_t end = dims.find(',', start);
    if (end == std::string::npos) end = dims.size();
    const std::string d = dims.substr(start, end - start);
    if (d == "?")
      s += " dim { }";
    else if (std::isdigit(static_cast<unsigned char>(d[0])))
      s += " dim { dim_value: " + d + " }";
    else
      s += " dim { dim_param: \"" + d + "\" }";
    start = end + 1;
  }
  return s + " } }";
}

const std::string kLayoutless = "struct_type { name: \"cache\" }";
const std::string kCacheRef = "struct_type { type_ref: \"PagedCache\" }";
// ModelProto.struct_types: the named cache fields, the cache referring to its block type.
const std::string kCatalogue =
    "struct_types { name: \"PagedCache\" field { name: \"blocks\" type { sequence_type { "
    "elem_type { struct_type { type_ref: \"PagedBlock\" } } } } } } "
    "struct_types { name: \"PagedBlock\" "
    "field { name: \"start\" type { tensor_type { elem_type: 7 shape { } } } } "
    "field { name: \"length\" type { tensor_type { elem_type: 7 shape { } } } } "
    "field { name: \"key\" type { tensor_type { elem_type: 1 } } } "
    "field { name: \"value\" type { tensor_type { elem_type: 1 } } } }";

std::string Input(const std::string& name, const std::string& type) {
  return " input { name: \"" + name + "\" type { " + type + " } }";
}
std::string Output(const std::string& name, const std::string& type = "") {
  return " output { name: \"" + name + "\"" + (type.empty() ? "" : " type { " + type + " }") + " }";
}
std::string IntAttr(const std::string& name, int64_t v) {
  return " attribute { name: \"" + name + "\" type: INT i: " + std::to_string(v) + " }";
}
std::string Node(const std::string& op, std::vector<std::string> inputs,
                 std::vector<std::string> outputs, const std::string& extra = "",
                 const std::string& name = "attn") {
  std::string s = " node { op_type: \"" + op + "\" domain: \"ai.rt\" name: \"" + name + "\"";
  for (const auto& i : inputs) s += " input: \"" + i + "\"";
  for (const auto& o : outputs) s += " output: \"" + o + "\"";
  return s + extra + " }";
}

ModelProto Model(const std::string& graph_body, const std::string& extra = "") {
  ModelProto model;
  const std::string text =
      "ir_version: 10 opset_import { domain: \"\" version: 18 } "
      "opset_import { domain: \"ai.rt\" version: 1 } " +
      extra + " graph { name: \"main\" " + graph_body + " }";
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text, &model));
  return model;
}

std::string TextOf(const google::protobuf::Message& m) {
  std::string s;
  google::protobuf::TextFormat::PrintToString(m, &s);
  return s;
}

TypeProto Type(const std::string& text) {
  TypeProto t;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text, &t));
  return t;
}

// PagedAttention(q, k, v, past) -> (y, present) over the given input types.
ModelProto Attention(const std::string& q, const std::string& k, const std::string& v,
                     const std::string& past = kLayoutless, const std::string& attrs = "",
                     const std::string& outputs = Output("y") + Output("present"),
                     const std::string& extra = "") {
  return Model(Input("q", q) + Input("k", k) + Input("v", v) + Input("past", past) +
                   Node("PagedAttention", {"q", "k", "v", "past"}, {"y", "present"}, attrs) +
                   outputs,
               extra);
}

ModelProto DefaultAttention(const std::string& attrs = "") {
  return Attention(T(1, "B,8,L,16"), T(1, "B,2,L,16"), T(1, "B,2,L,32"), kLayoutless, attrs);
}

const std::string kNode = "graph 'main': node 0 (ai.rt::PagedAttention 'attn'): ";

void ExpectInvalid(const ModelProto& model, const std::string& message) {
  ExpectError([&] { CheckModel(model); }, ErrorCode::kInvalidModel, message);
  ModelProto copy = model;
  ExpectError([&] { InferTypes(copy); }, ErrorCode::kInvalidModel, message);
}

// The type InferTypes records for `name` (graph output or value_info).
TypeProto Inferred(const ModelProto& model, const std::string& name) {
  for (const auto& v : model.graph().output())
    if (v.name() == name && v.has_type()) return v.type();
  for (const auto& v : model.graph().value_info())
    if (v.name() == name) return v.type();
  FAIL("no type recorded for " << name);
  return {};
}

bool Same(const TypeProto& a, const TypeProto& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace

TEST_CASE("PagedAttention has its own versioned schema at ai.rt opset 1") {
  const LightOpSchema* s = LightSchemaRegistry::Get("ai.rt", "PagedAttention", 1);
  REQUIRE(s != nullptr);
  CHECK(s->domain() == "ai.rt");
  CHECK(s->op_type() == "PagedAttention");
  CHECK(s->since_version() == 1);
  CHECK(s->Label() == "ai.rt::PagedAttention (opset 1)");
  std::vector<std::string> names;
  for (const auto& p : s->inputs()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"Q", "K", "V", "past"});
  names.clear();
  for (const auto& p : s->outputs()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"Y", "present"});
  // All attributes optional, with the spec's defaults.
  std::vector<std::pair<std::string, int64_t>> defaults;
  for (const auto& a : s->attributes()) {
    CHECK_FALSE(a.required);
    CHECK(a.type == AttributeProto::INT);
    REQUIRE(a.default_value.has_value());
    defaults.emplace_back(a.name, a.default_value->i());
  }
  CHECK(defaults ==
        std::vector<std::pair<std::string, int64_t>>{
            {"block_size", 16}, {"max_tokens", 4096}, {"is_causal", 1}, {"left_window_size", -1}});
  // In force from version 1 on; nothing before; other domains and ops have none.
  CHECK(LightSchemaRegistry::Get("ai.rt", "PagedAttention", 3) == s);
  CHECK(LightSchemaRegistry::Get("ai.rt", "PagedAttention", 0) == nullptr);
  CHECK(LightSchemaRegistry::Get("", "PagedAttention", 1) == nullptr);
  CHECK(LightSchemaRegistry::Get("ai.rt", "Attention", 1) == nullptr);
}

TEST_CASE("QuantizePagedCache's opset-1 signature takes six inputs and no attributes") {
  const LightOpSchema* s = LightSchemaRegistry::Get("ai.rt", "QuantizePagedCache", 1);
  REQUIRE(s != nullptr);
  std::vector<std::string> names;
  for (const auto& p : s->inputs()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"cache", "block_indices", "key_scale", "key_zero_point",
                                          "value_scale", "value_zero_point"});
  REQUIRE(s->outputs().size() == 1);
  CHECK(s->outputs()[0].name == "quantized_cache");
  CHECK(s->attributes().empty());
}

TEST_CASE("the registry returns the newest schema in force and refuses duplicates") {
  auto& registry = LightSchemaRegistry::Instance();
  registry.Register(LightOpSchema("test.versions", "Op", 1));
  registry.Register(LightOpSchema("test.versions", "Op", 3));
  CHECK(LightSchemaRegistry::Get("test.versions", "Op", 0) == nullptr);
  CHECK(LightSchemaRegistry::Get("test.versions", "Op", 1)->since_version() == 1);
  CHECK(LightSchemaRegistry::Get("test.versions", "Op", 2)->since_version() == 1);
  CHECK(LightSchemaRegistry::Get("test.versions", "Op", 7)->since_version() == 3);
  ExpectError([&] { registry.Register(LightOpSchema("test.versions", "Op", 3)); },
              ErrorCode::kInvalidArgument,
              "a schema for test.versions::Op (opset 3) is already registered");
  // "" and "ai.onnx" are one domain.
  registry.Register(LightOpSchema("ai.onnx", "TestDefaultDomainOp", 1));
  CHECK(LightSchemaRegistry::Get("", "TestDefaultDomainOp", 1) != nullptr);
}

TEST_CASE("absent attributes take their defaults, given ones are checked") {
  const LightOpSchema* s = LightSchemaRegistry::Get("ai.rt", "PagedAttention", 1);
  ModelProto model = DefaultAttention(IntAttr("is_causal", 0));
  InferenceContext ctx(model.graph().node(0), {}, &model, "n");
  s->Verify(ctx);
  CHECK(ctx.attribute("block_size")->i() == 16);
  CHECK(ctx.attribute("max_tokens")->i() == 4096);
  CHECK(ctx.attribute("left_window_size")->i() == -1);
  CHECK(ctx.attribute("is_causal")->i() == 0);
  CHECK(ctx.attribute("mask") == nullptr);

  CheckModel(DefaultAttention(IntAttr("block_size", 1) + IntAttr("max_tokens", 1) +
                              IntAttr("is_causal", 1) + IntAttr("left_window_size", 0)));
  CheckModel(DefaultAttention(IntAttr("left_window_size", 7)));
  ExpectInvalid(DefaultAttention(IntAttr("block_size", 0)),
                kNode + "attribute 'block_size' must be positive, got 0");
  ExpectInvalid(DefaultAttention(IntAttr("max_tokens", -4)),
                kNode + "attribute 'max_tokens' must be positive, got -4");
  ExpectInvalid(DefaultAttention(IntAttr("is_causal", 2)),
                kNode + "attribute 'is_causal' must be 0 or 1, got 2");
  ExpectInvalid(DefaultAttention(IntAttr("is_causal", -1)),
                kNode + "attribute 'is_causal' must be 0 or 1, got -1");
  ExpectInvalid(DefaultAttention(IntAttr("left_window_size", -2)),
                kNode +
                    "attribute 'left_window_size' must be -1 (unbounded) or non-negative, "
                    "got -2");
}

TEST_CASE("any other attribute, and an attribute of the wrong type, is rejected") {
  ExpectInvalid(DefaultAttention(IntAttr("num_heads", 8)),
                kNode +
                    "attribute 'num_heads' is not an attribute of ai.rt::PagedAttention "
                    "(opset 1) (attributes: block_size, max_tokens, is_causal, "
                    "left_window_size)");
  ExpectInvalid(DefaultAttention(" attribute { name: \"block_size\" type: FLOAT f: 16 }"),
                kNode + "attribute 'block_size' must be INT, got FLOAT");
  // Physical cache storage is deliberately not an attribute.
  ExpectInvalid(DefaultAttention(" attribute { name: \"key_format\" type: STRING s: \"INT8\" }"),
                kNode + "attribute 'key_format' is not an attribute");
}

TEST_CASE("input and output counts follow the signature") {
  const std::string in =
      Input("q", T(1)) + Input("k", T(1)) + Input("v", T(1)) + Input("past", kLayoutless);
  ExpectInvalid(Model(in + Node("PagedAttention", {"q", "k", "v"}, {"y", "present"}) + Output("y")),
                kNode + "required input 3 (past) is missing (inputs: Q, K, V, past)");
  ExpectInvalid(
      Model(in + Node("PagedAttention", {"q", "k", "v", ""}, {"y", "present"}) + Output("y")),
      kNode + "required input 3 (past) has an empty name");
  ExpectInvalid(Model(in + Node("PagedAttention", {"q", "k", "v", "past", "q"}, {"y", "present"}) +
                      Output("y")),
                kNode + "takes at most 4 inputs (Q, K, V, past), got 5");
  ExpectInvalid(Model(in + Node("PagedAttention", {"q", "k", "v", "past"}, {"y"}) + Output("y")),
                kNode + "required output 1 (present) is missing (outputs: Y, present)");
}

TEST_CASE("Q/K/V are FLOAT, FLOAT16 or BFLOAT16 tensors of rank 4") {
  for (int elem : {1, 10, 16}) CheckModel(Attention(T(elem, "1,2,3,4"), T(elem), T(elem)));
  ExpectInvalid(Attention(T(6, "1,2,3,4"), T(1), T(1)),
                kNode +
                    "input 0 'q' (Q) has element type INT32, expected one of FLOAT, "
                    "FLOAT16, BFLOAT16");
  ExpectInvalid(Attention(T(1), T(11), T(1)),
                kNode +
                    "input 1 'k' (K) has element type DOUBLE, expected one of FLOAT, "
                    "FLOAT16, BFLOAT16");
  ExpectInvalid(Attention(T(1), T(1), T(1, "2,3,4")),
                kNode + "input 2 'v' (V) must have rank 4, got rank 3");
  ExpectInvalid(Attention(kLayoutless, T(1), T(1)),
                kNode + "input 0 'q' (Q) must be a tensor, got a struct");
  ExpectInvalid(Attention(T(1, "1,2,3,4"), T(1), T(1), kLayoutless, "",
                          Output("y", T(1, "1,2,3")) + Output("present")),
                kNode + "declared output 0 'y' (Y) must have rank 4, got rank 3");
  ExpectInvalid(Attention(T(1), T(1), T(1), kLayoutless, "", Output("y", T(6)) + Output("present")),
                kNode +
                    "declared output 0 'y' (Y) has element type INT32, expected one of FLOAT, "
                    "FLOAT16, BFLOAT16");
}

TEST_CASE("Q/K/V share batch and new-token dimensions, K/V heads, Q heads are a multiple") {
  ExpectInvalid(Attention(T(1, "2,8,1,16"), T(1, "3,2,1,16"), T(1, "B,2,1,16")),
                kNode + "Q 'q' and K 'k' must have the same batch size (dimension 0): 2 vs 3");
  ExpectInvalid(Attention(T(1, "B,8,1,16"), T(1, "B,2,?,16"), T(1, "B,2,4,16")),
                kNode +
                    "Q 'q' and V 'v' must have the same new-token length (dimension 2): "
                    "1 vs 4");
  ExpectInvalid(Attention(T(1, "B,8,L,16"), T(1, "B,2,L,16"), T(1, "B,4,L,16")),
                kNode + "K 'k' and V 'v' must have the same head count (dimension 1): 2 vs 4");
  ExpectInvalid(Attention(T(1, "B,6,L,16"), T(1, "B,4,L,16"), T(1, "B,H,L,16")),
                kNode +
                    "the head count 6 of Q 'q' must be a multiple of the K/V head count 4 "
                    "of K 'k'");
  ExpectInvalid(Attention(T(1, "B,6,L,16"), T(1, "B,H,L,16"), T(1, "B,4,L,16")),
                "the head count 6 of Q 'q' must be a multiple of the K/V head count 4 of V 'v'");
  // Grouped-query attention, equal heads, and symbolic or unknown dimensions pass.
  CheckModel(Attention(T(1, "2,8,3,16"), T(1, "2,2,3,16"), T(1, "2,2,3,32")));
  CheckModel(Attention(T(1, "2,4,3,16"), T(1, "2,4,3,16"), T(1, "2,4,3,16")));
  CheckModel(Attention(T(1, "B,H,L,D"), T(1, "C,G,M,D"), T(1, "?,?,?,?")));
  CheckModel(Attention(T(1), T(1), T(1)));
}

TEST_CASE("past is declared as a paged cache: layout-less, or the named cache fields") {
  CheckModel(Attention(T(1), T(1), T(1), kLayoutless));
  CheckModel(
      Attention(T(1), T(1), T(1), kCacheRef, "", Output("y") + Output("present"), kCatalogue));
  // The named fields written directly in the declaration.
  const std::string block =
      "struct_type { field { name: \"start\" type { tensor_type { elem_type: 7 } } } "
      "field { name: \"length\" type { tensor_type { elem_type: 7 } } } "
      "field { name: \"key\" type { tensor_type { elem_type: 1 } } } "
      "field { name: \"value\" type { tensor_type { elem_type: 1 } } } }";
  const std::string direct =
      "struct_type { name: \"cache\" field { name: \"blocks\" type { "
      "sequence_type { elem_type { " +
      block + " } } } } }";
  CheckModel(Attention(T(1), T(1), T(1), direct));

  const std::string past = kNode +
                           "input 3 'past' (past) must be declared as a paged cache "
                           "struct: ";
  ExpectInvalid(Attention(T(1), T(1), T(1), T(1)), past + "not a struct declaration");
  ExpectInvalid(
      Attention(T(1), T(1), T(1), "struct_type { field { name: \"a\" type { " + T(1) + " } } }"),
      past + "a paged cache struct has exactly one field 'blocks'");
  // Array layouts are not cache declarations.
  ExpectInvalid(Attention(T(1), T(1), T(1),
                          "struct_type { field { name: \"blocks\" type { " + T(1) + " } } }"),
                past + "field 'blocks' is not a typed sequence");
  std::string bad_key = direct;
  bad_key.replace(bad_key.find("name: \"key\" type { tensor_type { elem_type: 1"),
                  std::string("name: \"key\" type { tensor_type { elem_type: 1").size(),
                  "name: \"key\" type { tensor_type { elem_type: 10");
  ExpectInvalid(Attention(T(1), T(1), T(1), bad_key),
                past + "block field 'key' has element type FLOAT16, expected FLOAT");
  std::string no_value = direct;
  no_value.replace(no_value.find("name: \"value\""), 13, "name: \"val\"");
  ExpectInvalid(Attention(T(1), T(1), T(1), no_value),
                past + "a block must have exactly the fields start, length, key and value");
  ExpectInvalid(Attention(T(1), T(1), T(1), "struct_type { type_ref: \"Missing\" }"),
                kNode +
                    "input 3 'past' (past): struct type_ref 'Missing' is not declared in "
                    "ModelProto.struct_types");
}

TEST_CASE(
    "past may be a sequence of row caches (one per batch row): present is inferred as that "
    "sequence, a struct present or a sequence of non-caches is rejected, declared page dims "
    "are checked") {
  const std::string rows = "sequence_type { elem_type { " + kLayoutless + " } }";
  ModelProto model = Attention(T(1, "B,8,1,16"), T(1, "B,2,1,16"), T(1, "B,2,1,32"), rows);
  InferTypes(model);
  CHECK(TextOf(Inferred(model, "present")) == TextOf(Type(rows)));
  CheckModel(Attention(T(1), T(1), T(1), "sequence_type { elem_type { " + kCacheRef + " } }", "",
                       Output("y") + Output("present"), kCatalogue));
  // A struct present for a sequence past: the kinds differ.
  ExpectInvalid(Attention(T(1), T(1), T(1), rows, "", Output("y") + Output("present", kLayoutless)),
                kNode + "output 1 'present' (present): the kinds of type differ");
  ExpectInvalid(Attention(T(1), T(1), T(1), "sequence_type { elem_type { " + T(1) + " } }"),
                kNode +
                    "input 3 'past' (past) must be declared as a sequence of paged cache structs "
                    "(one per batch row): not a struct declaration");
  // QuantizePagedCache takes a single cache only.
  ModelProto quantize = Model(
      Input("cache", rows) + Input("idx", T(7, "1")) + Input("ks", T(1, "")) +
      Input("kz", T(3, "")) + Input("vs", T(1, "")) + Input("vz", T(3, "")) +
      Node("QuantizePagedCache", {"cache", "idx", "ks", "kz", "vs", "vz"}, {"q"}, "", "quant") +
      Output("q"));
  ExpectError([&] { CheckModel(quantize); }, ErrorCode::kInvalidModel,
              "input 0 'cache' (cache) must be declared as a paged cache struct: not a struct "
              "declaration");
  // Declared page dims [batch, kv_heads, capacity, width] against K/V where concrete.
  auto cache_with_key = [](const std::string& key_dims) {
    return "struct_type { field { name: \"blocks\" type { sequence_type { elem_type { "
           "struct_type { field { name: \"start\" type { " +
           T(7, "") + " } } field { name: \"length\" type { " + T(7, "") +
           " } } field { name: \"key\" type { " + T(1, key_dims) +
           " } } field { name: \"value\" type { " + T(1) + " } } } } } } } }";
  };
  const std::string q = T(1, "4,8,1,16"), k = T(1, "4,2,1,16"), v = T(1, "4,2,1,32");
  CheckModel(
      Attention(q, k, v, "sequence_type { elem_type { " + cache_with_key("1,2,?,16") + " } }"));
  CheckModel(Attention(q, k, v, cache_with_key("4,2,?,16")));
  ExpectInvalid(
      Attention(q, k, v, "sequence_type { elem_type { " + cache_with_key("1,4,?,16") + " } }"),
      kNode +
          "input 3 'past' (past) row caches: declared key pages have 4 KV heads (dimension 1), "
          "but K 'k' has 2");
  ExpectInvalid(
      Attention(q, k, v, "sequence_type { elem_type { " + cache_with_key("4,2,?,16") + " } }"),
      kNode +
          "input 3 'past' (past) row caches: declared key pages have 4 batch rows (dimension 0), "
          "but a row cache holds one batch row");
  ExpectInvalid(Attention(q, k, v, cache_with_key("4,2,?,8")),
                kNode +
                    "input 3 'past' (past): declared key pages have 8 head size (dimension 3), "
                    "but K 'k' has 16");
}

TEST_CASE("inference: Y has Q's batch, heads, length and type and V's head size") {
  ModelProto model = Attention(T(10, "B,8,L,16"), T(10, "B,2,L,16"), T(1, "?,2,L,32"), kLayoutless);
  InferTypes(model);
  CHECK(TextOf(Inferred(model, "y")) == TextOf(Type(T(10, "B,8,L,32"))));

  model = Attention(T(1, "4,8,1,16"), T(1, "4,2,1,16"), T(1, "4,2,1,64"));
  InferTypes(model);
  CHECK(TextOf(Inferred(model, "y")) == TextOf(Type(T(1, "4,8,1,64"))));
}

TEST_CASE("inference with unknown ranks keeps what is known, without an error") {
  ModelProto model = Attention(T(16), T(16), T(1, "B,2,L,D"));
  InferTypes(model);
  CHECK(TextOf(Inferred(model, "y")) == TextOf(Type(T(16, "?,?,?,D"))));

  model = Attention(T(1, "B,8,L,16"), T(1), T(1));
  InferTypes(model);
  CHECK(TextOf(Inferred(model, "y")) == TextOf(Type(T(1, "B,8,L,?"))));

  model = Attention(T(1), T(1), T(1));
  InferTypes(model);
  CHECK(TextOf(Inferred(model, "y")) == TextOf(Type(T(1))));

  // Undeclared inputs (produced by a node without a schema) are unknown, not errors.
  model = Model(Input("x", T(1)) + Input("past", kLayoutless) +
                " node { op_type: \"Identity\" input: \"x\" output: \"q\" }" +
                Node("PagedAttention", {"q", "q", "q", "past"}, {"y", "present"}) + Output("y") +
                Output("present"));
  InferTypes(model);
  CHECK_FALSE(model.graph().output(0).has_type());
  CHECK(TextOf(Inferred(model, "present")) == TextOf(Type(kLayoutless)));
}

TEST_CASE("inference: present preserves past's declaration, references included") {
  ModelProto model =
      Attention(T(1), T(1), T(1), kCacheRef, "", Output("y") + Output("present"), kCatalogue);
  InferTypes(model);
  const TypeProto present = Inferred(model, "present");
  CHECK(Same(present, model.graph().input(3).type()));
  CHECK(present.struct_type().type_ref() == "PagedCache");
  CHECK(present.struct_type().field_size() == 0);  // the reference, not its expansion
  CHECK(model.struct_types_size() == 2);

  model = Attention(T(1), T(1), T(1), kLayoutless);
  InferTypes(model);
  CHECK(TextOf(Inferred(model, "present")) == TextOf(Type(kLayoutless)));
}

TEST_CASE("InferTypes preserves declarations, fills value_info, rejects contradictions") {
  // A declared output keeps its declaration; an undeclared intermediate gets value_info.
  ModelProto model = Model(Input("q", T(1, "B,8,L,16")) + Input("k", T(1, "B,2,L,16")) +
                           Input("v", T(1, "B,2,L,32")) + Input("past", kLayoutless) +
                           Node("PagedAttention", {"q", "k", "v", "past"}, {"attn_y", "present"}) +
                           " node { op_type: \"Identity\" input: \"attn_y\" output: \"y\" }" +
                           Output("y", T(1)) + Output("present", "struct_type { name: \"next\" }"));
  InferTypes(model);
  CHECK(TextOf(model.graph().output(0).type()) == TextOf(Type(T(1))));
  CHECK(model.graph().output(1).type().struct_type().name() == "next");
  REQUIRE(model.graph().value_info_size() == 1);
  CHECK(model.graph().value_info(0).name() == "attn_y");
  CHECK(TextOf(model.graph().value_info(0).type()) == TextOf(Type(T(1, "B,8,L,32"))));
  const std::string once = TextOf(model);
  InferTypes(model);  // idempotent
  CHECK(TextOf(model) == once);

  ExpectInvalid(Attention(T(1, "B,8,L,16"), T(1), T(1, "B,2,L,32"), kLayoutless, "",
                          Output("y", T(10)) + Output("present")),
                kNode +
                    "output 0 'y' (Y): element types differ (FLOAT vs FLOAT16) (inferred vs "
                    "declared type)");
  ExpectInvalid(Attention(T(1, "B,8,L,16"), T(1), T(1, "B,2,L,32"), kLayoutless, "",
                          Output("y", T(1, "B,8,L,99")) + Output("present")),
                kNode + "output 0 'y' (Y): dimension 3 differs (32 vs 99)");
  ExpectInvalid(Attention(T(1), T(1), T(1), kLayoutless, "", Output("y") + Output("present", T(1))),
                kNode +
                    "declared output 1 'present' (present) must be declared as a paged cache "
                    "struct: not a struct declaration");
}

TEST_CASE("input types come from value_info, initializers and earlier inferred outputs") {
  // value_info declares an intermediate produced by a node without a schema.
  ExpectInvalid(Model(Input("x", T(6)) + Input("past", kLayoutless) +
                      " node { op_type: \"Identity\" input: \"x\" output: \"q\" }" +
                      Node("PagedAttention", {"q", "q", "q", "past"}, {"y", "present"}) +
                      Output("y") + " value_info { name: \"q\" type { " + T(6) + " } }"),
                "graph 'main': node 1 (ai.rt::PagedAttention 'attn'): input 0 'q' (Q) has "
                "element type INT32");
  // An initializer's dtype and dims.
  ExpectInvalid(
      Model(Input("q", T(1)) + Input("v", T(1)) + Input("past", kLayoutless) +
            " initializer { name: \"k\" data_type: 1 dims: 2 dims: 2 "
            "raw_data: \"\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000"
            "\\000\\000\\000\\000\" }" +
            Node("PagedAttention", {"q", "k", "v", "past"}, {"y", "present"}) + Output("y")),
      kNode + "input 1 'k' (K) must have rank 4, got rank 2");
  // present inferred by the first node is the second node's past.
  ModelProto chained =
      Model(Input("q", T(1)) + Input("past", kLayoutless) +
            Node("PagedAttention", {"q", "q", "q", "past"}, {"y1", "p1"}) +
            Node("PagedAttention", {"q", "q", "q", "p1"}, {"y2", "p2"}, "", "attn2") +
            Output("y2") + Output("p2"));
  InferTypes(chained);
  CHECK(TextOf(Inferred(chained, "p2")) == TextOf(Type(kLayoutless)));
  ExpectInvalid(Model(Input("q", T(1)) + Input("past", kLayoutless) +
                      Node("PagedAttention", {"q", "q", "q", "past"}, {"y1", "p1"}) +
                      Node("PagedAttention", {"q", "q", "q", "y1"}, {"y2", "p2"}, "", "attn2") +
                      Output("y2")),
                "node 1 (ai.rt::PagedAttention 'attn2'): input 3 'y1' (past) must be declared "
                "as a paged cache struct: not a struct declaration");
}

TEST_CASE("schema'd nodes in subgraphs are checked with their outer scope and inferred") {
  const std::string branch = [](const std::string& attrs) {
    return " attribute { name: \"then_branch\" type: GRAPH g { name: \"then\" " +
           Node("PagedAttention", {"q", "q", "q", "past"}, {"y", "present"}, attrs) + Output("y") +
           " } }"
           " attribute { name: \"else_branch\" type: GRAPH g { name: \"else\" "
           " node { op_type: \"Identity\" input: \"q\" output: \"y\" } " +
           Output("y") + " } }";
  }("");
  ModelProto model =
      Model(Input("c", T(9, "")) + Input("q", T(1, "1,2,3,4")) + Input("past", kLayoutless) +
            " node { op_type: \"If\" input: \"c\" output: \"out\"" + branch + " }" + Output("out"));
  InferTypes(model);
  const GraphProto& then = model.graph().node(0).attribute(0).g();
  CHECK(TextOf(then.output(0).type()) == TextOf(Type(T(1, "1,2,3,4"))));
  REQUIRE(then.value_info_size() == 1);
  CHECK(then.value_info(0).name() == "present");

  // A subgraph input without a type shadows the outer 'q': unknown there, not INT32.
  ModelProto shadowed =
      Model(Input("q", T(6)) + Input("past", kLayoutless) +
            " node { op_type: \"Loop\" input: \"\" input: \"\" output: \"out\""
            " attribute { name: \"body\" type: GRAPH g { name: \"body\" input { name: \"i\" } "
            "input { name: \"cond\" } input { name: \"q\" } " +
            Node("PagedAttention", {"q", "q", "q", "past"}, {"y", "present"}) +
            " node { op_type: \"Identity\" input: \"cond\" output: \"c\" }" + Output("c") +
            " } } }" + Output("out"));
  CheckModel(shadowed);
  shadowed.mutable_graph()
      ->mutable_node(0)
      ->mutable_attribute(0)
      ->mutable_g()
      ->mutable_input(2)
      ->mutable_type()
      ->mutable_tensor_type()
      ->set_elem_type(6);
  ExpectInvalid(shadowed,
                "graph 'body': node 0 (ai.rt::PagedAttention 'attn'): input 0 'q' (Q) "
                "has element type INT32");

  ModelProto broken = model;
  auto* attr = broken.mutable_graph()
                   ->mutable_node(0)
                   ->mutable_attribute(0)
                   ->mutable_g()
                   ->mutable_node(0)
                   ->add_attribute();
  *attr = IntAttribute("block_size", 0);
  ExpectInvalid(broken,
                "graph 'main' > node 0 (If) attribute 'then_branch' > graph 'then': "
                "node 0 (ai.rt::PagedAttention 'attn'): attribute 'block_size' must be "
                "positive, got 0");
}

TEST_CASE("schema'd nodes in model-local functions are checked with the function's opsets") {
  const std::string function =
      " functions { name: \"Decode\" domain: \"local\" input: \"q\" input: \"past\" "
      "output: \"y\" opset_import { domain: \"ai.rt\" version: 1 } " +
      Node("PagedAttention", {"q", "q", "q", "past"}, {"y", "present"}, IntAttr("is_causal", 5)) +
      " }";
  ExpectInvalid(Model(Input("x", T(1)), function),
                "function 'local::Decode': node 0 (ai.rt::PagedAttention 'attn'): attribute "
                "'is_causal' must be 0 or 1, got 5");
}

TEST_CASE("a paged_cache_initializer is a paged-cache declaration for past") {
  ModelProto model = Model(Input("q", T(1)) + " paged_cache_initializer { name: \"past\" }" +
                           Node("PagedAttention", {"q", "q", "q", "past"}, {"y", "present"}) +
                           Output("y") + Output("present"));
  InferTypes(model);
  CHECK(Inferred(model, "present").struct_type().field_size() == 0);
  CHECK(Inferred(model, "present").has_struct_type());
}

TEST_CASE("ai.rt nodes without a schema (custom kernels) are not checked") {
  CheckModel(
      Model(Input("x", T(6)) +
            Node("MyCustomKernel", {"x", "x", "x", "x", "x"}, {"y"}, IntAttr("anything", -7)) +
            Output("y")));
}

// The block-3 example of "Selected-block quantization", as written.
ModelProto QuantizeExample(const std::string& cache_type = kLayoutless,
                           const std::string& extra = "") {
  auto scalar = [](const std::string& name, int type, const std::string& bytes) {
    return " initializer { name: \"" + name + "\" data_type: " + std::to_string(type) +
           " raw_data: \"" + bytes + "\" }";
  };
  const std::string inits =
      scalar("key_scale", 1, "\\000\\000\\200>") + scalar("key_zero_int2", 26, "\\000") +
      scalar("value_scale", 1, "\\000\\000\\000>") + scalar("value_zero_u4", 21, "\\010") +
      scalar("ignored_scale", 1, "\\000\\000\\200?") + scalar("key_float16", 10, "\\000\\000") +
      scalar("value_bfloat16", 16, "\\000\\000") +
      " initializer { name: \"selected_blocks\" data_type: 7 dims: 1 "
      "raw_data: \"\\003\\000\\000\\000\\000\\000\\000\\000\" }";
  return Model(Input("cache", cache_type) + inits +
                   Node("QuantizePagedCache",
                        {"cache", "selected_blocks", "key_scale", "key_zero_int2", "value_scale",
                         "value_zero_u4"},
                        {"quantized_cache"}, "", "quantize") +
                   Node("QuantizePagedCache",
                        {"quantized_cache", "selected_blocks", "ignored_scale", "key_float16",
                         "ignored_scale", "value_bfloat16"},
                        {"dequantized_cache"}, "", "dequantize") +
                   Output("dequantized_cache"),
               extra);
}

TEST_CASE("QuantizePagedCache: the block-3 example checks and keeps the cache declaration") {
  ModelProto model = QuantizeExample(kCacheRef, kCatalogue);
  InferTypes(model);
  CHECK(Same(Inferred(model, "quantized_cache"), Type(kCacheRef)));
  CHECK(Same(Inferred(model, "dequantized_cache"), Type(kCacheRef)));
}

TEST_CASE("QuantizePagedCache: indices, scales and zero points are typed by the signature") {
  const std::string node = "graph 'main': node 0 (ai.rt::QuantizePagedCache 'q'): ";
  auto with = [](const std::string& indices, const std::string& scale, const std::string& zero,
                 const std::string& cache = kLayoutless, const std::string& attrs = "") {
    return Model(
        Input("cache", cache) + Input("i", indices) + Input("s", scale) + Input("z", zero) +
        Node("QuantizePagedCache", {"cache", "i", "s", "z", "s", "z"}, {"out"}, attrs, "q") +
        Output("out"));
  };
  for (int zero : {3, 2, 22, 21, 26, 25, 1, 10, 16})
    CheckModel(with(T(7, "N"), T(1, ""), T(zero, "")));
  ExpectInvalid(with(T(6, "N"), T(1, ""), T(3, "")),
                node +
                    "input 1 'i' (block_indices) has element type INT32, expected one of "
                    "INT64");
  ExpectInvalid(with(T(7, "1,2"), T(1, ""), T(3, "")),
                node + "input 1 'i' (block_indices) must have rank 1, got rank 2");
  ExpectInvalid(with(T(7, "N"), T(10, ""), T(3, "")),
                node + "input 2 's' (key_scale) has element type FLOAT16, expected one of FLOAT");
  ExpectInvalid(with(T(7, "N"), T(1, "1"), T(3, "")),
                node + "input 2 's' (key_scale) must have rank 0, got rank 1");
  ExpectInvalid(with(T(7, "N"), T(1, ""), T(5, "")),
                node +
                    "input 3 'z' (key_zero_point) has element type INT16, expected one of "
                    "INT8, UINT8, INT4, UINT4, INT2, UINT2, FLOAT, FLOAT16, BFLOAT16");
  ExpectInvalid(with(T(7, "N"), T(1, ""), T(3, "1")),
                node + "input 3 'z' (key_zero_point) must have rank 0, got rank 1");
  ExpectInvalid(with(T(7, "N"), T(1, ""), T(3, ""), T(1)),
                node + "input 0 'cache' (cache) must be declared as a paged cache struct");
  ExpectInvalid(with(T(7, "N"), T(1, ""), T(3, ""), kLayoutless, IntAttr("axis", 0)),
                node +
                    "attribute 'axis' is not an attribute of ai.rt::QuantizePagedCache "
                    "(opset 1) (it takes none)");
  ExpectInvalid(Model(Input("cache", kLayoutless) +
                      Node("QuantizePagedCache", {"cache"}, {"out"}, "", "q") + Output("out")),
                node + "required input 1 (block_indices) is missing");
}

TEST_CASE("registering a schema registers no kernel") {
  using core::runtime::RuntimeContext;
  using core::runtime::RuntimeSession;
  RuntimeContext context;
  CHECK(context.custom_kernels().Find("ai.rt", "PagedAttention", 1) == nullptr);
  REQUIRE(LightSchemaRegistry::Get("ai.rt", "PagedAttention", 1) != nullptr);
  auto model = std::make_shared<ModelProto>(DefaultAttention());
  auto* outputs = model->mutable_graph()->mutable_output();
  outputs->Mutable(0)->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  outputs->Mutable(1)->mutable_type()->mutable_struct_type()->set_name("c");
  CheckModel(*model);  // the PagedAttention kernel itself is a built-in of ops/ai_rt/

  // A schema registered at run time still leaves the node without a kernel.
  const FormalParameter any_tensor{"x", FormalParameter::Kind::kTensor, false, {}, std::nullopt};
  LightSchemaRegistry::Instance().Register(
      LightOpSchema("test.schema_only", "Probe", 1).Input(any_tensor).Output(any_tensor));
  auto probe = std::make_shared<ModelProto>();
  REQUIRE(google::protobuf::TextFormat::ParseFromString(
      "ir_version: 10 opset_import { domain: \"\" version: 18 } "
      "opset_import { domain: \"test.schema_only\" version: 1 } graph { name: \"g\" " +
          Input("x", T(1, "2")) +
          " node { op_type: \"Probe\" domain: \"test.schema_only\" name: \"p\" input: \"x\" "
          "output: \"y\" }" +
          Output("y", T(1, "2")) + " }",
      probe.get()));
  CheckModel(*probe);
  ExpectError([&] { RuntimeSession session(probe, context); }, ErrorCode::kNotImplemented,
              "no kernel for test.schema_only::Probe (opset 1) needed by node 'p'");
}
