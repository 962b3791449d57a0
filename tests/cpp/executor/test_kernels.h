// Test-only kernels registered on a context (domain "test"), so executor tests do not depend
// on the built-in math kernels, plus helpers to write models in protobuf text format.
#pragma once

#include <google/protobuf/text_format.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/attributes.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace onnx_light::testing {

using namespace onnx_light::core::runtime;

inline std::shared_ptr<ModelProto> ParseModelText(const std::string& text) {
  auto model = std::make_shared<ModelProto>();
  if (!google::protobuf::TextFormat::ParseFromString(text, model.get()))
    throw std::runtime_error("bad model text");
  return model;
}

// Counts live bytes handed out (the test checks intermediates are released).
class CountingAllocator final : public Allocator {
 public:
  std::shared_ptr<void> Allocate(size_t bytes) override {
    auto inner = DefaultAllocator().Allocate(bytes);
    const size_t now = live_ += bytes;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    ++allocations_;
    void* p = inner.get();
    return std::shared_ptr<void>(p, [this, inner, bytes](void*) mutable {
      live_ -= bytes;
      inner.reset();
    });
  }
  const char* name() const override { return "counting"; }
  size_t live() const { return live_.load(); }
  size_t live_bytes() const override { return live_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }
  size_t allocations() const { return allocations_.load(); }

 private:
  std::atomic<size_t> live_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<size_t> allocations_{0};
};

// Shared observation state of the test kernels.
struct Probe {
  std::atomic<int> executed{0};
  std::mutex mu;
  std::vector<std::string> order;     // node names in execution order
  std::vector<size_t> live_at_start;  // allocator live bytes when each node started
  CountingAllocator* allocator = nullptr;
  std::string fail_node;                       // "Step" nodes with this name throw
  std::atomic<bool>* cancel_on_run = nullptr;  // set by the node named cancel_node
  std::string cancel_node;
};

// test::Step(x [, y...]) -> sum of inputs + attribute `add` (default 1), float tensors.
class StepKernel final : public KernelBase {
 public:
  explicit StepKernel(Probe& probe) : probe_(probe) {}
  void Configure(const NodeProto& node) override { add_ = AttrFloat(node, "add", 1.f); }
  void Compute(KernelCall& call) const override {
    const std::string& name = call.node().name();
    {
      std::lock_guard<std::mutex> lock(probe_.mu);
      probe_.order.push_back(name);
      if (probe_.allocator) probe_.live_at_start.push_back(probe_.allocator->live());
    }
    ++probe_.executed;
    if (name == probe_.fail_node) core::Throw(core::ErrorCode::kNotImplemented, "boom at " + name);
    if (probe_.cancel_on_run != nullptr && name == probe_.cancel_node)
      probe_.cancel_on_run->store(true);
    const Tensor& x = call.input(0);
    Tensor& y = call.AllocateOutput(0, core::DataType::kFloat, x.shape());
    float* out = y.mutable_data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = x.data<float>()[i] + add_;
    for (size_t k = 1; k < call.input_count(); ++k)
      if (call.has_input(k))
        for (int64_t i = 0; i < x.numel(); ++i) out[i] += call.input(k).data<float>()[i];
  }

 private:
  Probe& probe_;
  float add_ = 1.f;
};

inline void RegisterTestKernels(RuntimeContext& ctx, Probe& probe) {
  ctx.RegisterKernelFn("test", "Step", core::symbolic::Device::kCPU,
                       [&probe](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                         auto k = std::make_unique<StepKernel>(probe);
                         k->set_node(node);
                         return std::unique_ptr<KernelBase>(std::move(k));
                       });
}

inline Tensor Floats(std::string name, Shape shape, std::vector<float> v) {
  return Tensor::FromFloat(std::move(name), std::move(shape), std::move(v));
}

}  // namespace onnx_light::testing
