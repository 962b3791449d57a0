#include "ops/math/constant_weight.h"

#include "core/tensor_proto.h"

#include <unistd.h>

#include <algorithm>
#include <new>

namespace onnx_light::ops::math {

namespace {

// Half of the machine's memory, at least 1 GiB: the packs replace reading the model's own
// weight bytes, which then stay untouched in the page cache.
size_t DefaultBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const size_t half = pages > 0 && page > 0 ? static_cast<size_t>(pages) / 2 * static_cast<size_t>(page) : 0;
  return std::max(half, size_t{1} << 30);
}

std::atomic<size_t> budget{DefaultBudget()};
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
  if (!value.is_tensor()) return;
  const core::runtime::Tensor& t = value.tensor();
  // Dense, or a FLOAT matrix viewed transposed (a folded Transpose of a weight).
  if (t.contiguous() || TransposedLd(t) > 0) constant_ = t;
}

int64_t ConstantWeight::TransposedLd(const core::runtime::Tensor& t) {
  if (t.contiguous() || t.rank() != 2 || t.dtype() != core::DataType::kFloat) return 0;
  const core::runtime::Shape st = t.strides();
  return st[0] == 1 && st[1] >= t.dim(0) ? st[1] : 0;
}

bool ConstantWeight::Serves(const core::runtime::Tensor& b) const {
  if (!constant_.defined() || b.dtype() != constant_.dtype() || b.shape() != constant_.shape() ||
      b.contiguous() != constant_.contiguous() || b.strided_data() != constant_.strided_data())
    return false;
  return b.contiguous() || b.strides() == constant_.strides();
}

const PackedB* ConstantWeight::Get(const core::runtime::Tensor& b, bool trans_b, int64_t k,
                                   int64_t n, int64_t ldb,
                                   const std::function<const float*()>& values) const {
  if (k <= 0 || n <= 0 || !Serves(b)) return nullptr;
  const int64_t padded_n = (n + 15) / 16 * 16;
  if (padded_n * 4 > n * 5) return nullptr;  // narrow B: padding would dominate the copy
  // Admission on the second use: the first one runs unpacked (see the header).
  if (calls_.load(std::memory_order_relaxed) < 2 &&
      calls_.fetch_add(1, std::memory_order_relaxed) == 0)
    return nullptr;
  std::call_once(once_, [&] {
    // Over budget or out of memory: every call runs unpacked, as without a cache.
    const size_t bytes = static_cast<size_t>(k * padded_n) * sizeof(float);
    if (!Reserve(bytes)) return;
    try {
      packed_ = std::make_unique<const PackedB>(trans_b, k, n, values(), ldb);
    } catch (const std::bad_alloc&) {
      kept.fetch_sub(bytes, std::memory_order_relaxed);
      return;
    }
    // The pack replaces reading the weight: a memory-mapped weight's pages go back to the
    // page cache (another reader, e.g. the Gather of a tied embedding, faults in what it
    // reads).
    if (b.dtype() == core::DataType::kFloat)
      core::runtime::ReleaseMappedPages(b.strided_data(), b.nbytes());
  });
  return packed_.get();
}

}  // namespace onnx_light::ops::math
