// A paged-cache binding's lease for one run (executor/persistent_append.h): whether the
// holder (PersistentValueState, or RunRows for its rows) alone held the cache, or each row
// cache of a bound sequence of row caches, when the run started. kExclusive is granted to
// the first claim only (one append site per binding, so one claimant).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/runtime_value.h"
#include "executor/persistent_append.h"

namespace onnx_light::core::runtime {

class PagedTailLease final : public BindingLease {
 public:
  // A single cache; or, with `rows`, a sequence whose row r is exclusive when rows[r].
  explicit PagedTailLease(bool exclusive, std::vector<bool> rows = {})
      : exclusive_(exclusive), rows_(std::move(rows)), row_claimed_(rows_.size(), false) {}
  // The lease of a retained value: a paged cache, or a sequence of paged caches.
  static PagedTailLease Of(const RuntimeValue& value) {
    if (!value.is_sequence()) return PagedTailLease(PagedCacheTailIsUnshared(value));
    std::vector<bool> rows(value.elements().size());
    for (size_t r = 0; r < rows.size(); ++r) rows[r] = PagedRowTailIsUnshared(value, r);
    return PagedTailLease(false, std::move(rows));
  }

  PagedTail ClaimPagedTail() override {
    const bool first = !claimed_;
    claimed_ = true;
    return first && exclusive_ ? PagedTail::kExclusive : PagedTail::kShared;
  }
  PagedTail ClaimPagedRowTail(size_t row) override {
    if (row >= rows_.size()) return PagedTail::kShared;
    const bool first = !row_claimed_[row];
    row_claimed_[row] = true;
    return first && rows_[row] ? PagedTail::kExclusive : PagedTail::kShared;
  }

 private:
  bool exclusive_;
  bool claimed_ = false;
  std::vector<bool> rows_, row_claimed_;
};

}  // namespace onnx_light::core::runtime
