#include "core/onnx_arity.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

namespace {

struct Arity {
  std::string_view op;
  int since;
  int min_inputs, max_inputs;    // max -1: variadic
  int min_outputs, max_outputs;  // max -1: variadic
};

// Generated from onnx 1.23.2 (onnx.defs.get_all_schemas_with_history()) for the default
// domain operators of ops/op_list_*.inc; sorted by (op, since).
constexpr Arity kArity[] = {
    {"Abs", 1, 1, 1, 1, 1},
    {"Abs", 6, 1, 1, 1, 1},
    {"Abs", 13, 1, 1, 1, 1},
    {"Add", 1, 2, 2, 1, 1},
    {"Add", 6, 2, 2, 1, 1},
    {"Add", 7, 2, 2, 1, 1},
    {"Add", 13, 2, 2, 1, 1},
    {"Add", 14, 2, 2, 1, 1},
    {"And", 1, 2, 2, 1, 1},
    {"And", 7, 2, 2, 1, 1},
    {"ArgMax", 1, 1, 1, 1, 1},
    {"ArgMax", 11, 1, 1, 1, 1},
    {"ArgMax", 12, 1, 1, 1, 1},
    {"ArgMax", 13, 1, 1, 1, 1},
    {"Attention", 23, 3, 6, 1, 4},
    {"Attention", 24, 3, 7, 1, 4},
    {"Attention", 25, 3, 7, 1, 4},
    {"Cast", 1, 1, 1, 1, 1},
    {"Cast", 6, 1, 1, 1, 1},
    {"Cast", 9, 1, 1, 1, 1},
    {"Cast", 13, 1, 1, 1, 1},
    {"Cast", 19, 1, 1, 1, 1},
    {"Cast", 21, 1, 1, 1, 1},
    {"Cast", 23, 1, 1, 1, 1},
    {"Cast", 24, 1, 1, 1, 1},
    {"Cast", 25, 1, 1, 1, 1},
    {"Cast", 28, 1, 1, 1, 1},
    {"CastLike", 15, 2, 2, 1, 1},
    {"CastLike", 19, 2, 2, 1, 1},
    {"CastLike", 21, 2, 2, 1, 1},
    {"CastLike", 23, 2, 2, 1, 1},
    {"CastLike", 24, 2, 2, 1, 1},
    {"CastLike", 25, 2, 2, 1, 1},
    {"Ceil", 1, 1, 1, 1, 1},
    {"Ceil", 6, 1, 1, 1, 1},
    {"Ceil", 13, 1, 1, 1, 1},
    {"Concat", 1, 1, -1, 1, 1},
    {"Concat", 4, 1, -1, 1, 1},
    {"Concat", 11, 1, -1, 1, 1},
    {"Concat", 13, 1, -1, 1, 1},
    {"ConcatFromSequence", 11, 1, 1, 1, 1},
    {"Constant", 1, 0, 0, 1, 1},
    {"Constant", 9, 0, 0, 1, 1},
    {"Constant", 11, 0, 0, 1, 1},
    {"Constant", 12, 0, 0, 1, 1},
    {"Constant", 13, 0, 0, 1, 1},
    {"Constant", 19, 0, 0, 1, 1},
    {"Constant", 21, 0, 0, 1, 1},
    {"Constant", 23, 0, 0, 1, 1},
    {"Constant", 24, 0, 0, 1, 1},
    {"Constant", 25, 0, 0, 1, 1},
    {"ConstantOfShape", 9, 1, 1, 1, 1},
    {"ConstantOfShape", 20, 1, 1, 1, 1},
    {"ConstantOfShape", 21, 1, 1, 1, 1},
    {"ConstantOfShape", 23, 1, 1, 1, 1},
    {"ConstantOfShape", 24, 1, 1, 1, 1},
    {"ConstantOfShape", 25, 1, 1, 1, 1},
    {"Cos", 7, 1, 1, 1, 1},
    {"Cos", 22, 1, 1, 1, 1},
    {"CumSum", 11, 2, 2, 1, 1},
    {"CumSum", 14, 2, 2, 1, 1},
    {"DequantizeLinear", 10, 2, 3, 1, 1},
    {"DequantizeLinear", 13, 2, 3, 1, 1},
    {"DequantizeLinear", 19, 2, 3, 1, 1},
    {"DequantizeLinear", 21, 2, 3, 1, 1},
    {"DequantizeLinear", 23, 2, 3, 1, 1},
    {"DequantizeLinear", 24, 2, 3, 1, 1},
    {"DequantizeLinear", 25, 2, 3, 1, 1},
    {"DequantizeLinear", 28, 2, 3, 1, 1},
    {"Div", 1, 2, 2, 1, 1},
    {"Div", 6, 2, 2, 1, 1},
    {"Div", 7, 2, 2, 1, 1},
    {"Div", 13, 2, 2, 1, 1},
    {"Div", 14, 2, 2, 1, 1},
    {"Dropout", 1, 1, 1, 1, 2},
    {"Dropout", 6, 1, 1, 1, 2},
    {"Dropout", 7, 1, 1, 1, 2},
    {"Dropout", 10, 1, 1, 1, 2},
    {"Dropout", 12, 1, 3, 1, 2},
    {"Dropout", 13, 1, 3, 1, 2},
    {"Dropout", 22, 1, 3, 1, 2},
    {"Equal", 1, 2, 2, 1, 1},
    {"Equal", 7, 2, 2, 1, 1},
    {"Equal", 11, 2, 2, 1, 1},
    {"Equal", 13, 2, 2, 1, 1},
    {"Equal", 19, 2, 2, 1, 1},
    {"Erf", 9, 1, 1, 1, 1},
    {"Erf", 13, 1, 1, 1, 1},
    {"Exp", 1, 1, 1, 1, 1},
    {"Exp", 6, 1, 1, 1, 1},
    {"Exp", 13, 1, 1, 1, 1},
    {"Expand", 8, 2, 2, 1, 1},
    {"Expand", 13, 2, 2, 1, 1},
    {"EyeLike", 9, 1, 1, 1, 1},
    {"EyeLike", 22, 1, 1, 1, 1},
    {"Flatten", 1, 1, 1, 1, 1},
    {"Flatten", 9, 1, 1, 1, 1},
    {"Flatten", 11, 1, 1, 1, 1},
    {"Flatten", 13, 1, 1, 1, 1},
    {"Flatten", 21, 1, 1, 1, 1},
    {"Flatten", 23, 1, 1, 1, 1},
    {"Flatten", 24, 1, 1, 1, 1},
    {"Flatten", 25, 1, 1, 1, 1},
    {"Floor", 1, 1, 1, 1, 1},
    {"Floor", 6, 1, 1, 1, 1},
    {"Floor", 13, 1, 1, 1, 1},
    {"Gather", 1, 2, 2, 1, 1},
    {"Gather", 11, 2, 2, 1, 1},
    {"Gather", 13, 2, 2, 1, 1},
    {"GatherElements", 11, 2, 2, 1, 1},
    {"GatherElements", 13, 2, 2, 1, 1},
    {"GatherND", 11, 2, 2, 1, 1},
    {"GatherND", 12, 2, 2, 1, 1},
    {"GatherND", 13, 2, 2, 1, 1},
    {"Gelu", 20, 1, 1, 1, 1},
    {"Gemm", 1, 3, 3, 1, 1},
    {"Gemm", 6, 3, 3, 1, 1},
    {"Gemm", 7, 3, 3, 1, 1},
    {"Gemm", 9, 3, 3, 1, 1},
    {"Gemm", 11, 2, 3, 1, 1},
    {"Gemm", 13, 2, 3, 1, 1},
    {"Greater", 1, 2, 2, 1, 1},
    {"Greater", 7, 2, 2, 1, 1},
    {"Greater", 9, 2, 2, 1, 1},
    {"Greater", 13, 2, 2, 1, 1},
    {"GreaterOrEqual", 12, 2, 2, 1, 1},
    {"GreaterOrEqual", 16, 2, 2, 1, 1},
    {"HardSigmoid", 1, 1, 1, 1, 1},
    {"HardSigmoid", 6, 1, 1, 1, 1},
    {"HardSigmoid", 22, 1, 1, 1, 1},
    {"Identity", 1, 1, 1, 1, 1},
    {"Identity", 13, 1, 1, 1, 1},
    {"Identity", 14, 1, 1, 1, 1},
    {"Identity", 16, 1, 1, 1, 1},
    {"Identity", 19, 1, 1, 1, 1},
    {"Identity", 21, 1, 1, 1, 1},
    {"Identity", 23, 1, 1, 1, 1},
    {"Identity", 24, 1, 1, 1, 1},
    {"Identity", 25, 1, 1, 1, 1},
    {"If", 1, 1, 1, 1, -1},
    {"If", 11, 1, 1, 1, -1},
    {"If", 13, 1, 1, 1, -1},
    {"If", 16, 1, 1, 1, -1},
    {"If", 19, 1, 1, 1, -1},
    {"If", 21, 1, 1, 1, -1},
    {"If", 23, 1, 1, 1, -1},
    {"If", 24, 1, 1, 1, -1},
    {"If", 25, 1, 1, 1, -1},
    {"IsInf", 10, 1, 1, 1, 1},
    {"IsInf", 20, 1, 1, 1, 1},
    {"IsNaN", 9, 1, 1, 1, 1},
    {"IsNaN", 13, 1, 1, 1, 1},
    {"IsNaN", 20, 1, 1, 1, 1},
    {"LayerNormalization", 17, 2, 3, 1, 3},
    {"Less", 1, 2, 2, 1, 1},
    {"Less", 7, 2, 2, 1, 1},
    {"Less", 9, 2, 2, 1, 1},
    {"Less", 13, 2, 2, 1, 1},
    {"LessOrEqual", 12, 2, 2, 1, 1},
    {"LessOrEqual", 16, 2, 2, 1, 1},
    {"Log", 1, 1, 1, 1, 1},
    {"Log", 6, 1, 1, 1, 1},
    {"Log", 13, 1, 1, 1, 1},
    {"LogSoftmax", 1, 1, 1, 1, 1},
    {"LogSoftmax", 11, 1, 1, 1, 1},
    {"LogSoftmax", 13, 1, 1, 1, 1},
    {"Loop", 1, 3, -1, 1, -1},
    {"Loop", 11, 2, -1, 1, -1},
    {"Loop", 13, 2, -1, 1, -1},
    {"Loop", 16, 2, -1, 1, -1},
    {"Loop", 19, 2, -1, 1, -1},
    {"Loop", 21, 2, -1, 1, -1},
    {"Loop", 23, 2, -1, 1, -1},
    {"Loop", 24, 2, -1, 1, -1},
    {"Loop", 25, 2, -1, 1, -1},
    {"MatMul", 1, 2, 2, 1, 1},
    {"MatMul", 9, 2, 2, 1, 1},
    {"MatMul", 13, 2, 2, 1, 1},
    {"Max", 1, 1, -1, 1, 1},
    {"Max", 6, 1, -1, 1, 1},
    {"Max", 8, 1, -1, 1, 1},
    {"Max", 12, 1, -1, 1, 1},
    {"Max", 13, 1, -1, 1, 1},
    {"Min", 1, 1, -1, 1, 1},
    {"Min", 6, 1, -1, 1, 1},
    {"Min", 8, 1, -1, 1, 1},
    {"Min", 12, 1, -1, 1, 1},
    {"Min", 13, 1, -1, 1, 1},
    {"Mod", 10, 2, 2, 1, 1},
    {"Mod", 13, 2, 2, 1, 1},
    {"Mod", 28, 2, 2, 1, 1},
    {"Mul", 1, 2, 2, 1, 1},
    {"Mul", 6, 2, 2, 1, 1},
    {"Mul", 7, 2, 2, 1, 1},
    {"Mul", 13, 2, 2, 1, 1},
    {"Mul", 14, 2, 2, 1, 1},
    {"Neg", 1, 1, 1, 1, 1},
    {"Neg", 6, 1, 1, 1, 1},
    {"Neg", 13, 1, 1, 1, 1},
    {"NonZero", 9, 1, 1, 1, 1},
    {"NonZero", 13, 1, 1, 1, 1},
    {"Not", 1, 1, 1, 1, 1},
    {"OneHot", 9, 3, 3, 1, 1},
    {"OneHot", 11, 3, 3, 1, 1},
    {"OneHot", 28, 3, 3, 1, 1},
    {"Or", 1, 2, 2, 1, 1},
    {"Or", 7, 2, 2, 1, 1},
    {"Pad", 1, 1, 1, 1, 1},
    {"Pad", 2, 1, 1, 1, 1},
    {"Pad", 11, 2, 3, 1, 1},
    {"Pad", 13, 2, 3, 1, 1},
    {"Pad", 18, 2, 4, 1, 1},
    {"Pad", 19, 2, 4, 1, 1},
    {"Pad", 21, 2, 4, 1, 1},
    {"Pad", 23, 2, 4, 1, 1},
    {"Pad", 24, 2, 4, 1, 1},
    {"Pad", 25, 2, 4, 1, 1},
    {"Pow", 1, 2, 2, 1, 1},
    {"Pow", 7, 2, 2, 1, 1},
    {"Pow", 12, 2, 2, 1, 1},
    {"Pow", 13, 2, 2, 1, 1},
    {"Pow", 15, 2, 2, 1, 1},
    {"QuantizeLinear", 10, 2, 3, 1, 1},
    {"QuantizeLinear", 13, 2, 3, 1, 1},
    {"QuantizeLinear", 19, 2, 3, 1, 1},
    {"QuantizeLinear", 21, 2, 3, 1, 1},
    {"QuantizeLinear", 23, 2, 3, 1, 1},
    {"QuantizeLinear", 24, 2, 3, 1, 1},
    {"QuantizeLinear", 25, 2, 3, 1, 1},
    {"QuantizeLinear", 28, 2, 3, 1, 1},
    {"RMSNormalization", 23, 2, 2, 1, 1},
    {"Range", 11, 3, 3, 1, 1},
    {"Range", 27, 3, 3, 1, 1},
    {"Reciprocal", 1, 1, 1, 1, 1},
    {"Reciprocal", 6, 1, 1, 1, 1},
    {"Reciprocal", 13, 1, 1, 1, 1},
    {"ReduceMax", 1, 1, 1, 1, 1},
    {"ReduceMax", 11, 1, 1, 1, 1},
    {"ReduceMax", 12, 1, 1, 1, 1},
    {"ReduceMax", 13, 1, 1, 1, 1},
    {"ReduceMax", 18, 1, 2, 1, 1},
    {"ReduceMax", 20, 1, 2, 1, 1},
    {"ReduceMean", 1, 1, 1, 1, 1},
    {"ReduceMean", 11, 1, 1, 1, 1},
    {"ReduceMean", 13, 1, 1, 1, 1},
    {"ReduceMean", 18, 1, 2, 1, 1},
    {"ReduceSum", 1, 1, 1, 1, 1},
    {"ReduceSum", 11, 1, 1, 1, 1},
    {"ReduceSum", 13, 1, 2, 1, 1},
    {"Relu", 1, 1, 1, 1, 1},
    {"Relu", 6, 1, 1, 1, 1},
    {"Relu", 13, 1, 1, 1, 1},
    {"Relu", 14, 1, 1, 1, 1},
    {"Reshape", 1, 1, 1, 1, 1},
    {"Reshape", 5, 2, 2, 1, 1},
    {"Reshape", 13, 2, 2, 1, 1},
    {"Reshape", 14, 2, 2, 1, 1},
    {"Reshape", 19, 2, 2, 1, 1},
    {"Reshape", 21, 2, 2, 1, 1},
    {"Reshape", 23, 2, 2, 1, 1},
    {"Reshape", 24, 2, 2, 1, 1},
    {"Reshape", 25, 2, 2, 1, 1},
    {"RotaryEmbedding", 23, 3, 4, 1, 1},
    {"Round", 11, 1, 1, 1, 1},
    {"Round", 22, 1, 1, 1, 1},
    {"Scan", 8, 2, -1, 1, -1},
    {"Scan", 9, 1, -1, 1, -1},
    {"Scan", 11, 1, -1, 1, -1},
    {"Scan", 16, 1, -1, 1, -1},
    {"Scan", 19, 1, -1, 1, -1},
    {"Scan", 21, 1, -1, 1, -1},
    {"Scan", 23, 1, -1, 1, -1},
    {"Scan", 24, 1, -1, 1, -1},
    {"Scan", 25, 1, -1, 1, -1},
    {"ScatterElements", 11, 3, 3, 1, 1},
    {"ScatterElements", 13, 3, 3, 1, 1},
    {"ScatterElements", 16, 3, 3, 1, 1},
    {"ScatterElements", 18, 3, 3, 1, 1},
    {"ScatterND", 11, 3, 3, 1, 1},
    {"ScatterND", 13, 3, 3, 1, 1},
    {"ScatterND", 16, 3, 3, 1, 1},
    {"ScatterND", 18, 3, 3, 1, 1},
    {"SequenceAt", 11, 2, 2, 1, 1},
    {"SequenceConstruct", 11, 1, -1, 1, 1},
    {"SequenceEmpty", 11, 0, 0, 1, 1},
    {"SequenceErase", 11, 1, 2, 1, 1},
    {"SequenceInsert", 11, 2, 3, 1, 1},
    {"SequenceLength", 11, 1, 1, 1, 1},
    {"Shape", 1, 1, 1, 1, 1},
    {"Shape", 13, 1, 1, 1, 1},
    {"Shape", 15, 1, 1, 1, 1},
    {"Shape", 19, 1, 1, 1, 1},
    {"Shape", 21, 1, 1, 1, 1},
    {"Shape", 23, 1, 1, 1, 1},
    {"Shape", 24, 1, 1, 1, 1},
    {"Shape", 25, 1, 1, 1, 1},
    {"Sigmoid", 1, 1, 1, 1, 1},
    {"Sigmoid", 6, 1, 1, 1, 1},
    {"Sigmoid", 13, 1, 1, 1, 1},
    {"Sign", 9, 1, 1, 1, 1},
    {"Sign", 13, 1, 1, 1, 1},
    {"Sin", 7, 1, 1, 1, 1},
    {"Sin", 22, 1, 1, 1, 1},
    {"Size", 1, 1, 1, 1, 1},
    {"Size", 13, 1, 1, 1, 1},
    {"Size", 19, 1, 1, 1, 1},
    {"Size", 21, 1, 1, 1, 1},
    {"Size", 23, 1, 1, 1, 1},
    {"Size", 24, 1, 1, 1, 1},
    {"Size", 25, 1, 1, 1, 1},
    {"Slice", 1, 1, 1, 1, 1},
    {"Slice", 10, 3, 5, 1, 1},
    {"Slice", 11, 3, 5, 1, 1},
    {"Slice", 13, 3, 5, 1, 1},
    {"Softmax", 1, 1, 1, 1, 1},
    {"Softmax", 11, 1, 1, 1, 1},
    {"Softmax", 13, 1, 1, 1, 1},
    {"Softplus", 1, 1, 1, 1, 1},
    {"Softplus", 22, 1, 1, 1, 1},
    {"Split", 1, 1, 2, 1, -1},
    {"Split", 2, 1, 1, 1, -1},
    {"Split", 11, 1, 1, 1, -1},
    {"Split", 13, 1, 2, 1, -1},
    {"Split", 18, 1, 2, 1, -1},
    {"SplitToSequence", 11, 1, 2, 1, 1},
    {"SplitToSequence", 24, 1, 2, 1, 1},
    {"Sqrt", 1, 1, 1, 1, 1},
    {"Sqrt", 6, 1, 1, 1, 1},
    {"Sqrt", 13, 1, 1, 1, 1},
    {"Squeeze", 1, 1, 1, 1, 1},
    {"Squeeze", 11, 1, 1, 1, 1},
    {"Squeeze", 13, 1, 2, 1, 1},
    {"Squeeze", 21, 1, 2, 1, 1},
    {"Squeeze", 23, 1, 2, 1, 1},
    {"Squeeze", 24, 1, 2, 1, 1},
    {"Squeeze", 25, 1, 2, 1, 1},
    {"Sub", 1, 2, 2, 1, 1},
    {"Sub", 6, 2, 2, 1, 1},
    {"Sub", 7, 2, 2, 1, 1},
    {"Sub", 13, 2, 2, 1, 1},
    {"Sub", 14, 2, 2, 1, 1},
    {"Tanh", 1, 1, 1, 1, 1},
    {"Tanh", 6, 1, 1, 1, 1},
    {"Tanh", 13, 1, 1, 1, 1},
    {"Tile", 1, 3, 3, 1, 1},
    {"Tile", 6, 2, 2, 1, 1},
    {"Tile", 13, 2, 2, 1, 1},
    {"TopK", 1, 1, 1, 2, 2},
    {"TopK", 10, 2, 2, 2, 2},
    {"TopK", 11, 2, 2, 2, 2},
    {"TopK", 24, 2, 2, 2, 2},
    {"Transpose", 1, 1, 1, 1, 1},
    {"Transpose", 13, 1, 1, 1, 1},
    {"Transpose", 21, 1, 1, 1, 1},
    {"Transpose", 23, 1, 1, 1, 1},
    {"Transpose", 24, 1, 1, 1, 1},
    {"Transpose", 25, 1, 1, 1, 1},
    {"Trilu", 14, 1, 2, 1, 1},
    {"Unsqueeze", 1, 1, 1, 1, 1},
    {"Unsqueeze", 11, 1, 1, 1, 1},
    {"Unsqueeze", 13, 2, 2, 1, 1},
    {"Unsqueeze", 21, 2, 2, 1, 1},
    {"Unsqueeze", 23, 2, 2, 1, 1},
    {"Unsqueeze", 24, 2, 2, 1, 1},
    {"Unsqueeze", 25, 2, 2, 1, 1},
    {"Where", 9, 3, 3, 1, 1},
    {"Where", 16, 3, 3, 1, 1},
    {"Xor", 1, 2, 2, 1, 1},
    {"Xor", 7, 2, 2, 1, 1},
};

// The schema in force for `op` at `version`, or null when the table does not know it.
const Arity* Find(std::string_view op, int64_t version) {
  const Arity* found = nullptr;
  for (const Arity& a : kArity)
    if (a.op == op && a.since <= version) found = &a;
  return found;
}

int64_t DefaultOpset(const google::protobuf::RepeatedPtrField<OperatorSetIdProto>& imports,
                     int64_t fallback) {
  for (const auto& op : imports)
    if (op.domain().empty() || op.domain() == "ai.onnx") return op.version();
  return fallback;
}

// The standard operators with graph attributes (bodies and branches).
bool TakesGraphs(std::string_view op) {
  return op == "If" || op == "Loop" || op == "Scan" || op == "SequenceMap";
}

constexpr int kMaxGraphDepth = 64;  // subgraph nesting bound (the walk recurses)

void CheckGraph(const GraphProto& graph, int64_t version, int depth);

void CheckNode(const NodeProto& node, int64_t version, int depth) {
  const std::string label = node.op_type() + " node '" + node.name() + "'";
  if (node.domain().empty() || node.domain() == "ai.onnx") {
    if (const Arity* a = Find(node.op_type(), version)) {
      OL_CHECK(node.input_size() >= a->min_inputs, ErrorCode::kInvalidModel,
               label + ": has " + std::to_string(node.input_size()) + " inputs, but " +
                   node.op_type() + "-" + std::to_string(a->since) + " takes at least " +
                   std::to_string(a->min_inputs));
      OL_CHECK(node.output_size() >= a->min_outputs, ErrorCode::kInvalidModel,
               label + ": has " + std::to_string(node.output_size()) + " outputs, but " +
                   node.op_type() + "-" + std::to_string(a->since) + " produces at least " +
                   std::to_string(a->min_outputs));
      // A graph attribute makes the values its body captures inputs of the node (after the
      // explicit ones), where another operator's kernel would read them as its own.
      for (const auto& attr : node.attribute())
        OL_CHECK(TakesGraphs(node.op_type()) || (!attr.has_g() && attr.graphs_size() == 0),
                 ErrorCode::kInvalidModel,
                 label + ": attribute '" + attr.name() + "' is a graph, which " + node.op_type() +
                     " does not take");
      OL_CHECK(a->max_inputs < 0 || node.input_size() <= a->max_inputs, ErrorCode::kInvalidModel,
               label + ": has " + std::to_string(node.input_size()) + " inputs, but " +
                   node.op_type() + "-" + std::to_string(a->since) + " takes at most " +
                   std::to_string(a->max_inputs));
      OL_CHECK(a->max_outputs < 0 || node.output_size() <= a->max_outputs, ErrorCode::kInvalidModel,
               label + ": has " + std::to_string(node.output_size()) + " outputs, but " +
                   node.op_type() + "-" + std::to_string(a->since) + " produces at most " +
                   std::to_string(a->max_outputs));
    }
  }
  for (const auto& attr : node.attribute()) {
    if (attr.has_g()) CheckGraph(attr.g(), version, depth + 1);
    for (const auto& g : attr.graphs()) CheckGraph(g, version, depth + 1);
  }
}

void CheckGraph(const GraphProto& graph, int64_t version, int depth) {
  OL_CHECK(depth <= kMaxGraphDepth, ErrorCode::kInvalidModel,
           "graph '" + graph.name() + "': subgraphs nest more than " +
               std::to_string(kMaxGraphDepth) + " levels deep");
  for (const auto& node : graph.node()) CheckNode(node, version, depth);
}

}  // namespace

void CheckNodeArity(const ModelProto& model) {
  const int64_t version = DefaultOpset(model.opset_import(), 0);
  CheckGraph(model.graph(), version, 0);
  for (const auto& f : model.functions()) {
    const int64_t fv = DefaultOpset(f.opset_import(), version);
    for (const auto& node : f.node()) CheckNode(node, fv, 0);
  }
}

}  // namespace onnx_light::core
