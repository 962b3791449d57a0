#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/runtime_value.h"
#include "onnx_light.pb.h"
#include "tests/cpp/dense_page.h"
#include "tests/cpp/expect_error.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using test_util::DensePage;
using test_util::ExpectError;

namespace {

std::shared_ptr<PagedCacheProto> TwoPageCache() {
  auto cache = std::make_shared<PagedCacheProto>();
  cache->set_name("cache");
  auto* b0 = cache->add_blocks();
  b0->set_start(0);
  b0->set_length(4);
  DensePage(b0->mutable_key(), 4, 2, 0);
  DensePage(b0->mutable_value(), 4, 3, 100);
  auto* b1 = cache->add_blocks();
  b1->set_start(4);
  b1->set_length(1);
  DensePage(b1->mutable_key(), 2, 2, 10);
  // An affine INT8 value page: shared, never decoded.
  auto* e = b1->mutable_encoded_value();
  e->mutable_affine()->set_storage_type(TensorProto::INT8);
  e->mutable_affine()->mutable_scale()->set_data_type(TensorProto::FLOAT);
  e->mutable_affine()->mutable_scale()->add_float_data(0.5f);
  auto* lt = e->mutable_logical_type()->mutable_tensor_type();
  lt->set_elem_type(TensorProto::FLOAT);
  for (int64_t d : {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{3}})
    lt->mutable_shape()->add_dim()->set_dim_value(d);
  e->set_raw_data(std::string(6, '\x01'));
  return cache;
}

}  // namespace

TEST_CASE("FromPagedCache builds the blocks structure and borrows raw pages from the proto") {
  auto cache = TwoPageCache();
  const RuntimeValue value = RuntimeValue::FromPagedCache(cache);
  REQUIRE(IsPagedCacheStructure(value));
  const RuntimeSequence& blocks = value.field("blocks").elements();
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].field("start").tensor().data<int64_t>()[0] == 0);
  CHECK(blocks[0].field("length").tensor().data<int64_t>()[0] == 4);
  CHECK(blocks[1].field("start").tensor().data<int64_t>()[0] == 4);
  const Tensor& key0 = blocks[0].field("key").tensor();
  CHECK(key0.shape() == Shape{1, 1, 4, 2});
  // Zero copy: the page views the proto's raw_data and keeps the proto alive.
  CHECK(key0.raw_data() == static_cast<const void*>(cache->blocks(0).key().raw_data().data()));
  CHECK_FALSE(key0.writable());
  const RuntimeValue& encoded = blocks[1].field("value");
  REQUIRE(encoded.is_encoded());
  CHECK(&encoded.encoded() == &cache->blocks(1).encoded_value());
  const void* raw = cache->blocks(0).key().raw_data().data();
  cache.reset();  // the runtime value is now the only owner of the proto
  CHECK(blocks[0].field("key").tensor().raw_data() == raw);
  CHECK(blocks[0].field("key").tensor().data<float>()[7] == 7.f);
}

TEST_CASE("ToPagedCache exports every page without decoding and round-trips") {
  auto cache = TwoPageCache();
  const RuntimeValue value = RuntimeValue::FromPagedCache(cache);
  const PagedCacheProto out = value.ToPagedCache();
  REQUIRE(out.blocks_size() == 2);
  CHECK(out.blocks(0).key().raw_data() == cache->blocks(0).key().raw_data());
  CHECK(out.blocks(0).value().raw_data() == cache->blocks(0).value().raw_data());
  CHECK(out.blocks(1).has_encoded_value());
  CHECK(out.blocks(1).encoded_value().SerializeAsString() ==
        cache->blocks(1).encoded_value().SerializeAsString());
  CHECK(out.blocks(1).length() == 1);
  const RuntimeValue again = RuntimeValue::FromPagedCache(std::make_shared<PagedCacheProto>(out));
  CHECK(again.ContentEquals(value));
}

TEST_CASE("Typed 16-bit page data is packed into owned storage") {
  auto cache = std::make_shared<PagedCacheProto>();
  auto* b = cache->add_blocks();
  b->set_start(0);
  b->set_length(1);
  for (auto* t : {b->mutable_key(), b->mutable_value()}) {
    t->set_data_type(TensorProto::FLOAT16);
    for (int64_t d : {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{2}}) t->add_dims(d);
    t->add_int32_data(0x3C00);  // 1.0
    t->add_int32_data(0x4000);  // 2.0
  }
  const RuntimeValue value = RuntimeValue::FromPagedCache(cache);
  const Tensor& key = value.field("blocks").elements()[0].field("key").tensor();
  CHECK(key.dtype() == DataType::kFloat16);
  CHECK(key.ToFloatVector() == std::vector<float>{1.f, 2.f});
}

TEST_CASE("FromPagedCache rejects missing payloads and external page data, naming the block") {
  auto cache = TwoPageCache();
  cache->mutable_blocks(1)->clear_key();
  ExpectError([&] { RuntimeValue::FromPagedCache(cache); }, ErrorCode::kInvalidArgument,
              {"blocks[1]", "missing key payload"});
  cache = TwoPageCache();
  cache->mutable_blocks(1)->clear_encoded_value();
  ExpectError([&] { RuntimeValue::FromPagedCache(cache); }, ErrorCode::kInvalidArgument,
              {"blocks[1]", "missing value payload"});
  cache = TwoPageCache();
  cache->mutable_blocks(0)->mutable_key()->set_data_location(TensorProto::EXTERNAL);
  ExpectError([&] { RuntimeValue::FromPagedCache(cache); }, ErrorCode::kInvalidArgument,
              {"blocks[0].key", "external page data"});
}

TEST_CASE("An empty cache is a blocks structure with an empty sequence") {
  const RuntimeValue value = RuntimeValue::FromPagedCache(std::make_shared<PagedCacheProto>());
  CHECK(IsPagedCacheStructure(value));
  CHECK(value.field("blocks").elements().size() == 0);
  CHECK(value.ToPagedCache().blocks_size() == 0);
}

TEST_CASE("ToPagedCache refuses values without the paged-cache structure") {
  const RuntimeValue other =
      RuntimeValue::Struct("s", {{"a", RuntimeValue(Tensor::FromFloat("a", {1}, {1.f}))}});
  CHECK_FALSE(IsPagedCacheStructure(other));
  ExpectError([&] { other.ToPagedCache(); }, ErrorCode::kTypeError, {"paged-cache structure"});
}
