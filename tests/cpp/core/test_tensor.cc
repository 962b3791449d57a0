#include <doctest/doctest.h>

#include "core/error.h"
#include "core/runtime_value.h"
#include "core/tensor.h"

using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

TEST_CASE("FromFloat adopts the vector's buffer without copying") {
  std::vector<float> values{1.f, 2.f, 3.f};
  const float* p = values.data();
  Tensor t = Tensor::FromFloat("x", {3}, std::move(values));
  CHECK(t.data<float>() == p);
  CHECK(t.numel() == 3);
  CHECK(t.nbytes() == 12);
}

TEST_CASE("BorrowView shares bytes and owner but not metadata or write permission") {
  Tensor t("x", DataType::kFloat, {2, 2});
  CHECK(t.writable());
  Tensor v = t.BorrowView();
  CHECK(v.raw_data() == t.raw_data());
  CHECK(v.owner().get() == t.owner().get());
  CHECK_FALSE(v.writable());
  v.set_name("y");
  CHECK(t.name() == "x");
  CHECK_THROWS_AS(v.mutable_raw_data(), Error);
}

TEST_CASE("RetainStorage keeps the pointer and rejects ownerless storage") {
  Tensor t = Tensor::FromFloat("past", {2}, {0.f, 0.f});
  const void* p = t.raw_data();
  Tensor r = std::move(t).RetainStorage();
  CHECK(r.raw_data() == p);
  float raw[2] = {1, 2};
  Tensor u = Tensor::Unowned("u", DataType::kFloat, {2}, raw);
  CHECK_THROWS_WITH_AS(std::move(u).RetainStorage(),
                       "tensor 'u' has no storage owner and cannot be retained without a copy",
                       Error);
}

TEST_CASE("half and bfloat16 conversions round to nearest even") {
  CHECK(FloatToHalf(1.0f) == 0x3c00);
  CHECK(HalfToFloat(0x3c00) == 1.0f);
  CHECK(FloatToHalf(65504.f) == 0x7bff);
  CHECK(FloatToHalf(1e9f) == 0x7c00);
  CHECK(HalfToFloat(0x0001) == doctest::Approx(5.960464477539063e-08));
  CHECK(FloatToHalf(5.960464477539063e-08f) == 0x0001);
  CHECK(FloatToBFloat16(1.0f) == 0x3f80);
  CHECK(BFloat16ToFloat(0x3f80) == 1.0f);
}

TEST_CASE("packed INT4 and INT2 storage") {
  CHECK(StorageBytes(DataType::kInt4, 3) == 2);
  CHECK(StorageBytes(DataType::kUint2, 5) == 2);
  uint8_t buf[2] = {0, 0};
  PackedSet(DataType::kInt4, buf, 0, -3);
  PackedSet(DataType::kInt4, buf, 1, 7);
  CHECK(PackedGet(DataType::kInt4, buf, 0) == -3);
  CHECK(PackedGet(DataType::kInt4, buf, 1) == 7);
  uint8_t b2 = 0;
  PackedSet(DataType::kInt2, &b2, 3, -2);
  CHECK(PackedGet(DataType::kInt2, &b2, 3) == -2);
}
