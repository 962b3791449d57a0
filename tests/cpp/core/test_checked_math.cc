#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/tensor_proto.h"
#include "core/text_printer.h"
#include "onnx_light.pb.h"
#include "tests/cpp/expect_error.h"

using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using test_util::ExpectError;

namespace {
constexpr int64_t kBig = int64_t{1} << 62;
}

TEST_CASE("CheckedMul and CheckedAdd return exact results and refuse overflow") {
  CHECK(CheckedMul(3, 7, "x") == 21);
  CHECK(CheckedMul(0, kBig, "x") == 0);
  CHECK(CheckedAdd(kBig, kBig - 1, "x") == std::numeric_limits<int64_t>::max());
  ExpectError([] { CheckedMul(kBig, 4, "Tile's output"); }, ErrorCode::kInvalidArgument,
              {"Tile's output", "overflows int64"});
  ExpectError([] { CheckedAdd(std::numeric_limits<int64_t>::max(), 1, "axis"); },
              ErrorCode::kInvalidArgument, {"axis", "overflows"});
  ExpectError([] { CheckedMul(-1, 2, "count"); }, ErrorCode::kInvalidArgument, "negative");
  CHECK(CheckedSignedAdd(5, -7, "pad") == -2);
  ExpectError([] { CheckedSignedAdd(std::numeric_limits<int64_t>::min(), -1, "pad"); },
              ErrorCode::kInvalidArgument, "overflows");
}

TEST_CASE("CheckedNumel refuses shapes whose non-zero dimensions overflow, even with a zero") {
  CHECK(CheckedNumel(std::vector<int64_t>{2, 3, 4}, "s") == 24);
  CHECK(CheckedNumel(std::vector<int64_t>{}, "s") == 1);
  CHECK(CheckedNumel(std::vector<int64_t>{0, 5}, "s") == 0);
  // 2^64 wraps to 0 in unchecked int64 arithmetic: the classic way past a payload check.
  ExpectError(
      [] {
        CheckedNumel(std::vector<int64_t>{kBig, 4}, "tensor 'w'");
      },
      ErrorCode::kInvalidArgument, {"tensor 'w'", "[4611686018427387904, 4]"});
  // Sub-products kernels take over a valid shape (outer x inner) must fit too.
  ExpectError(
      [] {
        CheckedNumel(std::vector<int64_t>{0, kBig, 4}, "s");
      },
      ErrorCode::kInvalidArgument, "overflows");
  ExpectError(
      [] {
        CheckedNumel(std::vector<int64_t>{3, -1}, "s");
      },
      ErrorCode::kInvalidArgument, "negative dimension");
}

TEST_CASE("CheckedStorageBytes refuses element counts whose byte size overflows") {
  CHECK(CheckedStorageBytes(DataType::kFloat, 10, "t") == 40);
  CHECK(CheckedStorageBytes(DataType::kInt4, 3, "t") == 2);
  ExpectError([] { CheckedStorageBytes(DataType::kDouble, kBig, "t"); },
              ErrorCode::kInvalidArgument, {"DOUBLE", "byte size"});
}

TEST_CASE("CheckedCountFromDouble refuses NaN, infinities and counts past 2^62") {
  CHECK(CheckedCountFromDouble(12.0, "c") == 12);
  ExpectError([] { CheckedCountFromDouble(1e300, "Range's element count"); },
              ErrorCode::kInvalidArgument, "Range's element count");
  ExpectError([] { CheckedCountFromDouble(std::numeric_limits<double>::quiet_NaN(), "c"); },
              ErrorCode::kInvalidArgument, "not a finite count");
  ExpectError([] { CheckedCountFromDouble(-1.0, "c"); }, ErrorCode::kInvalidArgument, "c");
}

TEST_CASE("A tensor whose shape overflows is refused before anything is allocated") {
  ExpectError(
      [] {
        Tensor("x", DataType::kFloat, {kBig, 4});
      },
      ErrorCode::kInvalidArgument, "overflows int64");
  ExpectError(
      [] {
        Tensor::Borrow("x", DataType::kFloat, {kBig, 4}, nullptr, nullptr);
      },
      ErrorCode::kInvalidArgument, "overflows int64");
}

TEST_CASE("max_tensor_bytes turns a runaway allocation into an error naming the tensor and size") {
  {
    ScopedMaxTensorBytes limit(1024);
    CHECK(MaxTensorBytes() == 1024);
    Tensor ok("small", DataType::kFloat, {256});  // exactly the limit
    CHECK(ok.nbytes() == 1024);
    ExpectError([] { Tensor("big", DataType::kFloat, {257}); }, ErrorCode::kResourceExhausted,
                {"tensor 'big'", "[257]", "1028 bytes", "max_tensor_bytes = 1024"});
    {
      ScopedMaxTensorBytes inner(0);  // 0 keeps the limit in force
      CHECK(MaxTensorBytes() == 1024);
    }
  }
  CHECK(MaxTensorBytes() == DefaultMaxTensorBytes());
  CHECK(DefaultMaxTensorBytes() > (size_t{1} << 20));
}

TEST_CASE("An initializer whose dims overflow does not pass the payload check") {
  onnx_light::TensorProto proto;
  proto.set_name("w");
  proto.set_data_type(onnx_light::TensorProto::FLOAT);
  proto.add_dims(kBig);
  proto.add_dims(4);  // 2^64 elements: 0 after wrapping, matching an empty raw_data
  proto.set_raw_data("");
  ExpectError([&] { TensorFromProto(proto); }, ErrorCode::kInvalidArgument, "overflows int64");
}

TEST_CASE("The printer refuses an initializer whose dims do not match its payload") {
  onnx_light::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(18);
  auto* init = model.mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(onnx_light::TensorProto::FLOAT);
  init->add_dims(int64_t{1} << 61);  // x 4 bytes wraps to 2^63: negative in int64
  init->set_raw_data(std::string(8, '\0'));
  CHECK_THROWS_AS(PrintModel(model), Error);
  init->clear_dims();
  init->add_dims(1000);  // 4000 bytes needed, 8 present
  ExpectError([&] { PrintModel(model); }, ErrorCode::kInvalidModel, {"tensor 'w'", "needs 4000"});
}
