#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/runtime_sequence.h"
#include "core/runtime_value.h"
#include "core/tensor.h"

using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

namespace {

RuntimeValue Elem(int64_t v) { return RuntimeValue(Tensor::FromInt64("e", {}, {v})); }
int64_t ValueOf(const RuntimeValue& v) { return v.tensor().data<int64_t>()[0]; }

RuntimeSequence Iota(size_t n) {
  std::vector<RuntimeValue> values;
  values.reserve(n);
  for (size_t i = 0; i < n; ++i) values.push_back(Elem(static_cast<int64_t>(i)));
  return RuntimeSequence::FromValues(std::move(values));
}

// What a snapshot must keep: every element's value and payload address.
struct Picture {
  std::vector<int64_t> values;
  std::vector<const void*> data;
};
Picture Take(const RuntimeSequence& s) {
  Picture p;
  for (const RuntimeValue& v : s.ToVector()) {
    p.values.push_back(ValueOf(v));
    p.data.push_back(v.tensor().raw_data());
  }
  return p;
}
void CheckSame(const RuntimeSequence& s, const Picture& p) {
  REQUIRE(s.size() == p.values.size());
  for (size_t i = 0; i < s.size(); ++i) {
    CHECK(ValueOf(s[i]) == p.values[i]);
    CHECK(s[i].tensor().raw_data() == p.data[i]);
  }
}

void CollectNodes(const RuntimeSequence::Node* n, std::set<const void*>& out) {
  if (n == nullptr) return;
  out.insert(n);
  for (const auto& c : n->children) CollectNodes(c.get(), out);
}
// Nodes of `after` that `before` does not share: what the edit really allocated.
size_t NewNodes(const RuntimeSequence& before, const RuntimeSequence& after) {
  std::set<const void*> old_nodes, new_nodes;
  CollectNodes(before.root().get(), old_nodes);
  CollectNodes(after.root().get(), new_nodes);
  size_t fresh = 0;
  for (const void* n : new_nodes) fresh += old_nodes.count(n) == 0 ? 1 : 0;
  return fresh;
}

// Height bound of the tree: a tree of height h >= 2 has a root with >= 2 children and
// non-root nodes with >= kMinFanout = 16 entries, so n >= 2 * 16^(h-1), i.e.
// h <= 1 + log16(n / 2) = 1 + (log2(n) - 1) / 4.
size_t MaxHeight(size_t n) {
  size_t h = 1;
  double need = 2.0 * 16.0;  // elements needed for height h + 1
  while (static_cast<double>(n) >= need) {
    ++h;
    need *= 16.0;
  }
  return h;
}

}  // namespace

TEST_CASE("the derived height bound is logarithmic with base 16") {
  CHECK(MaxHeight(10) == 1);
  CHECK(MaxHeight(1000) == 3);
  CHECK(MaxHeight(100000) == 4);
  for (size_t n : {10u, 1000u, 100000u}) {
    CHECK(static_cast<double>(MaxHeight(n)) <= 1.0 + std::log2(static_cast<double>(n)) / 4.0);
  }
}

TEST_CASE("FromValues builds a balanced tree in order for every size") {
  for (size_t n : {0u, 1u, 31u, 32u, 33u, 512u, 1000u, 100000u}) {
    CAPTURE(n);
    RuntimeSequence s = Iota(n);
    s.CheckInvariants();
    CHECK(s.size() == n);
    CHECK(s.height() <= MaxHeight(std::max<size_t>(n, 1)));
    for (size_t i = 0; i < n; i += 1 + n / 50) CHECK(ValueOf(s[i]) == static_cast<int64_t>(i));
    if (n) CHECK(ValueOf(s.at(n - 1)) == static_cast<int64_t>(n - 1));
  }
}

