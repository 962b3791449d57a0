// Persistent B+-tree with subtree counts. Every edit copies the nodes on its root-to-leaf
// path (plus at most one sibling per level when a node splits, merges or borrows) and shares
// everything else with the previous version.
#include "core/runtime_sequence.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "core/runtime_value.h"

namespace onnx_light::core::runtime {

namespace {

using Node = RuntimeSequence::Node;
using NodePtr = std::shared_ptr<const Node>;
using MutableNode = std::shared_ptr<Node>;
using Item = std::shared_ptr<const RuntimeValue>;
constexpr size_t kMax = RuntimeSequence::kMaxFanout;
constexpr size_t kMin = RuntimeSequence::kMinFanout;

// Allocates nodes for one edit and counts them.
struct Editor {
  size_t allocated = 0;
  MutableNode New(bool leaf) {
    ++allocated;
    auto n = std::make_shared<Node>();
    n->leaf = leaf;
    return n;
  }
  MutableNode Copy(const Node& n) {
    ++allocated;
    return std::make_shared<Node>(n);
  }
};

size_t Fanout(const Node& n) { return n.leaf ? n.items.size() : n.children.size(); }

template <typename T>
std::ptrdiff_t Offset(const std::vector<T>& /*entries*/, size_t i) {
  return static_cast<std::ptrdiff_t>(i);
}

// The child of internal node `n` holding position `i`; `i` becomes the position inside it.
// A position equal to the subtree size (append) lands in the last child.
size_t ChildFor(const Node& n, size_t& i) {
  for (size_t c = 0;; ++c) {
    const size_t s = n.children[c]->size;
    if (i < s || c + 1 == n.children.size()) return c;
    i -= s;
  }
}

// Splits an overfull fresh node in two halves; returns the new right half (null if it fits).
MutableNode SplitIfOverfull(Node& n, Editor& editor) {
  const size_t fanout = Fanout(n);
  if (fanout <= kMax) return nullptr;
  const size_t half = fanout / 2;
  MutableNode right = editor.New(n.leaf);
  if (n.leaf) {
    right->items.assign(n.items.begin() + Offset(n.items, half), n.items.end());
    n.items.resize(half);
    right->size = right->items.size();
  } else {
    right->children.assign(n.children.begin() + Offset(n.children, half), n.children.end());
    n.children.resize(half);
    for (const NodePtr& c : right->children) right->size += c->size;
  }
  n.size -= right->size;
  return right;
}

std::pair<MutableNode, MutableNode> InsertAt(const Node& n, size_t i, Item item, Editor& editor) {
  MutableNode copy = editor.Copy(n);
  if (n.leaf) {
    copy->items.insert(copy->items.begin() + Offset(copy->items, i), std::move(item));
  } else {
    const size_t c = ChildFor(n, i);
    auto [child, extra] = InsertAt(*n.children[c], i, std::move(item), editor);
    copy->children[c] = std::move(child);
    if (extra)
      copy->children.insert(copy->children.begin() + Offset(copy->children, c + 1),
                            std::move(extra));
  }
  ++copy->size;
  MutableNode right = SplitIfOverfull(*copy, editor);
  return {std::move(copy), std::move(right)};
}

MutableNode SetAt(const Node& n, size_t i, Item item, Editor& editor) {
  MutableNode copy = editor.Copy(n);
  if (n.leaf) {
    copy->items[i] = std::move(item);
  } else {
    const size_t c = ChildFor(n, i);
    copy->children[c] = SetAt(*n.children[c], i, std::move(item), editor);
  }
  return copy;
}

// Moves entry `from_index` of `from` to position `to_index` of `to` (both fresh nodes of the
// same kind), keeping subtree sizes right.
void MoveEntry(Node& from, size_t from_index, Node& to, size_t to_index) {
  size_t moved;
  if (from.leaf) {
    to.items.insert(to.items.begin() + Offset(to.items, to_index),
                    std::move(from.items[from_index]));
    from.items.erase(from.items.begin() + Offset(from.items, from_index));
    moved = 1;
  } else {
    moved = from.children[from_index]->size;
    to.children.insert(to.children.begin() + Offset(to.children, to_index),
                       std::move(from.children[from_index]));
    from.children.erase(from.children.begin() + Offset(from.children, from_index));
  }
  from.size -= moved;
  to.size += moved;
}

// Appends (or prepends) all entries of `sibling` to the fresh node `into`.
void Absorb(Node& into, const Node& sibling, bool sibling_is_right) {
  if (into.leaf) {
    into.items.insert(sibling_is_right ? into.items.end() : into.items.begin(),
                      sibling.items.begin(), sibling.items.end());
  } else {
    into.children.insert(sibling_is_right ? into.children.end() : into.children.begin(),
                         sibling.children.begin(), sibling.children.end());
  }
  into.size += sibling.size;
}

MutableNode EraseAt(const Node& n, size_t i, Editor& editor) {
  MutableNode copy = editor.Copy(n);
  --copy->size;
  if (n.leaf) {
    copy->items.erase(copy->items.begin() + Offset(copy->items, i));
    return copy;
  }
  const size_t c = ChildFor(n, i);
  MutableNode child = EraseAt(*n.children[c], i, editor);
  if (Fanout(*child) >= kMin || copy->children.size() == 1) {
    copy->children[c] = std::move(child);
    return copy;
  }
  // The child fell below the minimum fill: merge it with a sibling when both fit in one
  // node, otherwise take one entry from the sibling (which then has entries to spare).
  const bool right = c + 1 < copy->children.size();
  const size_t s = right ? c + 1 : c - 1;
  const Node& sibling = *copy->children[s];
  if (Fanout(*child) + Fanout(sibling) <= kMax) {
    Absorb(*child, sibling, right);
    copy->children[c] = std::move(child);
    copy->children.erase(copy->children.begin() + Offset(copy->children, s));
  } else {
    MutableNode donor = editor.Copy(sibling);
    if (right) {
      MoveEntry(*donor, 0, *child, Fanout(*child));
    } else {
      MoveEntry(*donor, Fanout(*donor) - 1, *child, 0);
    }
    copy->children[c] = std::move(child);
    copy->children[s] = std::move(donor);
  }
  return copy;
}

// Elements are shared immutable snapshots: a tensor loses write permission on entry.
Item MakeItem(RuntimeValue value) {
  if (value.is_tensor()) value.mutable_tensor().Seal();
  return std::make_shared<const RuntimeValue>(std::move(value));
}

const RuntimeValue& Lookup(const Node* n, size_t i) {
  while (!n->leaf) n = n->children[ChildFor(*n, i)].get();
  return *n->items[i];
}

void Collect(const Node& n, std::vector<RuntimeValue>& out) {
  if (n.leaf) {
    for (const Item& item : n.items) out.push_back(*item);
  } else {
    for (const NodePtr& c : n.children) Collect(*c, out);
  }
}

// Returns the depth of the leaves under `n`; throws on any broken invariant.
size_t Check(const Node& n, bool is_root) {
  auto fail = [](const std::string& what) {
    Throw(ErrorCode::kRuntime, "RuntimeSequence invariant broken: " + what);
  };
  const size_t fanout = Fanout(n);
  if (fanout > kMax) fail("node with " + std::to_string(fanout) + " entries");
  if (!is_root && fanout < kMin) fail("underfull node with " + std::to_string(fanout));
  if (n.leaf) {
    if (!n.children.empty()) fail("leaf with children");
    if (n.size != n.items.size()) fail("leaf size mismatch");
    for (const Item& item : n.items)
      if (item == nullptr) fail("null element");
    return 1;
  }
  if (!n.items.empty()) fail("internal node with elements");
  if (is_root && fanout < 2) fail("internal root with one child");
  size_t total = 0;
  size_t depth = 0;
  for (const NodePtr& c : n.children) {
    if (c == nullptr) fail("null child");
    const size_t d = Check(*c, false);
    if (depth != 0 && d != depth) fail("leaves at different depths");
    depth = d;
    total += c->size;
  }
  if (total != n.size) fail("subtree count mismatch");
  return depth + 1;
}

// Groups `nodes` under parents of at most kMax entries spread evenly (each >= kMin when
// there is more than one parent).
template <typename T, typename Fill>
std::vector<NodePtr> BuildLevel(std::vector<T> entries, bool leaf, Editor& editor, Fill fill) {
  const size_t count = entries.size();
  const size_t parents = (count + kMax - 1) / kMax;
  std::vector<NodePtr> out;
  out.reserve(parents);
  size_t next = 0;
  for (size_t p = 0; p < parents; ++p) {
    const size_t take = count / parents + (p < count % parents ? 1 : 0);
    MutableNode node = editor.New(leaf);
    for (size_t k = 0; k < take; ++k) fill(*node, std::move(entries[next++]));
    out.push_back(std::move(node));
  }
  return out;
}

}  // namespace

RuntimeSequence::RuntimeSequence() = default;
RuntimeSequence::~RuntimeSequence() = default;
RuntimeSequence::RuntimeSequence(const RuntimeSequence&) = default;
RuntimeSequence& RuntimeSequence::operator=(const RuntimeSequence&) = default;
RuntimeSequence::RuntimeSequence(RuntimeSequence&&) noexcept = default;
RuntimeSequence& RuntimeSequence::operator=(RuntimeSequence&&) noexcept = default;

RuntimeSequence RuntimeSequence::FromValues(std::vector<RuntimeValue> values) {
  RuntimeSequence seq;
  if (values.empty()) return seq;
  Editor editor;
  std::vector<Item> items;
  items.reserve(values.size());
  for (RuntimeValue& v : values) {
    items.push_back(MakeItem(std::move(v)));
  }
  std::vector<NodePtr> level =
      BuildLevel(std::move(items), true, editor, [](Node& node, Item item) {
        node.items.push_back(std::move(item));
        ++node.size;
      });
  while (level.size() > 1) {
    level = BuildLevel(std::move(level), false, editor, [](Node& node, NodePtr child) {
      node.size += child->size;
      node.children.push_back(std::move(child));
    });
  }
  seq.root_ = std::move(level.front());
  seq.size_ = seq.root_->size;
  seq.last_edit_nodes_copied_ = editor.allocated;
  return seq;
}

size_t RuntimeSequence::size() const { return size_; }

const RuntimeValue& RuntimeSequence::operator[](size_t i) const { return Lookup(root_.get(), i); }

const RuntimeValue& RuntimeSequence::at(size_t i) const {
  OL_CHECK(
      i < size_, ErrorCode::kInvalidArgument,
      "sequence index " + std::to_string(i) + " out of range for size " + std::to_string(size_));
  return Lookup(root_.get(), i);
}

std::vector<RuntimeValue> RuntimeSequence::ToVector() const {
  std::vector<RuntimeValue> out;
  out.reserve(size_);
  if (root_) Collect(*root_, out);
  return out;
}

void RuntimeSequence::PushBack(RuntimeValue value) { Insert(size_, std::move(value)); }

void RuntimeSequence::Set(size_t i, RuntimeValue value) {
  OL_CHECK(i < size_, ErrorCode::kInvalidArgument,
           "sequence set index " + std::to_string(i) + " out of range for size " +
               std::to_string(size_));
  Editor editor;
  root_ = SetAt(*root_, i, MakeItem(std::move(value)), editor);
  last_edit_nodes_copied_ = editor.allocated;
}

void RuntimeSequence::Insert(size_t i, RuntimeValue value) {
  OL_CHECK(i <= size_, ErrorCode::kInvalidArgument,
           "sequence insert position " + std::to_string(i) + " out of range for size " +
               std::to_string(size_));
  Editor editor;
  Item item = MakeItem(std::move(value));
  if (root_ == nullptr) {
    MutableNode leaf = editor.New(true);
    leaf->items.push_back(std::move(item));
    leaf->size = 1;
    root_ = std::move(leaf);
  } else {
    auto [node, extra] = InsertAt(*root_, i, std::move(item), editor);
    if (extra) {
      MutableNode top = editor.New(false);
      top->size = node->size + extra->size;
      top->children = {std::move(node), std::move(extra)};
      root_ = std::move(top);
    } else {
      root_ = std::move(node);
    }
  }
  ++size_;
  last_edit_nodes_copied_ = editor.allocated;
}

void RuntimeSequence::Erase(size_t i) {
  OL_CHECK(i < size_, ErrorCode::kInvalidArgument,
           "sequence erase index " + std::to_string(i) + " out of range for size " +
               std::to_string(size_));
  Editor editor;
  NodePtr node = EraseAt(*root_, i, editor);
  // An internal root left with one child hands the root role down (the tree shrinks).
  while (!node->leaf && node->children.size() == 1) node = node->children.front();
  if (node->size == 0) node = nullptr;
  root_ = std::move(node);
  --size_;
  last_edit_nodes_copied_ = editor.allocated;
}

const void* RuntimeSequence::tree_id() const { return root_.get(); }

size_t RuntimeSequence::height() const {
  size_t h = 0;
  for (const Node* n = root_.get(); n != nullptr; n = n->leaf ? nullptr : n->children[0].get()) ++h;
  return h;
}

void RuntimeSequence::CheckInvariants() const {
  if (root_ == nullptr) {
    OL_CHECK(size_ == 0, ErrorCode::kRuntime, "RuntimeSequence invariant broken: empty tree");
    return;
  }
  Check(*root_, true);
  OL_CHECK(root_->size == size_ && size_ > 0, ErrorCode::kRuntime,
           "RuntimeSequence invariant broken: size " + std::to_string(size_) + " vs tree " +
               std::to_string(root_->size));
}

}  // namespace onnx_light::core::runtime
