#include "state/batch_rows.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "onnx_light.pb.h"
#include "state/paged_tail_lease.h"

namespace onnx_light::core::runtime {

RuntimeValueMap RunRows(const RuntimeSession& session, RuntimeContext& context,
                        RuntimeValueMap feeds, const std::vector<RuntimeValueMap*>& rows,
                        const std::vector<std::string>* last_position) {
  const auto& bindings = session.model().graph().persistent_bindings();
  OL_CHECK(bindings.size() > 0, ErrorCode::kInvalidArgument,
           "RunRows: the model has no persistent bindings (no per-row caches to batch)");
  for (const auto& b : bindings)
    for (size_t r = 0; r < rows.size(); ++r)
      OL_CHECK(rows[r]->count(b.input_name()) != 0, ErrorCode::kInvalidArgument,
               "RunRows: row " + std::to_string(r) + " has no cache for bound input '" +
                   b.input_name() + "'");
  // Each bound input: the rows' caches moved into one sequence (handles, in row order). A
  // row whose cache nobody else holds may have its last page filled in place (the lease).
  std::vector<RuntimeValue> assembled;
  std::vector<PagedTailLease> leases;
  leases.reserve(static_cast<size_t>(bindings.size()));
  for (const auto& b : bindings) {
    std::vector<RuntimeValue> caches;
    std::vector<bool> exclusive;
    for (RuntimeValueMap* row : rows) {
      caches.push_back(std::move(row->at(b.input_name())));
      exclusive.push_back(PagedCacheTailIsUnshared(caches.back()));
    }
    assembled.push_back(RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(caches))));
    feeds[b.input_name()] = assembled.back();
    leases.emplace_back(false, std::move(exclusive));
  }
  std::vector<BindingLease*> by_binding;
  for (PagedTailLease& lease : leases) by_binding.push_back(&lease);
  RunOptions options;
  options.binding_leases = by_binding;
  std::vector<std::string> names;  // the outputs asked for, plus the bound ones
  if (last_position != nullptr) {
    options.last_position_outputs = last_position;
    names = *last_position;
    for (const auto& b : bindings) names.push_back(b.output_name());
  }
  try {
    RuntimeValueMap out = last_position != nullptr
                              ? session.Run(context, std::move(feeds), names, options)
                              : session.Run(context, std::move(feeds), options);
    for (const auto& b : bindings) {
      auto it = out.find(b.output_name());
      OL_CHECK(it != out.end() && it->second.is_sequence() &&
                   it->second.elements().size() == rows.size(),
               ErrorCode::kInvalidArgument,
               "RunRows: bound output '" + b.output_name() + "' must be a sequence of " +
                   std::to_string(rows.size()) + " row caches (one per batch row)");
    }
    for (const auto& b : bindings) {
      auto it = out.find(b.output_name());
      const RuntimeSequence& present = it->second.elements();
      for (size_t r = 0; r < rows.size(); ++r) (*rows[r])[b.input_name()] = present[r];
      out.erase(it);
    }
    return out;
  } catch (...) {  // the rows get their caches back (pages written in place lie past length)
    for (int b = 0; b < bindings.size(); ++b)
      for (size_t r = 0; r < rows.size(); ++r)
        (*rows[r])[bindings[b].input_name()] = assembled[static_cast<size_t>(b)].elements()[r];
    throw;
  }
}

}  // namespace onnx_light::core::runtime
