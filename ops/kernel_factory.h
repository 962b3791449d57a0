// Each kernel file ends with OL_KERNEL_FACTORY(Class): the factory that ops/op_list.cc
// registers for it (one line per kernel in ops/op_list_*.inc).
#pragma once

#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

#define OL_KERNEL_FACTORY(Class)                                                             \
  std::unique_ptr<::onnx_light::core::runtime::KernelBase> Make##Class(                      \
      const ::onnx_light::NodeProto& node, ::onnx_light::core::runtime::RuntimeContext& ctx, \
      const ::onnx_light::core::runtime::KernelInfo& info) {                                 \
    return ::onnx_light::core::runtime::MakeKernel<Class>(node, ctx, info);                  \
  }
