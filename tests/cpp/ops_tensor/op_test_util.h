// Runs one built-in kernel on tensors: builds the NodeProto, finds the kernel in
// BuiltinKernels() for the opset and calls Compute with a KernelCall.
#pragma once

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace ops_test {

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::core::DataType;

struct Op {
  NodeProto node;
  int64_t opset = 18;

  explicit Op(const std::string& op_type, int64_t opset_version = 18) : opset(opset_version) {
    node.set_op_type(op_type);
    node.set_name("n");
  }
  Op& Int(const std::string& name, int64_t v) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
    return *this;
  }
  Op& Float(const std::string& name, float v) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::FLOAT);
    a->set_f(v);
    return *this;
  }
  Op& Str(const std::string& name, const std::string& v) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::STRING);
    a->set_s(v);
    return *this;
  }
  Op& Ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
    return *this;
  }
  Op& Floats(const std::string& name, const std::vector<float>& v) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::FLOATS);
    for (float x : v) a->add_floats(x);
    return *this;
  }

  // Inputs may contain std::nullopt for omitted optional inputs.
  std::vector<RuntimeValue> Run(const std::vector<std::optional<Tensor>>& inputs,
                                int num_outputs = 1) {
    node.clear_input();
    node.clear_output();
    std::vector<RuntimeValue> in_values;
    in_values.reserve(inputs.size());
    std::vector<const RuntimeValue*> in_ptrs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i]) {
        node.add_input("in" + std::to_string(i));
        in_values.emplace_back(*inputs[i]);
        in_ptrs.push_back(&in_values.back());
      } else {
        node.add_input("");
        in_ptrs.push_back(nullptr);
      }
    }
    std::vector<RuntimeValue> outs(static_cast<size_t>(num_outputs));
    std::vector<RuntimeValue*> out_ptrs;
    for (int i = 0; i < num_outputs; ++i) {
      node.add_output("out" + std::to_string(i));
      out_ptrs.push_back(&outs[static_cast<size_t>(i)]);
    }
    RuntimeContext ctx{KernelContext(opset)};
    int64_t since = 0;
    const KernelFactory* factory = BuiltinKernels().Find(
        "", node.op_type(), opset, onnx_light::core::symbolic::Device::kCPU, &since);
    REQUIRE_MESSAGE(factory != nullptr, node.op_type());
    auto kernel = (*factory)(node, ctx, KernelInfo(node, ctx.kernel_ctx(), since));
    KernelCall call(&ctx, node, in_ptrs, out_ptrs);
    kernel->Compute(call);
    return outs;
  }

  Tensor Run1(const std::vector<std::optional<Tensor>>& inputs) {
    return Run(inputs, 1)[0].tensor();
  }
};

inline Tensor F(Shape shape, std::vector<float> v) {
  return Tensor::FromFloat("x", std::move(shape), std::move(v));
}
inline Tensor I64(Shape shape, std::vector<int64_t> v) {
  return Tensor::FromInt64("x", std::move(shape), std::move(v));
}
inline Tensor I32(Shape shape, std::vector<int32_t> v) {
  return Tensor::FromInt32("x", std::move(shape), std::move(v));
}
inline Tensor B(Shape shape, const std::vector<bool>& v) {
  return Tensor::FromBool("x", std::move(shape), v);
}
inline Tensor Half(Shape shape, const std::vector<float>& v) {
  std::vector<uint16_t> bits;
  for (float f : v) bits.push_back(onnx_light::core::FloatToHalf(f));
  return Tensor::FromVector("x", DataType::kFloat16, std::move(shape), std::move(bits));
}
template <typename T>
inline Tensor Typed(DataType dtype, Shape shape, std::vector<T> v) {
  return Tensor::FromVector("x", dtype, std::move(shape), std::move(v));
}
template <typename T>
inline std::vector<T> Values(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

// The message of the Error that `f` throws (and its code), or "" when it does not throw.
template <typename F>
std::string ErrorOf(F&& f, onnx_light::core::ErrorCode* code = nullptr) {
  try {
    f();
  } catch (const onnx_light::core::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

}  // namespace ops_test
