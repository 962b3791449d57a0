// A small decoder whose ai.rt::PagedAttention reads a sequence of row caches bound
// past <- present (continuous batching's test model, state/batch_rows.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "core/tensor.h"
#include "onnx_light.pb.h"
#include "ops/ai_rt/paged_attention.h"
#include "state/request_scheduler.h"
#include "submit_gate.h"

namespace test_util {

using namespace onnx_light;

constexpr int64_t kVocab = 40, kHidden = 16, kHeads = 4, kKvHeads = 2, kHeadSize = 8;

inline float Noise(uint32_t seed, int64_t i) {
  uint32_t x = seed * 2654435761u + static_cast<uint32_t>(i) * 40503u + 12345u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x % 20000u) / 10000.0f - 1.0f;
}

inline void AddNode(GraphProto* g, const std::string& op, std::vector<std::string> inputs,
                    std::vector<std::string> outputs, const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_domain(domain);
  n->set_name(outputs.front());
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
}

inline void AddWeight(GraphProto* g, const std::string& name, std::vector<int64_t> dims,
                      uint32_t seed, float scale) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t->add_float_data(scale * Noise(seed, i));
}

inline void AddInts(GraphProto* g, const std::string& name, std::vector<int64_t> values) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
}

inline void AddPerm(GraphProto* g, const std::string& in, const std::string& out) {
  AddNode(g, "Transpose", {in}, {out});
  auto* a = g->mutable_node(g->node_size() - 1)->add_attribute();
  a->set_name("perm");
  a->set_type(AttributeProto::INTS);
  for (int64_t p : {0, 2, 1, 3}) a->add_ints(p);
}

// input_ids [B, L] -> embedding (Gather) -> Q/K/V [B, heads, L, 8] -> PagedAttention over
// past (a sequence of row caches, past <- present) -> output projection + residual -> LM
// head -> logits [B, L, vocab].
inline std::shared_ptr<ModelProto> RowsDecoder() {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  auto* rt = model->add_opset_import();
  rt->set_domain("ai.rt");
  rt->set_version(1);
  GraphProto* g = model->mutable_graph();
  g->set_name("rows_decoder");
  auto* ids = g->add_input();
  ids->set_name("input_ids");
  auto* it = ids->mutable_type()->mutable_tensor_type();
  it->set_elem_type(TensorProto::INT64);
  it->mutable_shape()->add_dim()->set_dim_param("batch");
  it->mutable_shape()->add_dim()->set_dim_param("length");
  auto* past = g->add_input();
  past->set_name("past");
  past->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_struct_type();
  auto* logits = g->add_output();
  logits->set_name("logits");
  logits->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  auto* present = g->add_output();
  present->set_name("present");
  *present->mutable_type() = past->type();

  AddWeight(g, "embed", {kVocab, kHidden}, 1, 1.0f);
  AddWeight(g, "wq", {kHidden, kHeads * kHeadSize}, 2, 0.5f);
  AddWeight(g, "wk", {kHidden, kKvHeads * kHeadSize}, 3, 0.5f);
  AddWeight(g, "wv", {kHidden, kKvHeads * kHeadSize}, 4, 0.5f);
  AddWeight(g, "wo", {kHeads * kHeadSize, kHidden}, 5, 0.3f);
  AddWeight(g, "lm_head", {kHidden, kVocab}, 6, 1.0f);
  AddInts(g, "q_shape", {0, 0, kHeads, kHeadSize});
  AddInts(g, "kv_shape", {0, 0, kKvHeads, kHeadSize});
  AddInts(g, "y_shape", {0, 0, kHeads * kHeadSize});
  AddNode(g, "Gather", {"embed", "input_ids"}, {"x"});
  for (const char* p : {"q", "k", "v"}) {
    const std::string s = p;
    AddNode(g, "MatMul", {"x", "w" + s}, {s + "_flat"});
    AddNode(g, "Reshape", {s + "_flat", s == "q" ? "q_shape" : "kv_shape"}, {s + "_bhsd"});
    AddPerm(g, s + "_bhsd", s + "_heads");
  }
  AddNode(g, "PagedAttention", {"q_heads", "k_heads", "v_heads", "past"}, {"attn", "present"},
          "ai.rt");
  AddPerm(g, "attn", "attn_bshd");
  AddNode(g, "Reshape", {"attn_bshd", "y_shape"}, {"attn_flat"});
  AddNode(g, "MatMul", {"attn_flat", "wo"}, {"attn_out"});
  AddNode(g, "Add", {"x", "attn_out"}, {"h"});
  AddNode(g, "MatMul", {"h", "lm_head"}, {"logits"});
  auto* bind = g->add_persistent_bindings();
  bind->set_input_name("past");
  bind->set_output_name("present");
  return model;
}

// A one-row request for RowsDecoder: the prompt's ids and an empty row cache.
inline onnx_light::core::runtime::RuntimeValueMap RowsFeeds(const std::vector<int64_t>& prompt) {
  using onnx_light::core::runtime::RuntimeValue;
  using onnx_light::core::runtime::Tensor;
  using onnx_light::onnx_kernels::kernel::PagedAttention;
  onnx_light::core::runtime::RuntimeValueMap feeds;
  feeds["input_ids"] = RuntimeValue(
      Tensor::FromInt64("input_ids", {1, static_cast<int64_t>(prompt.size())}, prompt));
  feeds["past"] = PagedAttention::AssembleRows({PagedAttention::EmptyCache()});
  return feeds;
}

// One RowsDecoder request per prompt, submitted together: the first waits at its first token
// until all are submitted (SubmitGate), so they overlap however slowly this thread runs.
inline std::vector<onnx_light::core::runtime::RequestHandle> SubmitTogether(
    onnx_light::core::runtime::RequestScheduler& scheduler,
    const std::shared_ptr<const ModelProto>& model,
    const std::vector<std::vector<int64_t>>& prompts,
    const onnx_light::core::runtime::GenerationOptions& options) {
  std::vector<onnx_light::core::runtime::RequestHandle> handles;
  SubmitGate gate;
  for (const auto& p : prompts)
    handles.push_back(scheduler.Submit({model,
                                        nullptr,
                                        RowsFeeds(p),
                                        options,
                                        {},
                                        handles.empty() ? gate.Hold() : nullptr,
                                        nullptr}));
  gate.Open();
  return handles;
}

// The tokens of a [1, n] INT64 result.
inline std::vector<int64_t> TokenRow(const onnx_light::core::runtime::Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

}  // namespace test_util
