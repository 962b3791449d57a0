#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/io_arena.h"
#include "core/runtime_sequence.h"
#include "core/runtime_value.h"
#include "core/tensor.h"
#include "onnx_light.pb.h"

using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

namespace {

// A paged-cache-like value: {"blocks": [ {start, length, key}, ... ], "scale": tensor}.
RuntimeValue MakeCache(int blocks) {
  RuntimeSequence seq;
  for (int b = 0; b < blocks; ++b) {
    std::vector<RuntimeValue::Field> fields;
    fields.emplace_back("start", RuntimeValue(Tensor::FromInt64("start", {}, {b * 4})));
    fields.emplace_back("length", RuntimeValue(Tensor::FromInt64("length", {}, {4})));
    fields.emplace_back("key", RuntimeValue(Tensor::FromFloat("key", {1, 1, 4, 2},
                                                              std::vector<float>(8, float(b)))));
    seq.PushBack(RuntimeValue::Struct("block", std::move(fields)));
  }
  std::vector<RuntimeValue::Field> top;
  top.emplace_back("blocks", RuntimeValue::Sequence(std::move(seq)));
  top.emplace_back("scale", RuntimeValue(Tensor::FromFloat("scale", {2}, {0.5f, 2.f})));
  return RuntimeValue::Struct("cache", std::move(top));
}

// Every tensor reachable from `v`, depth first.
void Tensors(const RuntimeValue& v, std::vector<Tensor>& out) {
  if (v.is_tensor()) {
    out.push_back(v.tensor());
  } else if (v.is_struct()) {
    for (const auto& f : v.fields()) Tensors(f.second, out);
  } else if (v.is_sequence()) {
    for (const RuntimeValue& e : v.elements().ToVector()) Tensors(e, out);
  }
}
std::vector<Tensor> Tensors(const RuntimeValue& v) {
  std::vector<Tensor> out;
  Tensors(v, out);
  return out;
}

RuntimeValue MakeEncoded() {
  auto proto = std::make_shared<onnx_light::EncodedValueProto>();
  proto->set_name("k0");
  proto->set_raw_data(std::string("\x01\x02\x03\x04", 4));
  proto->set_parameter_ref("kv_scale");
  auto catalogue = std::make_shared<ParameterCatalogue>();
  auto layout = std::make_shared<onnx_light::AffineLayoutProto>();
  layout->set_name("kv_scale");
  layout->set_storage_type(3);
  catalogue->entries["kv_scale"] = layout;
  return RuntimeValue::Encoded(proto, catalogue);
}

}  // namespace

TEST_CASE("copying a RuntimeValue never copies a payload") {
  RuntimeValue t(Tensor::FromFloat("x", {3}, {1, 2, 3}));
  RuntimeValue t2 = t;
  CHECK(t2.tensor().raw_data() == t.tensor().raw_data());
  CHECK(t2.tensor().owner() == t.tensor().owner());

  RuntimeValue cache = MakeCache(3);
  RuntimeValue cache2 = cache;
  CHECK(&cache2.fields() == &cache.fields());  // the field vector itself is shared
  const RuntimeSequence& blocks = cache.field("blocks").elements();
  CHECK(cache2.field("blocks").elements().tree_id() == blocks.tree_id());
  std::vector<Tensor> a = Tensors(cache), b = Tensors(cache2);
  REQUIRE(a.size() == 3 * 3 + 1);
  REQUIRE(b.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].raw_data() == b[i].raw_data());
    CHECK(a[i].owner() == b[i].owner());
  }

  RuntimeValue enc = MakeEncoded();
  RuntimeValue enc2 = enc;
  CHECK(enc2.encoded_ptr() == enc.encoded_ptr());
  CHECK(enc2.catalogue() == enc.catalogue());
}

TEST_CASE("BorrowView shares owners at every level and grants no write permission") {
  Tensor writable("w", DataType::kFloat, {2});
  writable.mutable_data<float>()[0] = 7;
  writable.mutable_data<float>()[1] = 8;
  RuntimeValue top(std::move(writable));
  CHECK(top.tensor().writable());
  RuntimeValue top_view = top.BorrowView();
  CHECK(top_view.tensor().raw_data() == top.tensor().raw_data());
  CHECK(top_view.tensor().owner() == top.tensor().owner());
  CHECK_FALSE(top_view.tensor().writable());
  top_view.mutable_tensor().set_name("renamed");
  CHECK(top.tensor().name() == "w");  // metadata is independent

  RuntimeValue cache = MakeCache(4);
  RuntimeValue view = cache.BorrowView();
  std::vector<Tensor> a = Tensors(cache), b = Tensors(view);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].raw_data() == b[i].raw_data());
    CHECK(a[i].owner() == b[i].owner());
  }
  // Inspect in place (no copies): contained tensors are sealed, in structs and sequences.
  const RuntimeValue& block2 = view.field("blocks").elements()[2];
  CHECK(block2.struct_name() == "block");
  CHECK_FALSE(block2.field("key").tensor().writable());
  CHECK(block2.field("key").tensor().raw_data() ==
        cache.field("blocks").elements()[2].field("key").tensor().raw_data());
  CHECK_FALSE(view.field("scale").tensor().writable());
  CHECK(view.field("blocks").elements().tree_id() == cache.field("blocks").elements().tree_id());
}

