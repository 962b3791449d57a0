// Helpers for the numeric kernel tests: build a node, run its registered kernel directly,
// random data and tolerance checks with the index of the first mismatch.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace ops_math_test {

using onnx_light::AttributeProto;
using onnx_light::NodeProto;
using onnx_light::core::DataType;
using onnx_light::core::runtime::KernelCall;
using onnx_light::core::runtime::KernelContext;
using onnx_light::core::runtime::RuntimeContext;
using onnx_light::core::runtime::RuntimeValue;
using onnx_light::core::runtime::Shape;
using onnx_light::core::runtime::ShapeNumel;
using onnx_light::core::runtime::Tensor;

class Op {
 public:
  explicit Op(const std::string& op_type, int64_t opset = 18, const std::string& domain = "")
      : opset_(opset), domain_(domain) {
    node_.set_op_type(op_type);
    node_.set_name("n_" + op_type);
    node_.set_domain(domain);
  }
  Op& Int(const std::string& name, int64_t v) {
    auto* a = node_.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
    return *this;
  }
  Op& Float(const std::string& name, float v) {
    auto* a = node_.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::FLOAT);
    a->set_f(v);
    return *this;
  }
  Op& Str(const std::string& name, const std::string& v) {
    auto* a = node_.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::STRING);
    a->set_s(v);
    return *this;
  }
  Op& Ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* a = node_.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
    return *this;
  }
  // Runs the kernel; std::nullopt inputs are omitted optional inputs.
  std::vector<Tensor> Run(const std::vector<std::optional<Tensor>>& inputs, int outputs = 1) {
    NodeProto node = node_;
    for (size_t i = 0; i < inputs.size(); ++i)
      node.add_input(inputs[i] ? "in" + std::to_string(i) : "");
    for (int i = 0; i < outputs; ++i) node.add_output("out" + std::to_string(i));
    RuntimeContext ctx(
        KernelContext(onnx_light::core::runtime::OpsetMap{{"", opset_}, {"com.microsoft", 1}}));
    int64_t since = 0;
    const auto* factory = onnx_light::core::runtime::BuiltinKernels().Find(
        domain_, node.op_type(), domain_.empty() ? opset_ : 1,
        onnx_light::core::symbolic::Device::kCPU, &since);
    REQUIRE(factory != nullptr);
    auto kernel =
        (*factory)(node, ctx, onnx_light::core::runtime::KernelInfo(node, ctx.kernel_ctx(), since));
    std::vector<RuntimeValue> in_values(inputs.size());
    std::vector<const RuntimeValue*> in_ptrs(inputs.size(), nullptr);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i]) continue;
      in_values[i] = RuntimeValue(*inputs[i]);
      in_ptrs[i] = &in_values[i];
    }
    std::vector<RuntimeValue> out_values(static_cast<size_t>(outputs));
    std::vector<RuntimeValue*> out_ptrs;
    for (auto& v : out_values) out_ptrs.push_back(&v);
    KernelCall call(&ctx, node, in_ptrs, out_ptrs);
    kernel->Compute(call);
    std::vector<Tensor> result;
    for (auto& v : out_values) result.push_back(v.empty() ? Tensor() : v.tensor());
    return result;
  }
  Tensor Run1(const std::vector<std::optional<Tensor>>& inputs) { return Run(inputs)[0]; }

 private:
  NodeProto node_;
  int64_t opset_;
  std::string domain_;
};

inline std::vector<float> Random(int64_t n, float lo = -1.f, float hi = 1.f, uint32_t seed = 7) {
  std::mt19937 gen(seed + static_cast<uint32_t>(n));
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

inline Tensor F32(const Shape& shape, std::vector<float> v) {
  return Tensor::FromFloat("t", shape, std::move(v));
}
inline Tensor RandF32(const Shape& shape, float lo = -1.f, float hi = 1.f, uint32_t seed = 7) {
  return F32(shape, Random(ShapeNumel(shape), lo, hi, seed));
}
inline Tensor I64(const Shape& shape, std::vector<int64_t> v) {
  return Tensor::FromInt64("t", shape, std::move(v));
}
// FLOAT16 / BFLOAT16 tensor from float values (rounded).
inline Tensor Half(DataType dt, const Shape& shape, const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    bits[i] = dt == DataType::kFloat16 ? onnx_light::core::FloatToHalf(v[i])
                                       : onnx_light::core::FloatToBFloat16(v[i]);
  return Tensor::FromVector("t", dt, shape, std::move(bits));
}
// Values rounded through a 16-bit type (what a FLOAT16/BFLOAT16 input really holds).
inline std::vector<float> RoundTo(DataType dt, std::vector<float> v) {
  for (auto& x : v)
    x = dt == DataType::kFloat16
            ? onnx_light::core::HalfToFloat(onnx_light::core::FloatToHalf(x))
            : onnx_light::core::BFloat16ToFloat(onnx_light::core::FloatToBFloat16(x));
  return v;
}

// Checks |actual - expected| <= atol + rtol * |expected| everywhere (NaN matches NaN).
inline void CheckClose(const std::vector<float>& actual, const std::vector<double>& expected,
                       double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    if (std::isinf(e) && a == e) continue;
    if (!(std::abs(a - e) <= atol + rtol * std::abs(e))) {
      INFO("first mismatch at index " << i << ": got " << a << ", expected " << e);
      CHECK(false);
      return;
    }
  }
}
inline std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace ops_math_test

namespace ops_math_test {
// Integer elements of any integer tensor, including the packed 4-bit and 2-bit types.
inline std::vector<int64_t> IntsOf(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DataType::kInt8:
        v.push_back(t.data<int8_t>()[i]);
        break;
      case DataType::kUint8:
        v.push_back(t.data<uint8_t>()[i]);
        break;
      case DataType::kInt16:
        v.push_back(t.data<int16_t>()[i]);
        break;
      case DataType::kUint16:
        v.push_back(t.data<uint16_t>()[i]);
        break;
      case DataType::kInt32:
        v.push_back(t.data<int32_t>()[i]);
        break;
      case DataType::kInt64:
        v.push_back(t.data<int64_t>()[i]);
        break;
      default:
        v.push_back(onnx_light::core::PackedGet(t.dtype(), t.raw_data(), i));
        break;
    }
  }
  return v;
}
}  // namespace ops_math_test
