#include "state/row_calls.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "core/error.h"
#include "state/batch_rows.h"

namespace onnx_light::core::runtime {

namespace {

int64_t RowCount(const RowCall& call) { return static_cast<int64_t>(call.rows->size()); }

// Calls with equal keys can share a model call; "" means the call runs alone (a feed that
// is not a numeric tensor with one entry of dim 0 per row cannot be concatenated).
std::string GroupKey(const RowCall& call) {
  std::map<std::string, const RuntimeValue*> sorted;
  for (const auto& [name, value] : call.feeds) sorted[name] = &value;
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(call.session));
  for (const std::string& name : *call.logits) key += "|" + name;
  for (const auto& [name, value] : sorted) {
    if (!value->is_tensor()) return "";
    const Tensor& t = value->tensor();
    if (t.rank() == 0 || t.dim(0) != RowCount(call) || t.dtype() == DataType::kString) return "";
    key += ";" + name + ":" + std::to_string(static_cast<int>(t.dtype()));
    for (int64_t d = 1; d < t.rank(); ++d) key += "," + std::to_string(t.dim(d));
  }
  return key;
}

// Bytes of one row (dim 0 entry) of `t`.
size_t RowBytes(const Tensor& t) { return t.dim(0) == 0 ? 0 : t.nbytes() / t.dim(0); }

// The calls' feeds, concatenated along dim 0 in call order.
RuntimeValueMap ConcatFeeds(const std::vector<RowCall*>& calls, int64_t total) {
  RuntimeValueMap feeds;
  for (const auto& [name, first] : calls.front()->feeds) {
    Shape shape = first.tensor().shape();
    shape[0] = total;
    Tensor out(name, first.tensor().dtype(), shape);
    auto* dst = static_cast<char*>(out.mutable_raw_data());
    for (RowCall* call : calls) {
      const Tensor part = call->feeds.at(name).tensor().Contiguous();
      std::memcpy(dst, part.raw_data(), part.nbytes());
      dst += part.nbytes();
    }
    feeds.emplace(name, RuntimeValue(std::move(out)));
  }
  return feeds;
}

// Rows [from, from + count) of each output whose dim 0 is `total` (copies: a row of logits).
RuntimeValueMap RowsOf(const RuntimeValueMap& outputs, int64_t total, int64_t from, int64_t count) {
  RuntimeValueMap mine;
  for (const auto& [name, value] : outputs) {
    if (!value.is_tensor() || value.tensor().rank() == 0 || value.tensor().dim(0) != total ||
        value.tensor().dtype() == DataType::kString)
      continue;
    const Tensor src = value.tensor().Contiguous();
    Shape shape = src.shape();
    shape[0] = count;
    Tensor out(name, src.dtype(), shape);
    const size_t row = RowBytes(src);
    std::memcpy(out.mutable_raw_data(), static_cast<const char*>(src.raw_data()) + from * row,
                count * row);
    mine.emplace(name, RuntimeValue(std::move(out)));
  }
  return mine;
}

void RunAlone(RuntimeContext& context, RowCall& call) {
  std::vector<RuntimeValueMap*> rows;
  for (RuntimeValueMap& row : *call.rows) rows.push_back(&row);
  try {
    call.outputs = RunRows(*call.session, context, std::move(call.feeds), rows, call.logits);
  } catch (...) {
    call.error = std::current_exception();
  }
}

// One model call for the group; false when it failed (the rows keep their caches).
bool RunShared(RuntimeContext& context, const std::vector<RowCall*>& group) {
  int64_t total = 0;
  std::vector<RuntimeValueMap*> rows;
  for (RowCall* call : group) {
    total += RowCount(*call);
    for (RuntimeValueMap& row : *call->rows) rows.push_back(&row);
  }
  RuntimeValueMap outputs;
  try {
    outputs = RunRows(*group.front()->session, context, ConcatFeeds(group, total), rows,
                      group.front()->logits);
  } catch (...) {
    return false;
  }
  int64_t from = 0;
  for (RowCall* call : group) {
    call->outputs = RowsOf(outputs, total, from, RowCount(*call));
    from += RowCount(*call);
  }
  return true;
}

}  // namespace

std::vector<int64_t> RunRowCalls(RuntimeContext& context, const std::vector<RowCall*>& calls) {
  std::vector<std::pair<std::string, std::vector<RowCall*>>> groups;
  for (RowCall* call : calls) {
    const std::string key = GroupKey(*call);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return !key.empty() && g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, {call}});
    } else {
      it->second.push_back(call);
    }
  }
  std::vector<int64_t> sizes;
  for (auto& [key, group] : groups) {
    int64_t total = 0;
    for (RowCall* call : group) total += RowCount(*call);
    if (group.size() > 1 && RunShared(context, group)) {
      sizes.push_back(total);
      continue;
    }
    for (RowCall* call : group) {  // alone, or after the shared call failed: one by one
      RunAlone(context, *call);
      sizes.push_back(RowCount(*call));
    }
  }
  return sizes;
}

}  // namespace onnx_light::core::runtime
