// The explicit list of built-in kernels. Each ops/op_list_*.inc line is
//   OL_OP(domain, op_type, since_version, Class)
// and the kernel file ops/<area>/<op>.cc defines Class and OL_KERNEL_FACTORY(Class) in
// namespace onnx_light::ops. Several .inc files only so that parallel work never collides.
#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops {
using core::runtime::KernelBase;
using core::runtime::KernelInfo;
using core::runtime::RuntimeContext;
#define OL_OP(domain, op_type, since, Class)                                          \
  std::unique_ptr<KernelBase> Make##Class(const NodeProto& node, RuntimeContext& ctx, \
                                          const KernelInfo& info);
#include "ops/op_list_ai_rt.inc"
#include "ops/op_list_attention.inc"
#include "ops/op_list_contrib.inc"
#include "ops/op_list_control.inc"
#include "ops/op_list_fused.inc"
#include "ops/op_list_math.inc"
#include "ops/op_list_sequence.inc"
#include "ops/op_list_tensor.inc"
#undef OL_OP
}  // namespace onnx_light::ops

namespace onnx_light::core::runtime {

const KernelRegistry& BuiltinKernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
#define OL_OP(domain, op_type, since, Class) \
  r.Register(domain, op_type, symbolic::Device::kCPU, &ops::Make##Class, since);
#include "ops/op_list_ai_rt.inc"
#include "ops/op_list_attention.inc"
#include "ops/op_list_contrib.inc"
#include "ops/op_list_control.inc"
#include "ops/op_list_fused.inc"
#include "ops/op_list_math.inc"
#include "ops/op_list_sequence.inc"
#include "ops/op_list_tensor.inc"
#undef OL_OP
    return r;
  }();
  return registry;
}

}  // namespace onnx_light::core::runtime
