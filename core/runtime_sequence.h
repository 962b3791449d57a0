// RuntimeSequence: an immutable-by-snapshot sequence of RuntimeValues with structural
// sharing. Copying shares the tree; PushBack/Set/Insert/Erase on one handle copy only the
// path they touch (logarithmic), so every other copy (snapshot) stays unchanged.
//
// The tree is a persistent B+-tree with subtree counts: leaves hold up to kMaxFanout
// elements, internal nodes up to kMaxFanout children, and every non-root node holds at
// least kMinFanout. Nodes are never modified after an edit publishes them, so snapshots can
// be read from any thread; edits on one handle need external synchronisation like any value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace onnx_light::core::runtime {

class RuntimeValue;

class RuntimeSequence {
 public:
  static constexpr size_t kMaxFanout = 32;
  static constexpr size_t kMinFanout = kMaxFanout / 2;

  // One immutable tree node. A node is shared by every sequence version that did not edit
  // below it, so validation may memoise per node (hold a weak_ptr to the node as key).
  struct Node {
    bool leaf = true;
    size_t size = 0;                                         // elements in this subtree
    std::vector<std::shared_ptr<const RuntimeValue>> items;  // leaf: the elements
    std::vector<std::shared_ptr<const Node>> children;       // internal: the subtrees
  };

  RuntimeSequence();
  ~RuntimeSequence();
  RuntimeSequence(const RuntimeSequence&);
  RuntimeSequence& operator=(const RuntimeSequence&);
  RuntimeSequence(RuntimeSequence&&) noexcept;
  RuntimeSequence& operator=(RuntimeSequence&&) noexcept;

  // Builds a balanced tree in O(n) (no payload is copied; values are moved in).
  static RuntimeSequence FromValues(std::vector<RuntimeValue> values);

  size_t size() const;
  bool empty() const { return size() == 0; }
  const RuntimeValue& operator[](size_t i) const;  // O(log n); i < size() is the caller's job
  const RuntimeValue& at(size_t i) const;          // throws kInvalidArgument when out of range
  // The elements in order (copies share payload owners). O(n).
  std::vector<RuntimeValue> ToVector() const;

  void PushBack(RuntimeValue value);
  void Set(size_t i, RuntimeValue value);
  void Insert(size_t i, RuntimeValue value);  // i == size() appends
  void Erase(size_t i);

  // Identity of the shared tree: equal ids mean no element changed (validation memo key).
  // Meaningful only while some handle keeps the tree alive; memos should key on root().
  const void* tree_id() const;
  const std::shared_ptr<const Node>& root() const { return root_; }
  // Tree nodes allocated by the last edit on this handle (tests check it is logarithmic).
  size_t last_edit_nodes_copied() const { return last_edit_nodes_copied_; }
  // Levels from the root to the leaves (0 when empty).
  size_t height() const;
  // Throws kRuntime when a structural invariant is broken (counts, fill, equal depth).
  void CheckInvariants() const;

 private:
  std::shared_ptr<const Node> root_;
  size_t size_ = 0;
  size_t last_edit_nodes_copied_ = 0;
};

}  // namespace onnx_light::core::runtime