TEST_CASE("snapshots are unchanged by Set, PushBack, Insert and Erase on another handle") {
  for (size_t n : {10u, 1000u}) {
    CAPTURE(n);
    RuntimeSequence s = Iota(n);
    RuntimeSequence snap = s;
    const Picture before = Take(snap);
    const void* id = snap.tree_id();
    CHECK(s.tree_id() == id);

    s.Set(n / 2, Elem(-1));
    s.PushBack(Elem(-2));
    s.Insert(0, Elem(-3));
    s.Insert(n / 3, Elem(-4));
    s.Erase(n / 4);
    s.Erase(s.size() - 1);
    s.CheckInvariants();

    CheckSame(snap, before);
    CHECK(snap.tree_id() == id);
    CHECK(s.tree_id() != id);
    snap.CheckInvariants();
    // The edited version still shares every untouched payload with the snapshot.
    std::vector<int64_t> model = before.values;
    model[n / 2] = -1;
    model.push_back(-2);
    model.insert(model.begin(), -3);
    model.insert(model.begin() + static_cast<std::ptrdiff_t>(n / 3), -4);
    model.erase(model.begin() + static_cast<std::ptrdiff_t>(n / 4));
    model.pop_back();
    REQUIRE(s.size() == model.size());
    for (size_t i = 0; i < s.size(); ++i) {
      CHECK(ValueOf(s[i]) == model[i]);
      if (model[i] >= 0 && model[i] != static_cast<int64_t>(n / 2)) {
        CHECK(s[i].tensor().raw_data() == before.data[static_cast<size_t>(model[i])]);
      }
    }
  }
}

TEST_CASE("a snapshot taken between edits keeps its own version") {
  RuntimeSequence s;
  s.PushBack(Elem(1));
  RuntimeSequence one = s;
  s.PushBack(Elem(2));
  RuntimeSequence two = s;
  s.Set(0, Elem(10));
  s.Erase(1);
  CHECK(one.size() == 1);
  CHECK(ValueOf(one[0]) == 1);
  CHECK(two.size() == 2);
  CHECK(ValueOf(two[0]) == 1);
  CHECK(ValueOf(two[1]) == 2);
  CHECK(s.size() == 1);
  CHECK(ValueOf(s[0]) == 10);
  s.Erase(0);
  CHECK(s.empty());
  CHECK(s.tree_id() == nullptr);
  CHECK(ValueOf(two[1]) == 2);
}

TEST_CASE("each edit allocates only its path: at most 2*height+1 nodes, height <= 1+log16(n/2)") {
  for (size_t n : {10u, 1000u, 100000u}) {
    CAPTURE(n);
    RuntimeSequence s = Iota(n);
    // Grow by appends so that the tree has the shape real feedback produces.
    RuntimeSequence grown;
    for (size_t i = 0; i < n; ++i) {
      RuntimeSequence prev = grown;
      const size_t h = grown.height();
      grown.PushBack(Elem(static_cast<int64_t>(i)));
      // Inserting copies the path (h nodes), at most one split sibling per level (h) and
      // one new root.
      const size_t copied = grown.last_edit_nodes_copied();
      CHECK_MESSAGE(copied <= 2 * MaxHeight(std::max<size_t>(i, 1)) + 1, "push ", i);
      if (h > 0) CHECK(copied >= h);
      if (i % 997 == 0) CHECK(NewNodes(prev, grown) == copied);
    }
    grown.CheckInvariants();
    CHECK(grown.height() <= MaxHeight(n));

    for (RuntimeSequence* t : {&s, &grown}) {
      const size_t h = t->height();
      const size_t bound = 2 * MaxHeight(n) + 1;
      RuntimeSequence prev = *t;

      t->Set(n / 2, Elem(-1));
      CHECK(t->last_edit_nodes_copied() == h);  // exactly the path
      CHECK(NewNodes(prev, *t) == h);

      prev = *t;
      t->Insert(n / 3, Elem(-2));
      CHECK(t->last_edit_nodes_copied() <= bound);
      CHECK(NewNodes(prev, *t) == t->last_edit_nodes_copied());

      prev = *t;
      t->Insert(0, Elem(-3));
      CHECK(t->last_edit_nodes_copied() <= bound);
      CHECK(NewNodes(prev, *t) == t->last_edit_nodes_copied());

      // Erasing copies the path and at most one sibling per non-root level.
      for (int where = 0; where < 3; ++where) {
        const size_t pos = where == 0 ? n / 4 : where == 1 ? 0 : t->size() - 1;
        prev = *t;
        const size_t before_h = t->height();
        t->Erase(pos);
        CHECK(t->last_edit_nodes_copied() <= 2 * before_h - 1);
        CHECK(t->last_edit_nodes_copied() <= bound);
        // When the root is left with one child, its fresh copy is dropped (the tree shrinks).
        const size_t dropped = t->height() < before_h ? 1 : 0;
        CHECK(NewNodes(prev, *t) == t->last_edit_nodes_copied() - dropped);
      }
      t->CheckInvariants();
    }
  }
  // The concrete bounds for the three sizes: 3, 7 and 9 nodes.
  CHECK(2 * MaxHeight(10) + 1 == 3);
  CHECK(2 * MaxHeight(1000) + 1 == 7);
  CHECK(2 * MaxHeight(100000) + 1 == 9);
}

