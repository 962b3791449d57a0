// Conversions between TensorProto and Tensor. Raw data is borrowed (zero copy) when the
// proto outlives the tensor through `owner`; typed fields are converted into owned storage.
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"

namespace onnx_light {
class TensorProto;
}

namespace onnx_light::core::runtime {

// `owner` keeps `proto` alive (e.g. the model's shared_ptr); null means convert into owned
// storage. External data must have been loaded (see core/model_io.h) or `base_dir` given.
Tensor TensorFromProto(const TensorProto& proto, std::shared_ptr<const void> owner = nullptr,
                       const std::string& base_dir = "");
void TensorToProto(const Tensor& tensor, TensorProto* proto);

}  // namespace onnx_light::core::runtime
