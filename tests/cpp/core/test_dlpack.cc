#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dlpack.h"
#include "core/error.h"
#include "core/tensor.h"

using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

namespace {

// A producer-side DLManagedTensor over a float buffer, counting deleter calls.
struct FakeProducer {
  std::vector<float> data;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int* deleted = nullptr;
  DLManagedTensor managed{};

  static void Delete(DLManagedTensor* self) {
    auto* p = static_cast<FakeProducer*>(self->manager_ctx);
    ++*p->deleted;
    delete p;
  }
};

DLManagedTensor* MakeProducer(std::vector<float> data, std::vector<int64_t> shape,
                              std::vector<int64_t> strides, int* deleted) {
  auto* p = new FakeProducer{std::move(data), std::move(shape), std::move(strides), deleted};
  DLTensor& dl = p->managed.dl_tensor;
  dl.data = p->data.data();
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int>(p->shape.size());
  dl.dtype = DLDataType{kDLFloat, 32, 1};
  dl.shape = p->shape.data();
  dl.strides = p->strides.empty() ? nullptr : p->strides.data();
  dl.byte_offset = 0;
  p->managed.manager_ctx = p;
  p->managed.deleter = &FakeProducer::Delete;
  return &p->managed;
}

}  // namespace

TEST_CASE("TensorFromDLPack adopts the producer's bytes without copying") {
  int deleted = 0;
  DLManagedTensor* m = MakeProducer({1, 2, 3, 4, 5, 6}, {2, 3}, {}, &deleted);
  const void* p = m->dl_tensor.data;
  Tensor t = TensorFromDLPack(m, "x");
  CHECK(t.raw_data() == p);
  CHECK(t.name() == "x");
  CHECK(t.dtype() == DataType::kFloat);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.ToFloatVector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK_FALSE(t.writable());
  CHECK(deleted == 0);
}

TEST_CASE("the producer's deleter runs exactly once, when the last Tensor handle dies") {
  int deleted = 0;
  {
    Tensor a = TensorFromDLPack(MakeProducer({1, 2}, {2}, {1}, &deleted), "a");
    Tensor b = a;
    Tensor c = b.BorrowView();
    a = Tensor();
    CHECK(deleted == 0);
    b = Tensor();
    CHECK(deleted == 0);
    CHECK(c.ToFloatVector() == std::vector<float>{1, 2});
  }
  CHECK(deleted == 1);
}

TEST_CASE("size-1 dimensions may have any stride and empty tensors any strides") {
  int deleted = 0;
  Tensor t = TensorFromDLPack(MakeProducer({1, 2, 3}, {1, 3, 1}, {99, 1, 7}, &deleted), "k");
  CHECK(t.shape() == Shape{1, 3, 1});
  Tensor e = TensorFromDLPack(MakeProducer({}, {0, 4}, {1, 5}, &deleted), "e");
  CHECK(e.numel() == 0);
  Tensor s = TensorFromDLPack(MakeProducer({7}, {}, {}, &deleted), "s");
  CHECK(s.rank() == 0);
  CHECK(s.ToFloatVector() == std::vector<float>{7});
}

TEST_CASE("a noncontiguous DLPack tensor is rejected with its name and left to the caller") {
  int deleted = 0;
  // A transposed 2x3 view: strides (1, 2) instead of (3, 1).
  DLManagedTensor* m = MakeProducer({1, 2, 3, 4, 5, 6}, {3, 2}, {1, 3}, &deleted);
  try {
    TensorFromDLPack(m, "past_key");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    CHECK(msg.find("noncontiguous") != std::string::npos);
    CHECK(msg.find("'past_key'") != std::string::npos);
    CHECK(msg.find("strides [1, 3]") != std::string::npos);
  }
  CHECK(deleted == 0);  // ownership stays with the caller on failure
  m->deleter(m);
  CHECK(deleted == 1);
}

TEST_CASE("non-CPU devices, vector lanes and unsupported element types are rejected by name") {
  int deleted = 0;
  DLManagedTensor* m = MakeProducer({1, 2}, {2}, {}, &deleted);
  m->dl_tensor.device = DLDevice{kDLCUDA, 0};
  CHECK_THROWS_WITH_AS(TensorFromDLPack(m, "q"),
                       "DLPack tensor 'q' is not on the CPU (device_type=2, device_id=0); "
                       "only CPU tensors are accepted",
                       Error);
  m->dl_tensor.device = DLDevice{kDLCPU, 0};
  m->dl_tensor.dtype = DLDataType{kDLComplex, 64, 1};
  CHECK_THROWS_WITH_AS(
      TensorFromDLPack(m, "q"),
      "DLPack tensor 'q' has unsupported element type DLDataType(code=5, bits=64, lanes=1)", Error);
  m->dl_tensor.dtype = DLDataType{kDLFloat, 32, 4};
  CHECK_THROWS_AS(TensorFromDLPack(m, "q"), Error);
  m->dl_tensor.dtype = DLDataType{kDLInt, 4, 1};
  CHECK_THROWS_AS(TensorFromDLPack(m, "q"), Error);
  CHECK(deleted == 0);
  m->deleter(m);
  CHECK(deleted == 1);
}

