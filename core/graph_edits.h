// Legacy-style whole-graph edits, after onnx.utils.extract_model and onnx.compose's
// add_prefix / merge_models, for ordinary models. They cannot keep the persistence contract
// (spec "Serialized cache values"), so a model with paged_cache_initializer or persistent
// bindings is refused with Error(kInvalidModel) naming them, never silently losing them: use
// GraphBuilder (core/graph_builder.h) for supported edits of such models. Inputs and results
// are validated with CheckModel; bad arguments raise Error(kInvalidArgument).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "onnx_light.pb.h"

namespace onnx_light::core {

// The sub-model computing `output_names` from `input_names` (values of the graph): the nodes
// needed in their original order, the initializers and value_info they use. Every graph input
// the outputs depend on must be listed.
ModelProto ExtractModel(const ModelProto& model, const std::vector<std::string>& input_names,
                        const std::vector<std::string>& output_names);

// `model` with `prefix` before every value name and node name of its graphs (inputs, outputs,
// initializers, value_info, node inputs and outputs, nested graphs). Functions are unchanged.
ModelProto AddPrefix(const ModelProto& model, const std::string& prefix);

// One model running `first` then `second`, each pair of `io_map` (first output, second
// input) connecting them. Inputs: first's, then second's unconnected ones; outputs: first's
// unconnected ones, then second's. Value names must not collide (AddPrefix one of them);
// opset versions of a shared domain must agree.
ModelProto MergeModels(const ModelProto& first, const ModelProto& second,
                       const std::vector<std::pair<std::string, std::string>>& io_map);

}  // namespace onnx_light::core
