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

namespace {

// A [2, 3, 2] view over a buffer with 4 rows per block (rows 2-3 of each block are spare).
Tensor PaddedView(std::shared_ptr<std::vector<float>>* storage) {
  *storage = std::make_shared<std::vector<float>>(2 * 4 * 2);
  for (size_t i = 0; i < (*storage)->size(); ++i) (**storage)[i] = static_cast<float>(i);
  return Tensor::StridedView("cache", DataType::kFloat, {2, 3, 2}, {8, 2, 1}, (*storage)->data(),
                             *storage);
}

}  // namespace

TEST_CASE("A strided view refuses dense access and names itself") {
  std::shared_ptr<std::vector<float>> storage;
  const Tensor t = PaddedView(&storage);
  CHECK_FALSE(t.contiguous());
  CHECK_FALSE(t.writable());
  CHECK(t.strided_data() == storage->data());
  CHECK(t.strides() == Shape{8, 2, 1});
  CHECK(t.nbytes() == 12 * sizeof(float));
  try {
    (void)t.raw_data();
    FAIL("raw_data() of a strided view must throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kFailedPrecondition);
    CHECK(std::string(e.what()).find("tensor 'cache' of shape [2, 3, 2] is a strided view") !=
          std::string::npos);
  }
  CHECK_THROWS_AS(t.data<float>(), Error);
}

TEST_CASE("Contiguous copies a strided view's values in row-major order") {
  std::shared_ptr<std::vector<float>> storage;
  const Tensor t = PaddedView(&storage);
  const Tensor dense = t.Contiguous();
  CHECK(dense.contiguous());
  CHECK(dense.shape() == Shape{2, 3, 2});
  CHECK(dense.ToFloatVector() == std::vector<float>{0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13});
  CHECK(t.ToFloatVector() == dense.ToFloatVector());
  // A dense tensor is returned shared, not copied.
  CHECK(dense.Contiguous().raw_data() == dense.raw_data());
}

TEST_CASE("Dense strides make an ordinary tensor, block queries follow the strides") {
  auto storage = std::make_shared<std::vector<float>>(6);
  const Tensor t =
      Tensor::StridedView("x", DataType::kFloat, {2, 1, 3}, {3, 99, 1}, storage->data(), storage);
  CHECK(t.contiguous());  // the size-1 dimension's stride does not matter
  CHECK(t.raw_data() == storage->data());
  std::shared_ptr<std::vector<float>> padded;
  const Tensor v = PaddedView(&padded);
  CHECK(v.DenseFrom(1));
  CHECK_FALSE(v.DenseFrom(0));
  CHECK(v.BlockOffset(1, 0) == 0);
  CHECK(v.BlockOffset(1, 1) == 8);
  CHECK(t.BlockOffset(1, 1) == 3);
  CHECK_THROWS_AS(Tensor::StridedView("s", DataType::kString, {1}, {1}, nullptr, storage), Error);
  CHECK_THROWS_AS(Tensor::StridedView("n", DataType::kFloat, {2}, {1}, storage->data(), nullptr),
                  Error);
}

TEST_CASE("Reshaping a strided view keeps it a view when its dense runs allow it") {
  std::shared_ptr<std::vector<float>> storage;
  const Tensor t = PaddedView(&storage);
  const Tensor unsqueezed = t.Reshaped({2, 1, 3, 2});
  CHECK(unsqueezed.strided_data() == t.strided_data());
  CHECK(unsqueezed.ToFloatVector() == t.ToFloatVector());
  const Tensor split = t.Reshaped({2, 3, 2, 1});
  CHECK(split.ToFloatVector() == t.ToFloatVector());
  // Merging rows across the spare rows needs a copy.
  CHECK_FALSE(t.CanViewAs({12}));
  CHECK_THROWS_AS(t.Reshaped({12}), Error);
  const Tensor flat = t.ReshapedOrCopy({12});
  CHECK(flat.contiguous());
  CHECK(flat.ToFloatVector() == t.ToFloatVector());
  // The rows of one block can merge: [2, 6] steps 8 elements between blocks.
  const Tensor rows = t.Reshaped({2, 6});
  CHECK(rows.strides() == Shape{8, 1});
  CHECK(rows.ToFloatVector() == t.ToFloatVector());
}
