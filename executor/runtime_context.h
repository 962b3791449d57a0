// RuntimeContext: what a caller configures once and reuses for many calls — the opsets
// (KernelContext), custom kernels, the allocator and the event log. Each run executes in a
// fresh child context so feeds and intermediates never leak into the caller's context.
// (Minimal version; the executor extends it.)
#pragma once

#include <memory>

#include "executor/kernel.h"
#include "executor/kernel_registry.h"

namespace onnx_light::core::runtime {

struct RuntimeContextOptions {
  bool events_enabled = false;
};

class RuntimeContext {
 public:
  explicit RuntimeContext(KernelContext kernel_ctx = KernelContext(18),
                          RuntimeContextOptions options = {});
  virtual ~RuntimeContext() = default;

  const KernelContext& kernel_ctx() const { return kernel_ctx_; }
  const RuntimeContextOptions& options() const { return options_; }
  Allocator& allocator() const { return *allocator_; }

  // Custom kernels, looked up before the built-ins.
  void RegisterKernelFn(const std::string& domain, const std::string& op_type,
                        symbolic::Device device, KernelFactory factory,
                        int64_t since_version = 1);
  const KernelRegistry& custom_kernels() const { return custom_kernels_; }

 private:
  KernelContext kernel_ctx_;
  RuntimeContextOptions options_;
  Allocator* allocator_ = &DefaultAllocator();
  KernelRegistry custom_kernels_;
};

template <class K>
std::unique_ptr<KernelBase> MakeKernel(const NodeProto& node, RuntimeContext& context) {
  auto kernel = std::make_unique<K>(context.kernel_ctx());
  kernel->set_node(node);
  return kernel;
}

}  // namespace onnx_light::core::runtime
