// The schemas of domain ai.rt, opset 1 (spec "Versioned operator schema", "Selected-block
// quantization"). Only shapes and types are checked here: cache contents are data and are
// validated when a kernel runs.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op_schema.h"
#include "core/proto_desc.h"
#include "core/type_compat.h"

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

// The declared dims of the `field` payloads of past's pages, when the declaration names
// the cache fields and gives that payload a rank-4 shape (else null).
const TensorShapeProto* PageShape(const InferenceContext& ctx, const TypeProto& cache,
                                  const char* field) {
  const StructTypeProto* s =
      cache.has_struct_type() ? FindStruct(cache.struct_type(), ctx.model()) : nullptr;
  if (s == nullptr || s->field_size() != 1) return nullptr;
  const TypeProto& blocks = s->field(0).type();
  if (!blocks.has_sequence_type() || !blocks.sequence_type().elem_type().has_struct_type())
    return nullptr;
  const StructTypeProto* block =
      FindStruct(blocks.sequence_type().elem_type().struct_type(), ctx.model());
  if (block == nullptr) return nullptr;
  for (const auto& f : block->field())
    if (f.name() == field) {
      const TensorShapeProto* shape = ShapeOf(&f.type());
      return shape != nullptr && shape->dim_size() == 4 ? shape : nullptr;
    }
  return nullptr;
}

// Declared page dims [batch, kv_heads, capacity, width] agree, where concrete, with the
// inputs: batch 1 for row caches (one batch row each) or Q's batch for a single cache, K's
// head count, and K's (keys) or V's (values) head size.
void CheckPageDeclarations(const InferenceContext& ctx) {
  const TypeProto* past = ctx.input_type(3);
  if (past == nullptr) return;
  const bool rows = past->has_sequence_type();
  const TypeProto& cache = rows ? past->sequence_type().elem_type() : *past;
  const std::string what = "input 3 " + Quote(ctx.node().input(3)) + " (past)" +
                           (rows ? " row caches" : "") + ": declared ";
  const struct {
    const char* field;
    int width_input;
  } payloads[] = {{"key", 1}, {"value", 2}};
  for (const auto& p : payloads) {
    const TensorShapeProto* page = PageShape(ctx, cache, p.field);
    if (page == nullptr) continue;
    auto check = [&](int axis, std::optional<Dim> want, const std::string& name) {
      if (!page->dim(axis).has_dim_value() || !want) return;
      if (page->dim(axis).dim_value() != want->value)
        ctx.Fail(what + p.field + " pages have " + std::to_string(page->dim(axis).dim_value()) +
                 " " + name + " (dimension " + std::to_string(axis) + "), but " +
                 (want->input < 0
                      ? std::string("a row cache holds one batch row")
                      : InputLabel(ctx, want->input) + " has " + std::to_string(want->value)));
    };
    auto first = [&](int input, int axis) -> std::optional<Dim> {
      const std::vector<Dim> d = ConcreteDims(ctx, {input}, axis);
      return d.empty() ? std::nullopt : std::optional<Dim>(d.front());
    };
    check(0, rows ? std::optional<Dim>(Dim{-1, 1}) : first(0, 0), "batch rows");
    check(1, first(1, 1), "KV heads");
    check(3, first(p.width_input, 3), "head size");
  }
}

// Y: Q's element type and [batch, heads, L], V's head size; present: past's declaration
// (a paged cache, or a sequence of row caches).
void InferPagedAttention(InferenceContext& ctx) {
  CheckSameDim(ctx, {0, 1, 2}, 0, "batch size");
  CheckSameDim(ctx, {0, 1, 2}, 2, "new-token length");
  CheckSameDim(ctx, {1, 2}, 1, "head count");
  CheckGroupedHeads(ctx);
  CheckPageDeclarations(ctx);

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
  // past/present: a paged cache, or a sequence of paged caches, one per batch row.
  FormalParameter past{"past", Kind::kPagedCache, false, {}, std::nullopt};
  past.batch_rows = true;
  FormalParameter present = past;
  present.name = "present";
  schema.Input(past);
  schema.Output({"Y", Kind::kTensor, false, kAttentionTypes, 4});
  schema.Output(present);
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