TEST_CASE("editing a borrowed sequence leaves the original's elements and tree untouched") {
  RuntimeValue seq = RuntimeValue::Sequence(MakeCache(2).field("blocks").elements());
  RuntimeValue view = seq.BorrowView();
  const void* id = seq.elements().tree_id();
  const void* key0 = seq.elements()[0].field("key").tensor().raw_data();
  view.mutable_elements().Erase(0);
  view.mutable_elements().PushBack(RuntimeValue(Tensor::FromInt64("n", {}, {1})));
  CHECK(seq.elements().tree_id() == id);
  CHECK(seq.elements().size() == 2);
  CHECK(seq.elements()[0].field("key").tensor().raw_data() == key0);
  CHECK(view.elements().size() == 2);
}

TEST_CASE("DeepCopy gives independent payloads with equal content") {
  IoArena arena;
  RuntimeValue cache = MakeCache(3);
  RuntimeValue copy = cache.DeepCopy(arena);
  CHECK(copy.ContentEquals(cache));
  CHECK(cache.ContentEquals(copy));
  std::vector<Tensor> a = Tensors(cache), b = Tensors(copy);
  REQUIRE(a.size() == b.size());
  size_t bytes = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].raw_data() != b[i].raw_data());
    CHECK(a[i].owner() != b[i].owner());
    CHECK(a[i].name() == b[i].name());
    CHECK(b[i].shape() == a[i].shape());
    CHECK_FALSE(b[i].writable());  // sealed inside containers
    bytes += IoArena::SizeClass(a[i].nbytes());
  }
  CHECK(arena.live_bytes() == bytes);  // every payload came from the given allocator
  CHECK(copy.field("blocks").elements().tree_id() != cache.field("blocks").elements().tree_id());
  CHECK(&copy.fields() != &cache.fields());

  // A top-level tensor copy is writable and independent of the source.
  RuntimeValue t(Tensor::FromFloat("x", {2}, {1, 2}));
  RuntimeValue tc = t.DeepCopy();
  REQUIRE(tc.tensor().writable());
  tc.mutable_tensor().mutable_data<float>()[0] = 9;
  CHECK(t.tensor().ToFloatVector() == std::vector<float>{1, 2});
  CHECK(tc.tensor().ToFloatVector() == std::vector<float>{9, 2});
  CHECK_FALSE(tc.ContentEquals(t));
}

TEST_CASE("DeepCopy copies strings and encoded protos, sharing only the catalogue") {
  RuntimeValue s(Tensor::FromStrings("names", {2}, {"alpha", "beta"}));
  RuntimeValue sc = s.DeepCopy();
  CHECK(sc.tensor().raw_data() != s.tensor().raw_data());
  CHECK(sc.tensor().strings()[1] == "beta");
  CHECK(sc.ContentEquals(s));

  RuntimeValue enc = MakeEncoded();
  RuntimeValue ec = enc.DeepCopy();
  CHECK(ec.encoded_ptr() != enc.encoded_ptr());
  CHECK(ec.encoded().raw_data() == enc.encoded().raw_data());
  CHECK(ec.encoded().raw_data().data() != enc.encoded().raw_data().data());
  CHECK(ec.catalogue() == enc.catalogue());
  CHECK(ec.ContentEquals(enc));

  CHECK(RuntimeValue().DeepCopy().empty());
}

TEST_CASE("ContentEquals tells apart kinds, names, shapes, dtypes and bytes") {
  RuntimeValue f(Tensor::FromFloat("a", {2}, {1, 2}));
  CHECK(f.ContentEquals(RuntimeValue(Tensor::FromFloat("other_name", {2}, {1, 2}))));
  CHECK_FALSE(f.ContentEquals(RuntimeValue(Tensor::FromFloat("a", {2}, {1, 3}))));
  CHECK_FALSE(f.ContentEquals(RuntimeValue(Tensor::FromFloat("a", {1, 2}, {1, 2}))));
  CHECK_FALSE(f.ContentEquals(RuntimeValue(Tensor::FromInt32("a", {2}, {1, 2}))));
  CHECK_FALSE(f.ContentEquals(RuntimeValue()));
  CHECK_FALSE(f.ContentEquals(RuntimeValue::Struct("a", {})));

  RuntimeValue c3 = MakeCache(3);
  CHECK(c3.ContentEquals(MakeCache(3)));
  CHECK_FALSE(c3.ContentEquals(MakeCache(2)));
  std::vector<RuntimeValue::Field> renamed = c3.fields();
  renamed[1].first = "scales";
  CHECK_FALSE(c3.ContentEquals(RuntimeValue::Struct("cache", renamed)));
  CHECK_FALSE(c3.ContentEquals(RuntimeValue::Struct("other", c3.fields())));

  RuntimeValue enc = MakeEncoded();
  auto changed = std::make_shared<onnx_light::EncodedValueProto>(enc.encoded());
  changed->set_raw_data("xyz");
  CHECK_FALSE(enc.ContentEquals(RuntimeValue::Encoded(changed, enc.catalogue())));
  CHECK_FALSE(enc.ContentEquals(RuntimeValue::Encoded(enc.encoded_ptr(), nullptr)));
}

TEST_CASE("accessing the wrong kind names both kinds") {
  RuntimeValue cache = MakeCache(1);
  try {
    (void)cache.tensor();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kTypeError);
    CHECK(std::string(e.what()) == "expected a tensor value, got struct");
  }
  CHECK_THROWS_WITH_AS(cache.field("missing"), "struct 'cache' has no field 'missing'", Error);
  CHECK(cache.FindField("missing") == nullptr);
  CHECK_THROWS_AS(cache.elements(), Error);
}