TEST_CASE("DLPack element types map to the ONNX data types") {
  const std::string n = "t";
  CHECK(DataTypeFromDLPack({kDLFloat, 16, 1}, n) == DataType::kFloat16);
  CHECK(DataTypeFromDLPack({kDLFloat, 32, 1}, n) == DataType::kFloat);
  CHECK(DataTypeFromDLPack({kDLFloat, 64, 1}, n) == DataType::kDouble);
  CHECK(DataTypeFromDLPack({kDLBfloat, 16, 1}, n) == DataType::kBFloat16);
  CHECK(DataTypeFromDLPack({kDLInt, 8, 1}, n) == DataType::kInt8);
  CHECK(DataTypeFromDLPack({kDLInt, 16, 1}, n) == DataType::kInt16);
  CHECK(DataTypeFromDLPack({kDLInt, 32, 1}, n) == DataType::kInt32);
  CHECK(DataTypeFromDLPack({kDLInt, 64, 1}, n) == DataType::kInt64);
  CHECK(DataTypeFromDLPack({kDLUInt, 8, 1}, n) == DataType::kUint8);
  CHECK(DataTypeFromDLPack({kDLUInt, 16, 1}, n) == DataType::kUint16);
  CHECK(DataTypeFromDLPack({kDLUInt, 32, 1}, n) == DataType::kUint32);
  CHECK(DataTypeFromDLPack({kDLUInt, 64, 1}, n) == DataType::kUint64);
  CHECK(DataTypeFromDLPack({kDLPackBoolCode, 8, 1}, n) == DataType::kBool);
  for (DataType t :
       {DataType::kFloat16, DataType::kFloat, DataType::kDouble, DataType::kBFloat16,
        DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64, DataType::kUint8,
        DataType::kUint16, DataType::kUint32, DataType::kUint64, DataType::kBool}) {
    CHECK(DataTypeFromDLPack(DataTypeToDLPack(t, n), n) == t);
  }
  CHECK_THROWS_WITH_AS(DataTypeToDLPack(DataType::kInt4, "w"),
                       "tensor 'w' of type INT4 cannot be exported through DLPack", Error);
}

TEST_CASE("byte_offset is applied to the data pointer and must keep elements aligned") {
  int deleted = 0;
  DLManagedTensor* m = MakeProducer({1, 2, 3, 4}, {2}, {}, &deleted);
  m->dl_tensor.byte_offset = 2 * sizeof(float);
  const char* base = static_cast<const char*>(m->dl_tensor.data);
  Tensor t = TensorFromDLPack(m, "o");
  CHECK(t.raw_data() == base + 8);
  CHECK(t.ToFloatVector() == std::vector<float>{3, 4});

  DLManagedTensor* bad = MakeProducer({1, 2, 3}, {2}, {}, &deleted);
  bad->dl_tensor.byte_offset = 2;
  CHECK_THROWS_WITH_AS(TensorFromDLPack(bad, "o2"),
                       "DLPack tensor 'o2' data (with byte_offset 2) is not aligned to its "
                       "4-byte elements",
                       Error);
  bad->dl_tensor.byte_offset = 0;
  bad->dl_tensor.data = nullptr;
  CHECK_THROWS_AS(TensorFromDLPack(bad, "o3"), Error);
  bad->dl_tensor.data = nullptr;
  bad->deleter(bad);
  CHECK(deleted == 1);
}

TEST_CASE("TensorToDLPack shares the owner and round trips to the same data pointer") {
  Tensor t = Tensor::FromFloat("y", {2, 3}, {1, 2, 3, 4, 5, 6});
  const void* p = t.raw_data();
  const long before = t.owner_use_count();
  DLManagedTensor* m = TensorToDLPack(t);
  CHECK(t.owner_use_count() == before + 1);
  CHECK(m->dl_tensor.data == p);
  CHECK(m->dl_tensor.ndim == 2);
  CHECK(m->dl_tensor.shape[0] == 2);
  CHECK(m->dl_tensor.shape[1] == 3);
  CHECK(m->dl_tensor.strides[0] == 3);
  CHECK(m->dl_tensor.strides[1] == 1);
  CHECK(m->dl_tensor.device.device_type == kDLCPU);
  CHECK(m->dl_tensor.byte_offset == 0);

  Tensor back = TensorFromDLPack(m, "y2");
  CHECK(back.raw_data() == p);
  CHECK(back.ToFloatVector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<const void> weak = t.owner();
  t = Tensor();
  CHECK_FALSE(weak.expired());  // the DLPack manager keeps the payload alive
  back = Tensor();              // last handle: the deleter releases the shared owner
  CHECK(weak.expired());
}

TEST_CASE("the exported deleter alone releases the shared owner") {
  Tensor t = Tensor::FromInt64("ids", {}, {42});
  std::weak_ptr<const void> weak = t.owner();
  DLManagedTensor* m = TensorToDLPack(t);
  CHECK(m->dl_tensor.ndim == 0);
  CHECK(m->dl_tensor.dtype.code == kDLInt);
  CHECK(m->dl_tensor.dtype.bits == 64);
  t = Tensor();
  CHECK(*static_cast<const int64_t*>(m->dl_tensor.data) == 42);
  m->deleter(m);
  CHECK(weak.expired());
}

TEST_CASE("string, ownerless and undefined tensors are not exported") {
  Tensor s = Tensor::FromStrings("names", {1}, {"a"});
  CHECK_THROWS_WITH_AS(TensorToDLPack(s), "string tensor 'names' cannot be exported through DLPack",
                       Error);
  float raw[1] = {0};
  Tensor u = Tensor::Unowned("raw", DataType::kFloat, {1}, raw);
  CHECK_THROWS_WITH_AS(TensorToDLPack(u),
                       "tensor 'raw' has no storage owner and cannot be exported through "
                       "DLPack without a copy",
                       Error);
  CHECK_THROWS_AS(TensorToDLPack(Tensor()), Error);
}
