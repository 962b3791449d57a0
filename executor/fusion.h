// Plan-time fusions: subgraphs that exporters write as many small nodes, replaced by one
// node of a kernel the plan knows (domain ai.onnx_light.fused, ops/op_list_fused.inc).
// A fusion never changes what the graph computes: it matches only when every value inside
// the subgraph is read by the subgraph alone (not by other nodes, not a graph output), and
// the substitute kernel checks at run time the shapes the subgraph's structure cannot fix.
//
// Patterns:
//  - scaled dot-product attention as torch exports it (GQA head repeat by Unsqueeze/
//    Expand/Reshape, K transposed by Reshape/Transpose/Reshape or one Transpose, scalar
//    Muls of Q and K, MatMul, optional additive mask, Softmax, optional IsNaN/Where that
//    zeroes fully masked rows, optional Cast to FLOAT, MatMul with V) ->
//    ScaledDotProductAttention. Shapes of the repeated K/V read elsewhere for their batch,
//    length or head size (the TorchScript exporter's reshape of the output) are rewired to
//    read the un-repeated K/V.
//  - RMS normalisation, rotary embedding by halves, SiLU gating -> RMSNormalization,
//    RotaryHalf, SiluMul.
//  - MatMuls of one input by several dense FLOAT constant weights with the same K (Q/K/V,
//    gate/up) -> MatMulGroup, one product over the weights side by side.
//  - com.microsoft MatMulNBits of one input by constant weights with one K, bits, block
//    size, accuracy level and zero-point kind (the Hub's int4 files, whose quantizer keeps
//    Q/K/V and gate/up apart) -> MatMulNBitsGroup, one pass over their packed columns.
//  - MatMul(A, DequantizeLinear(W)) of a constant 4- or 8-bit weight blocked along K ->
//    DequantizeMatMul, which multiplies by the packed quantized weight (the plan does not
//    fold such a DequantizeLinear: PackableDequantize).
//  - Mul(Cast(MatMulInteger(A, W)), Mul(a_scale, w_scale)) after a DynamicQuantizeLinear of
//    a constant 8-bit W (onnxruntime's quantize_dynamic) -> MatMulIntegerToFloat.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

// Input `input` of graph node `node` (which stays) reads `name` instead.
struct Rewire {
  int node = -1;
  int input = 0;
  std::string name;
};

struct Fusion {
  std::vector<int> removed;  // graph node indices replaced
  NodeProto node;            // the substitute; its outputs are outputs of replaced nodes
  // Nodes outside that read a removed value for what the substitute's inputs give as well
  // (a Shape of the repeated V whose used dimensions the repeat does not change).
  std::vector<Rewire> rewired;
  // Where the substitute runs: where the last replaced node ran, or (for a group of
  // independent nodes whose inputs are all ready before the first) where the first ran.
  bool run_at_first = false;
};

// Whether `dq` is a DequantizeLinear that DequantizeMatMul can take as its MatMul's B: x a
// constant [K, N] INT4/UINT4/INT8/UINT8 with FLOAT scales either blocked along K (axis 0,
// block_size 16..256, a power of two, scale [ceil(K / block), N]), per output column (axis 1,
// scale [N]) or per tensor (one scale); zero point absent or of x's type and the scale's
// shape; FLOAT output.
// The block DequantizeMatMul is given for per-column and per-tensor scales (any size works:
// every block of a column has the same scale; larger blocks mean fewer scale products).
inline constexpr int64_t kWholeColumnBlock = 128;
bool PackableDequantize(const NodeProto& dq, const Tensor* x, const Tensor* scale,
                        const Tensor* zero_point);

// `alive[i]`: node i is still to run (not folded). `constant(name)`: the plan constant of
// that name, or null. `graph_output(name)`: whether the graph returns it.
std::vector<Fusion> FindFusions(const GraphProto& graph, const std::vector<bool>& alive,
                                const std::function<const Tensor*(const std::string&)>& constant,
                                const std::function<bool(const std::string&)>& graph_output);

}  // namespace onnx_light::core::runtime
