// RuntimeSequence: an immutable-by-snapshot sequence of RuntimeValues with structural
// sharing. Copying shares the tree; PushBack/Set/Insert/Erase on one handle copy only the
// path they touch (logarithmic), so every other copy (snapshot) stays unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace onnx_light::core::runtime {

class RuntimeValue;

class RuntimeSequence {
 public:
  RuntimeSequence();
  ~RuntimeSequence();
  RuntimeSequence(const RuntimeSequence&);
  RuntimeSequence& operator=(const RuntimeSequence&);
  RuntimeSequence(RuntimeSequence&&) noexcept;
  RuntimeSequence& operator=(RuntimeSequence&&) noexcept;

  size_t size() const;
  bool empty() const { return size() == 0; }
  const RuntimeValue& operator[](size_t i) const;
  const RuntimeValue& at(size_t i) const;  // throws kInvalidArgument when out of range

  void PushBack(RuntimeValue value);
  void Set(size_t i, RuntimeValue value);
  void Insert(size_t i, RuntimeValue value);  // i == size() appends
  void Erase(size_t i);

  // Identity of the shared tree: equal ids mean no element changed (validation memo key).
  const void* tree_id() const;
  // Tree nodes allocated by the last edit on this handle (tests check it is logarithmic).
  size_t last_edit_nodes_copied() const { return last_edit_nodes_copied_; }

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  size_t size_ = 0;
  size_t last_edit_nodes_copied_ = 0;
};

}  // namespace onnx_light::core::runtime
