// Placeholder flat copy-on-write storage; replaced by a logarithmic path-copying tree.
#include "core/runtime_sequence.h"

#include <vector>

#include "core/error.h"
#include "core/runtime_value.h"

namespace onnx_light::core::runtime {

struct RuntimeSequence::Node {
  std::vector<RuntimeValue> items;
};

RuntimeSequence::RuntimeSequence() = default;
RuntimeSequence::~RuntimeSequence() = default;
RuntimeSequence::RuntimeSequence(const RuntimeSequence&) = default;
RuntimeSequence& RuntimeSequence::operator=(const RuntimeSequence&) = default;
RuntimeSequence::RuntimeSequence(RuntimeSequence&&) noexcept = default;
RuntimeSequence& RuntimeSequence::operator=(RuntimeSequence&&) noexcept = default;

size_t RuntimeSequence::size() const { return size_; }

const RuntimeValue& RuntimeSequence::operator[](size_t i) const { return root_->items[i]; }

const RuntimeValue& RuntimeSequence::at(size_t i) const {
  OL_CHECK(i < size_, ErrorCode::kInvalidArgument,
           "sequence index " + std::to_string(i) + " out of range for size " + std::to_string(size_));
  return root_->items[i];
}

namespace {
std::shared_ptr<RuntimeSequence::Node> CopyOf(const std::shared_ptr<const RuntimeSequence::Node>& n) {
  return n ? std::make_shared<RuntimeSequence::Node>(*n) : std::make_shared<RuntimeSequence::Node>();
}
}  // namespace

void RuntimeSequence::PushBack(RuntimeValue value) { Insert(size_, std::move(value)); }

void RuntimeSequence::Set(size_t i, RuntimeValue value) {
  at(i);
  auto n = CopyOf(root_);
  n->items[i] = std::move(value);
  root_ = std::move(n);
  last_edit_nodes_copied_ = 1;
}

void RuntimeSequence::Insert(size_t i, RuntimeValue value) {
  OL_CHECK(i <= size_, ErrorCode::kInvalidArgument, "sequence insert position out of range");
  auto n = CopyOf(root_);
  n->items.insert(n->items.begin() + static_cast<std::ptrdiff_t>(i), std::move(value));
  root_ = std::move(n);
  ++size_;
  last_edit_nodes_copied_ = 1;
}

void RuntimeSequence::Erase(size_t i) {
  at(i);
  auto n = CopyOf(root_);
  n->items.erase(n->items.begin() + static_cast<std::ptrdiff_t>(i));
  root_ = std::move(n);
  --size_;
  last_edit_nodes_copied_ = 1;
}

const void* RuntimeSequence::tree_id() const { return root_.get(); }

}  // namespace onnx_light::core::runtime
