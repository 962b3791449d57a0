#include "executor/runtime_context.h"

namespace onnx_light::core::runtime {

RuntimeContext::RuntimeContext(KernelContext kernel_ctx, RuntimeContextOptions options)
    : kernel_ctx_(std::move(kernel_ctx)), options_(options) {}

void RuntimeContext::RegisterKernelFn(const std::string& domain, const std::string& op_type,
                                      symbolic::Device device, KernelFactory factory,
                                      int64_t since_version) {
  custom_kernels_.Register(domain, op_type, device, std::move(factory), since_version);
}

}  // namespace onnx_light::core::runtime
