// The schemas of domain ai.rt, opset 1 (spec "Versioned operator schema", "Selected-block
// quantization"). Only shapes and types are checked here: cache contents are data and are
// validated when a kernel runs.
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_schema.h"
#include "core/proto_desc.h"

namespace onnx_light::core {

namespace {

using Kind = FormalParameter::Kind;

const std::vector<DataType> kAttentionTypes = {DataType::kFloat, DataType::kFloat16,
                                               DataType::kBFloat16};
// Affine code types, then the floating-point markers that request dense pages.
const std::vector<DataType> kZeroPointTypes = {
    DataType::kInt8,  DataType::kUint8, DataType::kInt4,    DataType::kUint4,   DataType::kInt2,
    DataType::kUint2, DataType::kFloat, DataType::kFloat16, DataType::kBFloat16};

AttributeSpec IntAttr(const std::string& name, int64_t default_value,
                      std::string (*check)(int64_t)) {
  AttributeSpec spec;
  spec.name = name;
  spec.type = AttributeProto::INT;
  spec.default_value = IntAttribute(name, default_value);
  spec.check = [check](const AttributeProto& attr) { return check(attr.i()); };
  return spec;
}

std::string Positive(int64_t v) {
  return v > 0 ? "" : "must be positive, got " + std::to_string(v);
}
std::string ZeroOrOne(int64_t v) {
  return v == 0 || v == 1 ? "" : "must be 0 or 1, got " + std::to_string(v);
}
std::string WindowSize(int64_t v) {
  return v >= -1 ? "" : "must be -1 (unbounded) or non-negative, got " + std::to_string(v);
}

const TensorShapeProto* ShapeOf(const TypeProto* t) {
  return t != nullptr && t->has_tensor_type() && t->tensor_type().has_shape()
             ? &t->tensor_type().shape()
             : nullptr;
}

// Dimension `axis` of input `index`, when its shape is known and the dimension concrete.
struct Dim {
  int input;
  int64_t value;
};
std::vector<Dim> ConcreteDims(const InferenceContext& ctx, std::vector<int> inputs, int axis) {
  std::vector<Dim> dims;
  for (int i : inputs) {
    const TensorShapeProto* s = ShapeOf(ctx.input_type(i));
    if (s != nullptr && s->dim(axis).has_dim_value()) dims.push_back({i, s->dim(axis).dim_value()});
  }
  return dims;
}

const char* kQkvNames[] = {"Q", "K", "V"};

std::string InputLabel(const InferenceContext& ctx, int i) {
  return std::string(kQkvNames[i]) + " " + Quote(ctx.node().input(i));
}

// Inputs `inputs` agree on dimension `axis` wherever it is concrete.
void CheckSameDim(const InferenceContext& ctx, std::vector<int> inputs, int axis,
                  const std::string& what) {
  const std::vector<Dim> dims = ConcreteDims(ctx, inputs, axis);
  for (const Dim& d : dims)
    if (d.value != dims.front().value)
      ctx.Fail(InputLabel(ctx, dims.front().input) + " and " + InputLabel(ctx, d.input) +
               " must have the same " + what + " (dimension " + std::to_string(axis) +
               "): " + std::to_string(dims.front().value) + " vs " + std::to_string(d.value));
}

void CheckGroupedHeads(const InferenceContext& ctx) {
  const std::vector<Dim> q = ConcreteDims(ctx, {0}, 1);
  const std::vector<Dim> kv = ConcreteDims(ctx, {1, 2}, 1);
  if (q.empty() || kv.empty()) return;
  const int64_t qh = q.front().value, kvh = kv.front().value;
  if (kvh == 0 ? qh == 0 : qh % kvh == 0) return;
  ctx.Fail("the head count " + std::to_string(qh) + " of " + InputLabel(ctx, 0) +
           " must be a multiple of the K/V head count " + std::to_string(kvh) + " of " +
           InputLabel(ctx, kv.front().input));
}

// Y: Q's element type and [batch, heads, L], V's head size; present: past's declaration.
void InferPagedAttention(InferenceContext& ctx) {
  CheckSameDim(ctx, {0, 1, 2}, 0, "batch size");
  CheckSameDim(ctx, {0, 1, 2}, 2, "new-token length");
  CheckSameDim(ctx, {1, 2}, 1, "head count");
  CheckGroupedHeads(ctx);

  const TypeProto* q = ctx.input_type(0);
  const TypeProto* v = ctx.input_type(2);
  if (q != nullptr || v != nullptr) {
    auto* y = ctx.output_type(0).mutable_tensor_type();
    if (q != nullptr) y->set_elem_type(q->tensor_type().elem_type());
    const TensorShapeProto* qs = ShapeOf(q);
    const TensorShapeProto* vs = ShapeOf(v);
    if (qs != nullptr || vs != nullptr) {
      auto* shape = y->mutable_shape();
      for (int axis = 0; axis < 3; ++axis)
        *shape->add_dim() = qs != nullptr ? qs->dim(axis) : TensorShapeProto::Dimension();
      *shape->add_dim() = vs != nullptr ? vs->dim(3) : TensorShapeProto::Dimension();
    }
  }
  if (const TypeProto* past = ctx.input_type(3)) ctx.output_type(1) = *past;
}

LightOpSchema PagedAttentionSchema() {
  LightOpSchema schema("ai.rt", "PagedAttention", 1);
  for (const char* name : kQkvNames) schema.Input({name, Kind::kTensor, false, kAttentionTypes, 4});
  schema.Input({"past", Kind::kPagedCache, false, {}, std::nullopt});
  schema.Output({"Y", Kind::kTensor, false, kAttentionTypes, 4});
  schema.Output({"present", Kind::kPagedCache, false, {}, std::nullopt});
  schema.Attribute(IntAttr("block_size", 16, Positive));
  schema.Attribute(IntAttr("max_tokens", 4096, Positive));
  schema.Attribute(IntAttr("is_causal", 1, ZeroOrOne));
  schema.Attribute(IntAttr("left_window_size", -1, WindowSize));
  schema.Inference(InferPagedAttention);
  return schema;
}

LightOpSchema QuantizePagedCacheSchema() {
  LightOpSchema schema("ai.rt", "QuantizePagedCache", 1);
  schema.Input({"cache", Kind::kPagedCache, false, {}, std::nullopt});
  schema.Input({"block_indices", Kind::kTensor, false, {DataType::kInt64}, 1});
  for (const char* part : {"key", "value"}) {
    schema.Input({std::string(part) + "_scale", Kind::kTensor, false, {DataType::kFloat}, 0});
    schema.Input({std::string(part) + "_zero_point", Kind::kTensor, false, kZeroPointTypes, 0});
  }
  schema.Output({"quantized_cache", Kind::kPagedCache, false, {}, std::nullopt});
  schema.Inference([](InferenceContext& ctx) {
    if (const TypeProto* cache = ctx.input_type(0)) ctx.output_type(0) = *cache;
  });
  return schema;
}

}  // namespace

void RegisterAiRtSchemas(LightSchemaRegistry& registry) {
  registry.Register(PagedAttentionSchema());
  registry.Register(QuantizePagedCacheSchema());
}

}  // namespace onnx_light::core