TEST_CASE("random edits agree with a std::vector model and old snapshots stay intact") {
  std::mt19937 rng(12345);
  RuntimeSequence s;
  std::vector<int64_t> model;
  std::vector<std::pair<RuntimeSequence, std::vector<int64_t>>> snapshots;
  int64_t next = 0;
  // Phases that grow to a few thousand elements and shrink back to empty, so that splits,
  // merges, borrows and root collapses all happen at every level.
  for (int phase = 0; phase < 6; ++phase) {
    const bool grow = phase % 2 == 0;
    const size_t target = grow ? 3000 + static_cast<size_t>(phase) * 500 : 0;
    int steps = 0;
    while ((grow ? model.size() < target : !model.empty()) && steps < 100000) {
      ++steps;
      const unsigned op = rng() % 10;
      const bool erase = grow ? op < 3 : op < 7;
      if (erase && !model.empty()) {
        const size_t i = rng() % model.size();
        s.Erase(i);
        model.erase(model.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op == 9 && !model.empty()) {
        const size_t i = rng() % model.size();
        s.Set(i, Elem(next));
        model[i] = next++;
      } else {
        const size_t i = rng() % (model.size() + 1);
        s.Insert(i, Elem(next));
        model.insert(model.begin() + static_cast<std::ptrdiff_t>(i), next++);
      }
      REQUIRE(s.size() == model.size());
      if (steps % 500 == 0) {
        s.CheckInvariants();
        snapshots.emplace_back(s, model);
        for (size_t i = 0; i < model.size(); ++i) REQUIRE(ValueOf(s[i]) == model[i]);
      }
    }
    s.CheckInvariants();
    REQUIRE(s.size() == model.size());
    for (size_t i = 0; i < model.size(); ++i) REQUIRE(ValueOf(s[i]) == model[i]);
  }
  CHECK(s.empty());
  REQUIRE(snapshots.size() > 20);
  for (const auto& [snap, values] : snapshots) {
    snap.CheckInvariants();
    REQUIRE(snap.size() == values.size());
    std::vector<RuntimeValue> all = snap.ToVector();
    for (size_t i = 0; i < values.size(); ++i) REQUIRE(ValueOf(all[i]) == values[i]);
  }
}

TEST_CASE("out-of-range positions are rejected with the index and size") {
  RuntimeSequence s = Iota(3);
  CHECK_THROWS_WITH_AS(s.at(3), "sequence index 3 out of range for size 3", Error);
  CHECK_THROWS_WITH_AS(s.Set(5, Elem(0)), "sequence set index 5 out of range for size 3", Error);
  CHECK_THROWS_WITH_AS(s.Insert(4, Elem(0)), "sequence insert position 4 out of range for size 3",
                       Error);
  CHECK_THROWS_WITH_AS(s.Erase(3), "sequence erase index 3 out of range for size 3", Error);
  RuntimeSequence empty;
  CHECK_THROWS_AS(empty.Erase(0), Error);
  CHECK(s.size() == 3);
  s.CheckInvariants();
}
