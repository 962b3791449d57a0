// Builders for paged caches and a dense reference attention, shared by the ai.rt tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/runtime_value.h"
#include "onnx_light.pb.h"

namespace paged_test {

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

inline Tensor Floats(const std::string& name, Shape shape,
                     const std::function<float(int64_t)>& value) {
  std::vector<float> v(static_cast<size_t>(ShapeNumel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<int64_t>(i));
  return Tensor::FromFloat(name, std::move(shape), std::move(v));
}

// A deterministic pseudo-random value in [-1, 1) for element i of stream `seed`.
inline float Noise(uint32_t seed, int64_t i) {
  uint32_t x = seed * 2654435761u + static_cast<uint32_t>(i) * 40503u + 12345u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x % 20000u) / 10000.0f - 1.0f;
}

// An ai.rt::PagedAttention node named "attn" (q, k, v, past -> y, present) with these
// attributes where they differ from the defaults.
inline NodeProto PagedNode(int64_t window = -1, int64_t causal = 1, int64_t block_size = 16) {
  NodeProto node;
  node.set_op_type("PagedAttention");
  node.set_domain("ai.rt");
  node.set_name("attn");
  for (const char* in : {"q", "k", "v", "past"}) node.add_input(in);
  node.add_output("y");
  node.add_output("present");
  auto attr = [&](const char* name, int64_t v) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
  };
  if (window != -1) attr("left_window_size", window);
  if (causal != 1) attr("is_causal", causal);
  if (block_size != 16) attr("block_size", block_size);
  return node;
}

inline RuntimeValue Int64(int64_t v) { return RuntimeValue(Tensor::FromInt64("", {}, {v})); }

inline RuntimeValue Block(int64_t start, int64_t length, RuntimeValue key, RuntimeValue value) {
  std::vector<RuntimeValue::Field> f;
  f.emplace_back("start", Int64(start));
  f.emplace_back("length", Int64(length));
  f.emplace_back("key", std::move(key));
  f.emplace_back("value", std::move(value));
  return RuntimeValue::Struct("", std::move(f));
}

inline RuntimeValue Cache(std::vector<RuntimeValue> blocks) {
  std::vector<RuntimeValue::Field> f;
  f.emplace_back("blocks", RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(blocks))));
  return RuntimeValue::Struct("", std::move(f));
}

inline TensorProto ScalarParam(DataType t, float f, int32_t code) {
  TensorProto p;
  p.set_data_type(static_cast<int32_t>(t));
  std::string bytes(StorageBytes(t, 1), '\0');
  if (t == DataType::kFloat)
    std::memcpy(bytes.data(), &f, 4);
  else if (t == DataType::kInt8 || t == DataType::kUint8)
    bytes[0] = static_cast<char>(code);
  else
    PackedSet(t, bytes.data(), 0, code);
  p.set_raw_data(bytes);
  return p;
}

// An affine page [b, h, capacity, width] with per-tensor scale/zero point and these codes.
inline RuntimeValue AffinePage(DataType storage, float scale, int32_t zero, Shape dims,
                               const std::vector<int32_t>& codes, bool storage_type = true) {
  auto e = std::make_shared<EncodedValueProto>();
  auto* a = e->mutable_affine();
  if (storage_type)
    a->set_storage_type(static_cast<int32_t>(storage));
  else
    a->set_signed_storage(storage == DataType::kInt8 || storage == DataType::kInt4 ||
                          storage == DataType::kInt2);
  *a->mutable_scale() = ScalarParam(DataType::kFloat, scale, 0);
  *a->mutable_zero_point() = ScalarParam(storage, 0, zero);
  auto* t = e->mutable_logical_type()->mutable_tensor_type();
  t->set_elem_type(TensorProto::FLOAT);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  std::string raw(StorageBytes(storage, ShapeNumel(dims)), '\0');
  for (size_t i = 0; i < codes.size(); ++i) {
    if (storage == DataType::kInt8 || storage == DataType::kUint8)
      raw[i] = static_cast<char>(codes[i]);
    else
      PackedSet(storage, raw.data(), static_cast<int64_t>(i), codes[i]);
  }
  e->set_raw_data(raw);
  return RuntimeValue::Encoded(e);
}

// Dense attention in double over explicit K/V rows [B, Hkv, T, D] (T = past + L), causal
// by default, with the left window. Q [B, H, L, D] -> Y [B, H, L, Dv].
inline std::vector<float> ReferenceAttention(const std::vector<float>& q,
                                             const std::vector<float>& k,
                                             const std::vector<float>& v, int64_t batch,
                                             int64_t heads, int64_t kv_heads, int64_t len,
                                             int64_t total, int64_t dk, int64_t dv,
                                             bool causal = true, int64_t window = -1) {
  std::vector<float> y(static_cast<size_t>(batch * heads * len * dv), 0.0f);
  const int64_t past = total - len, group = heads / kv_heads;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < len; ++i) {
        const int64_t p = past + i, hi = causal ? p + 1 : total;
        const int64_t lo = window >= 0 ? std::max<int64_t>(0, p - window) : 0;
        const int64_t kh = h / group;
        std::vector<double> s;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t t = lo; t < hi; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < dk; ++d)
            dot += q[static_cast<size_t>(((b * heads + h) * len + i) * dk + d)] *
                   k[static_cast<size_t>(((b * kv_heads + kh) * total + t) * dk + d)];
          s.push_back(dot / std::sqrt(static_cast<double>(dk)));
          m = std::max(m, s.back());
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int64_t d = 0; d < dv; ++d) {
          double acc = 0;
          for (int64_t t = lo; t < hi; ++t)
            acc += s[static_cast<size_t>(t - lo)] *
                   v[static_cast<size_t>(((b * kv_heads + kh) * total + t) * dv + d)];
          y[static_cast<size_t>(((b * heads + h) * len + i) * dv + d)] =
              s.empty() ? 0.0f : static_cast<float>(acc / sum);
        }
      }
  return y;
}

}  // namespace paged_test
