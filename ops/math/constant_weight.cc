#include "ops/math/constant_weight.h"

#include <new>

namespace onnx_light::ops::math {

namespace {

std::atomic<size_t> budget{size_t{1} << 30};
std::atomic<size_t> kept{0};

// Reserves `bytes` of the budget; false (nothing reserved) when they do not fit.
bool Reserve(size_t bytes) {
  size_t now = kept.load(std::memory_order_relaxed);
  do {
    if (now + bytes > budget.load(std::memory_order_relaxed)) return false;
  } while (!kept.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

}  // namespace

size_t PackedWeightBudget() { return budget.load(std::memory_order_relaxed); }
void SetPackedWeightBudget(size_t bytes) { budget.store(bytes, std::memory_order_relaxed); }
size_t PackedWeightBytes() { return kept.load(std::memory_order_relaxed); }

ConstantWeight::~ConstantWeight() {
  if (packed_ != nullptr) kept.fetch_sub(packed_->bytes(), std::memory_order_relaxed);
}

void ConstantWeight::Declare(const core::runtime::RuntimeValue& value) {
  if (value.is_tensor()) constant_ = value.tensor();
}

const PackedB* ConstantWeight::Get(const core::runtime::Tensor& b, const float* values,
                                   bool trans_b, int64_t k, int64_t n, int64_t ldb) const {
  // A strided view (not dense) is never the declared dense constant, even over its bytes.
  if (!constant_.defined() || !b.contiguous() || b.raw_data() != constant_.raw_data() ||
      b.dtype() != constant_.dtype() || b.shape() != constant_.shape() || k <= 0 || n <= 0)
    return nullptr;
  const int64_t padded_n = (n + 15) / 16 * 16;
  if (padded_n * 4 > n * 5) return nullptr;  // narrow B: padding would dominate the copy
  // Admission on the second use: the first one packs per call (see the header).
  if (calls_.load(std::memory_order_relaxed) < 2 &&
      calls_.fetch_add(1, std::memory_order_relaxed) == 0)
    return nullptr;
  std::call_once(once_, [&] {
    // Over budget or out of memory: every call packs per call, as without a cache.
    const size_t bytes = static_cast<size_t>(k * padded_n) * sizeof(float);
    if (!Reserve(bytes)) return;
    try {
      packed_ = std::make_unique<const PackedB>(trans_b, k, n, values, ldb);
    } catch (const std::bad_alloc&) {
      kept.fetch_sub(bytes, std::memory_order_relaxed);
    }
  });
  return packed_.get();
}

}  // namespace onnx_light::ops::math
