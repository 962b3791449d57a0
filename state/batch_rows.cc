#include "state/batch_rows.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

RuntimeValueMap RunRows(const RuntimeSession& session, RuntimeContext& context,
                        RuntimeValueMap feeds, const std::vector<RuntimeValueMap*>& rows) {
  const auto& bindings = session.model().graph().persistent_bindings();
  OL_CHECK(bindings.size() > 0, ErrorCode::kInvalidArgument,
           "RunRows: the model has no persistent bindings (no per-row caches to batch)");
  // Each bound input: the rows' cache handles, in row order (the rows keep theirs until the
  // run succeeds).
  for (const auto& b : bindings) {
    std::vector<RuntimeValue> caches;
    caches.reserve(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      auto it = rows[r]->find(b.input_name());
      OL_CHECK(it != rows[r]->end(), ErrorCode::kInvalidArgument,
               "RunRows: row " + std::to_string(r) + " has no cache for bound input '" +
                   b.input_name() + "'");
      caches.push_back(it->second);
    }
    feeds[b.input_name()] = RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(caches)));
  }
  RuntimeValueMap out = session.Run(context, std::move(feeds));
  for (const auto& b : bindings) {
    auto it = out.find(b.output_name());
    OL_CHECK(
        it != out.end() && it->second.is_sequence() && it->second.elements().size() == rows.size(),
        ErrorCode::kInvalidArgument,
        "RunRows: bound output '" + b.output_name() + "' must be a sequence of " +
            std::to_string(rows.size()) + " row caches (one per batch row)");
    const RuntimeSequence& present = it->second.elements();
    for (size_t r = 0; r < rows.size(); ++r) (*rows[r])[b.input_name()] = present[r];
    out.erase(it);
  }
  return out;
}

}  // namespace onnx_light::core::runtime
