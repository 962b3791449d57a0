#include "state/kv_cache_size.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/dtype.h"
#include "core/paged_cache.h"
#include "core/type_compat.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

namespace {

// Bytes per token of a tensor declared [batch, ..., seq, ...] (one symbolic dim past dim 0),
// or -1.
int64_t TensorTokenBytes(const TypeProto::Tensor& t, int first_dim) {
  if (!t.has_shape()) return -1;
  int64_t elements = 1, growing = 0;
  for (int d = first_dim; d < t.shape().dim_size(); ++d) {
    const auto& dim = t.shape().dim(d);
    if (dim.has_dim_value() && dim.dim_value() > 0)
      elements *= dim.dim_value();
    else
      ++growing;
  }
  if (growing != 1 || !IsKnownDataType(t.elem_type())) return -1;
  return static_cast<int64_t>(StorageBytes(static_cast<DataType>(t.elem_type()), elements));
}

// Bytes per token of a page field [batch, heads, capacity, width] (heads, width concrete) in
// `storage` (0: its declared type), or -1.
int64_t PageTokenBytes(const TypeProto& field, int32_t storage) {
  if (!field.has_tensor_type() || !field.tensor_type().has_shape()) return -1;
  const auto& shape = field.tensor_type().shape();
  if (shape.dim_size() != 4 || !shape.dim(1).has_dim_value() || !shape.dim(3).has_dim_value())
    return -1;
  const int64_t elements = shape.dim(1).dim_value() * shape.dim(3).dim_value();
  if (elements <= 0) return -1;
  const int32_t type = storage != 0 ? storage : field.tensor_type().elem_type();
  if (!IsKnownDataType(type)) return -1;
  return static_cast<int64_t>(StorageBytes(static_cast<DataType>(type), elements));
}

// Bytes per token of a paged cache declaration (key + value of its blocks), or -1.
int64_t PagedTokenBytes(const TypeProto& cache, const ModelProto& model,
                        const KvPageStorage* storage) {
  const StructTypeProto* s = FindStruct(cache.struct_type(), &model);
  if (s == nullptr || s->field_size() != 1 || !s->field(0).type().has_sequence_type()) return -1;
  const TypeProto& block = s->field(0).type().sequence_type().elem_type();
  const StructTypeProto* b =
      block.has_struct_type() ? FindStruct(block.struct_type(), &model) : nullptr;
  if (b == nullptr) return -1;
  int64_t bytes = 0;
  for (const auto& f : b->field()) {
    if (f.name() != "key" && f.name() != "value") continue;
    const int32_t as = storage == nullptr ? 0 : f.name() == "key" ? storage->key : storage->value;
    const int64_t field_bytes = PageTokenBytes(f.type(), as);
    if (field_bytes < 0) return -1;
    bytes += field_bytes;
  }
  return bytes > 0 ? bytes : -1;
}

// Bytes per token of one bound input's declaration, or -1.
int64_t DeclaredTokenBytes(const TypeProto& type, const ModelProto& model,
                           const KvPageStorage* storage) {
  if (type.has_tensor_type()) return TensorTokenBytes(type.tensor_type(), 1);
  const TypeProto& cache = type.has_sequence_type() ? type.sequence_type().elem_type() : type;
  return cache.has_struct_type() ? PagedTokenBytes(cache, model, storage) : -1;
}

// The tokens one page of the model's paged caches holds: the block_size of its
// ai.rt::PagedAttention nodes (their least common multiple when they differ), or 1.
int64_t PageTokens(const GraphProto& graph) {
  int64_t tokens = 1;
  for (const auto& node : graph.node()) {
    if (node.domain() != "ai.rt" || node.op_type() != "PagedAttention") continue;
    int64_t block = 16;  // the schema's default
    for (const auto& a : node.attribute())
      if (a.name() == "block_size" && a.i() > 0) block = a.i();
    int64_t lcm = 0;  // huge or overflowing multiples (a malformed model): the larger one
    if (__builtin_mul_overflow(tokens / std::gcd(tokens, block), block, &lcm) ||
        lcm > (int64_t{1} << 20))
      lcm = std::max(tokens, block);
    tokens = lcm;
  }
  return tokens;
}

}  // namespace

KvTokenBytes KvBytesPerToken(const ModelProto& model, const KvPageStorage* storage) {
  const GraphProto& graph = model.graph();
  if (graph.persistent_bindings_size() == 0) return {0, "the model has no persistent caches"};
  if (storage != nullptr && !(IsPageStorageType(static_cast<DataType>(storage->key)) &&
                              IsPageStorageType(static_cast<DataType>(storage->value))))
    return {0, "the context's KV page storage (key type " + std::to_string(storage->key) +
                   ", value type " + std::to_string(storage->value) +
                   ") is not a page format (FLOAT, FLOAT16, BFLOAT16, INT8, UINT8, INT4, UINT4, "
                   "INT2 or UINT2)"};
  KvTokenBytes total;
  for (const auto& binding : graph.persistent_bindings()) {
    const auto input = std::find_if(graph.input().begin(), graph.input().end(), [&](const auto& i) {
      return i.name() == binding.input_name();
    });
    const int64_t bytes =
        input == graph.input().end() ? -1 : DeclaredTokenBytes(input->type(), model, storage);
    if (bytes < 0)
      return {0, "the declaration of the cache input '" + binding.input_name() +
                     "' gives no size per token (a tensor needs exactly one symbolic dim past "
                     "the batch; a paged cache needs key and value fields with concrete heads "
                     "and width)"};
    total.bytes += bytes;
    if (!input->type().has_tensor_type()) total.page_tokens = PageTokens(graph);
  }
  return total;
}

}  // namespace onnx_light::core::runtime
