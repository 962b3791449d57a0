// Contiguous KV decode on CPU (docs/append-capacity.md), run by CTest: decodes token by token
// through an Attention node whose K/V caches are bound past <- present, and prints the
// per-token storage reports (allocations, allocated bytes, prefix and append copies, reuse)
// for one KV head and for several. Exits non-zero when a report differs from the spec's
// byte formulas.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/text_parser.h"
#include "state/persistent_value_state.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

struct Report {
  size_t allocations = 0, allocated = 0, prefix = 0, append = 0, reuse = 0;
};

// Sums the kPersistentStorage events recorded since the last call, then clears the log.
Report TakeReport(const RuntimeContext& context) {
  Report r;
  for (const RuntimeEvent& e : context.events()) {
    if (e.action != RuntimeEventAction::kPersistentStorage) continue;
    r.allocations += e.storage_allocations;
    r.allocated += e.storage_allocated_bytes;
    r.prefix += e.storage_prefix_copied_bytes;
    r.append += e.storage_append_copied_bytes;
    r.reuse += e.storage_reuse_count;
  }
  context.ClearEvents();
  return r;
}

std::shared_ptr<ModelProto> DecodeModel(int64_t q_heads, int64_t kv_heads, int64_t d) {
  auto dims = [&](int64_t heads, const std::string& seq) {
    return "float[1," + std::to_string(heads) + "," + seq + "," + std::to_string(d) + "]";
  };
  auto model = std::make_shared<ModelProto>(core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 23]>\n"
      "decode (" +
      dims(q_heads, "1") + " q, " + dims(kv_heads, "1") + " k, " + dims(kv_heads, "1") + " v, " +
      dims(kv_heads, "P") + " past_key, " + dims(kv_heads, "P") + " past_value) => (" +
      dims(q_heads, "1") + " y, " + dims(kv_heads, "T") + " present_key, " + dims(kv_heads, "T") +
      " present_value)\n"
      "{ y, present_key, present_value = Attention(q, k, v, , past_key, past_value) }"));
  for (const char* name : {"key", "value"}) {
    auto* binding = model->mutable_graph()->add_persistent_bindings();
    binding->set_input_name(std::string("past_") + name);
    binding->set_output_name(std::string("present_") + name);
  }
  return model;
}

Tensor Rows(const char* name, int64_t heads, int64_t len, int64_t d, float value) {
  return Tensor::FromFloat(name, {1, heads, len, d},
                           std::vector<float>(static_cast<size_t>(heads * len * d), value));
}

// Decodes `tokens` tokens with `kv_heads` KV heads of size `d`; returns false when a report
// breaks the formulas (FLOAT: one token copies 4 * (Dk + Dv) bytes per KV head).
bool Decode(int64_t kv_heads, int64_t d, int tokens, size_t capacity) {
  auto model = DecodeModel(4 * kv_heads, kv_heads, d);
  RuntimeSessionOptions options;
  options.persistent_tensor_initial_capacity = capacity;
  PersistentValueState state(model,
                             {{"past_key", RuntimeValue(Rows("past_key", kv_heads, 0, d, 0))},
                              {"past_value", RuntimeValue(Rows("past_value", kv_heads, 0, d, 0))}},
                             options);
  RuntimeContextOptions context_options;
  context_options.events_enabled = true;  // auditing is opt-in
  RuntimeContext context(KernelContext(23), context_options);

  std::printf("%lld KV head(s), head size %lld, initial capacity %zu tokens\n",
              static_cast<long long>(kv_heads), static_cast<long long>(d), capacity);
  std::printf("token  allocations  allocated_bytes  prefix_copied  append_copied  reuse\n");
  bool ok = true;
  size_t cap = 0;  // tokens the current buffers hold
  const size_t row = 4 * static_cast<size_t>(kv_heads * (d + d));  // K and V rows of a token
  for (int t = 1; t <= tokens; ++t) {
    {
      // Keep only what the loop needs: a live present_* view would force a fresh buffer.
      const Tensor y = state
                           .Run(context, {{"q", RuntimeValue(Rows("q", 4 * kv_heads, 1, d, 0.5f))},
                                          {"k", RuntimeValue(Rows("k", kv_heads, 1, d, 0.1f * t))},
                                          {"v", RuntimeValue(Rows("v", kv_heads, 1, d, 1.0f * t))}})
                           .at("y")
                           .tensor();
      (void)y;
    }
    const Report r = TakeReport(context);
    std::printf("%5d  %11zu  %15zu  %13zu  %13zu  %5zu\n", t, r.allocations, r.allocated, r.prefix,
                r.append, r.reuse);
    ok &= r.append == row;
    // In place within capacity; the first token and each growth allocate and copy once.
    // Several KV heads keep `cap` rows per head (head-major), so the formulas are the same.
    const size_t len = static_cast<size_t>(t - 1);
    if (len + 1 > cap) {
      size_t next = std::max(capacity, cap);
      while (next < len + 1) next *= 2;
      ok &=
          r.allocations == 2 && r.allocated == next * row && r.prefix == len * row && r.reuse == 0;
      cap = next;
    } else {
      ok &= r.allocations == 0 && r.allocated == 0 && r.prefix == 0 && r.reuse == 2;
    }
  }
  std::printf("\n");
  return ok;
}

}  // namespace

int main() {
  bool ok = Decode(1, 8, 10, 4);
  ok &= Decode(4, 8, 6, 4);
  if (!ok) std::printf("a storage report differs from the documented formulas\n");
  return ok ? 0 : 1;
}
