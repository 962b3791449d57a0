// Printer for the ONNX textual syntax: the inverse of core/text_parser.h. Parsing the printed
// text gives back an equal message for everything the syntax can express. Not expressible, and
// dropped: doc strings other than the model's, metadata other than the model's, dimension
// denotations, node device configurations, training info. Tensors stored in raw_data are
// printed as values (they parse back into the typed fields). Sparse tensor attributes have no
// text form and raise Error(kNotImplemented). The onnx-light extensions (persistent bindings,
// paged-cache and encoded initializers, struct types, shared parameters) have none either:
// they are refused with Error(kInvalidModel) naming them (core/standard_onnx.h), never dropped.
#pragma once

#include <string>

#include "onnx_light.pb.h"

namespace onnx_light::core {

std::string PrintModel(const ModelProto& model);
std::string PrintGraph(const GraphProto& graph);
std::string PrintFunction(const FunctionProto& function);
std::string PrintNode(const NodeProto& node);

}  // namespace onnx_light::core
