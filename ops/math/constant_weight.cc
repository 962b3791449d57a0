#include "ops/math/constant_weight.h"

#include <algorithm>
#include <new>

#include "core/allocator.h"
#include "core/tensor_proto.h"
#include "executor/graph_plan.h"
#include "executor/parallel.h"

namespace onnx_light::ops::math {

namespace {

// Half of the machine's memory, at least 1 GiB: the packs replace reading the model's own
// weight bytes, which then stay untouched in the page cache.
size_t DefaultBudget() {
  return std::max(core::runtime::PhysicalMemoryBytes() / 2, size_t{1} << 30);
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

// Eligible calls to count before the first: 1 when the plan being built runs repeatedly.
int InitialCalls() {
  const core::runtime::PlanBuildScope* scope = core::runtime::CurrentPlanBuildScope();
  return scope != nullptr && scope->repeated_runs ? 1 : 0;
}

// Admission on the second use: the first one runs unpacked (see the header).
bool SecondUse(std::atomic<int>& calls) {
  return calls.load(std::memory_order_relaxed) >= 2 ||
         calls.fetch_add(1, std::memory_order_relaxed) != 0;
}

// `make()` within the budget (`bytes` reserved while it lives); null over budget or out of
// memory: every call then runs unpacked, as without a cache. `always`: counted but kept even
// over the budget (a pack whose alternative is a copy on every call).
template <class Pack>
std::unique_ptr<const Pack> KeepPack(size_t bytes,
                                     const std::function<std::unique_ptr<const Pack>()>& make,
                                     bool always = false) {
  if (always)
    kept.fetch_add(bytes, std::memory_order_relaxed);
  else if (!Reserve(bytes))
    return nullptr;
  try {
    return make();
  } catch (const std::bad_alloc&) {
    kept.fetch_sub(bytes, std::memory_order_relaxed);
    return nullptr;
  }
}

// The pack replaces reading the weight: a memory-mapped weight's pages go back to the page
// cache (another reader, e.g. the Gather of a tied embedding, faults in what it reads).
void ReleaseWeight(const core::runtime::Tensor& b) {
  if (b.dtype() == core::DataType::kFloat || b.dtype() == core::DataType::kFloat16)
    core::runtime::ReleaseMappedPages(b.strided_data(), b.nbytes());
}

int64_t Padded(int64_t n) { return (n + 15) / 16 * 16; }
bool NarrowForPacking(int64_t n) { return Padded(n) * 4 > n * 5; }  // padding would dominate

}  // namespace

size_t PackedWeightBudget() { return budget.load(std::memory_order_relaxed); }
void SetPackedWeightBudget(size_t bytes) { budget.store(bytes, std::memory_order_relaxed); }
size_t PackedWeightBytes() { return kept.load(std::memory_order_relaxed); }
void CountPackedWeightBytes(size_t bytes) { kept.fetch_add(bytes, std::memory_order_relaxed); }
void UncountPackedWeightBytes(size_t bytes) { kept.fetch_sub(bytes, std::memory_order_relaxed); }

ConstantWeight::~ConstantWeight() {
  if (packed_ != nullptr) kept.fetch_sub(packed_->bytes(), std::memory_order_relaxed);
  if (half_ != nullptr) kept.fetch_sub(half_->bytes(), std::memory_order_relaxed);
}

void ConstantWeight::Declare(const core::runtime::RuntimeValue& value) {
  if (!value.is_tensor()) return;
  const core::runtime::Tensor& t = value.tensor();
  // Dense, or a matrix viewed transposed (a folded Transpose of a weight).
  if (t.contiguous() || TransposedLd(t) > 0) constant_ = t;
  calls_.store(InitialCalls(), std::memory_order_relaxed);
}

int64_t ConstantWeight::TransposedLd(const core::runtime::Tensor& t) {
  if (t.contiguous() || t.rank() != 2 ||
      (t.dtype() != core::DataType::kFloat && t.dtype() != core::DataType::kFloat16))
    return 0;
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
  if (k <= 0 || n <= 0 || !Serves(b) || NarrowForPacking(n) || !SecondUse(calls_)) return nullptr;
  core::runtime::CallOnceIsolated(once_, [&] {
    const size_t bytes = static_cast<size_t>(k * Padded(n)) * sizeof(float);
    packed_ = KeepPack<PackedB>(
        bytes, [&] { return std::make_unique<const PackedB>(trans_b, k, n, values(), ldb); });
    if (packed_ != nullptr) ReleaseWeight(b);
  });
  return packed_.get();
}

const PackedHalfB* ConstantWeight::GetHalf(const core::runtime::Tensor& b, int64_t k,
                                           int64_t n) const {
  const int64_t ld = TransposedLd(b);
  if (k <= 0 || n <= 0 || b.dtype() != core::DataType::kFloat16 || (!b.contiguous() && ld == 0) ||
      !Serves(b) || NarrowForPacking(n))
    return nullptr;
  // A transposed view packs on its first use: without a pack every call needs a dense copy.
  if (ld == 0 && !SecondUse(calls_)) return nullptr;
  core::runtime::CallOnceIsolated(once_, [&] {
    const size_t bytes = static_cast<size_t>(k * Padded(n)) * sizeof(uint16_t);
    half_ = KeepPack<PackedHalfB>(
        bytes,
        [&] {
          return std::make_unique<const PackedHalfB>(static_cast<const uint16_t*>(b.strided_data()),
                                                     k, n, ld);
        },
        /*always=*/ld > 0);
    if (half_ != nullptr) ReleaseWeight(b);
  });
  return half_.get();
}

ConstantWeightGroup::~ConstantWeightGroup() {
  if (packed_ != nullptr) kept.fetch_sub(packed_->bytes(), std::memory_order_relaxed);
  if (half_ != nullptr) kept.fetch_sub(half_->bytes(), std::memory_order_relaxed);
}

void ConstantWeightGroup::Declare(size_t i, const core::runtime::RuntimeValue& value) {
  if (i >= constants_.size() || !value.is_tensor()) return;
  const core::runtime::Tensor& t = value.tensor();
  const core::DataType dt = t.dtype();
  if (t.contiguous() && t.rank() == 2 &&
      (dt == core::DataType::kFloat || dt == core::DataType::kFloat16))
    constants_[i] = t;
  calls_.store(InitialCalls(), std::memory_order_relaxed);
}

bool ConstantWeightGroup::Serves(const std::vector<const core::runtime::Tensor*>& b) const {
  if (b.size() != constants_.size() || b.empty()) return false;
  for (size_t i = 0; i < b.size(); ++i) {
    const core::runtime::Tensor& c = constants_[i];
    if (!c.defined() || !b[i]->contiguous() || b[i]->dtype() != c.dtype() ||
        c.dtype() != constants_[0].dtype() || b[i]->shape() != c.shape() ||
        b[i]->raw_data() != c.raw_data() || c.dim(0) != constants_[0].dim(0) || c.dim(1) <= 0 ||
        NarrowForPacking(c.dim(1)))
      return false;
  }
  return constants_[0].dim(0) > 0;
}

const PackedB* ConstantWeightGroup::Get(const std::vector<const core::runtime::Tensor*>& b) const {
  if (!Serves(b) || constants_[0].dtype() != core::DataType::kFloat || !SecondUse(calls_))
    return nullptr;
  core::runtime::CallOnceIsolated(once_, [&] { Build(); });
  return packed_.get();
}

const PackedHalfB* ConstantWeightGroup::GetHalf(
    const std::vector<const core::runtime::Tensor*>& b) const {
  if (!Serves(b) || constants_[0].dtype() != core::DataType::kFloat16 || !SecondUse(calls_))
    return nullptr;
  core::runtime::CallOnceIsolated(once_, [&] { BuildHalf(); });
  return half_.get();
}

// Lays the weights (elements of type T) side by side in one dense [K, width] matrix
// (padding columns zero) and returns make(that matrix, K, width), within the budget: the
// dense copy lives only while the pack is built.
template <class T, class Pack, class Make>
std::unique_ptr<const Pack> ConstantWeightGroup::SideBySide(const Make& make) const {
  offsets_.assign(1, 0);
  for (const auto& c : constants_) offsets_.push_back(offsets_.back() + Padded(c.dim(1)));
  const int64_t k = constants_[0].dim(0), width = offsets_.back();
  auto pack = KeepPack<Pack>(static_cast<size_t>(k * width) * sizeof(T), [&] {
    std::vector<T> side_by_side(static_cast<size_t>(k * width), T{0});
    for (size_t i = 0; i < constants_.size(); ++i) {
      const int64_t n = constants_[i].dim(1);
      const auto* src = static_cast<const T*>(constants_[i].raw_data());
      for (int64_t p = 0; p < k; ++p)
        std::copy(src + p * n, src + (p + 1) * n, side_by_side.data() + p * width + offsets_[i]);
    }
    return make(side_by_side.data(), k, width);
  });
  if (pack != nullptr)
    for (const auto& c : constants_) ReleaseWeight(c);
  return pack;
}

void ConstantWeightGroup::Build() const {
  packed_ = SideBySide<float, PackedB>([](const float* b, int64_t k, int64_t width) {
    return std::make_unique<const PackedB>(false, k, width, b, width);
  });
}

void ConstantWeightGroup::BuildHalf() const {
  half_ = SideBySide<uint16_t, PackedHalfB>([](const uint16_t* b, int64_t k, int64_t width) {
    return std::make_unique<const PackedHalfB>(b, k, width);
  });
}

}  // namespace onnx_light::ops::math
