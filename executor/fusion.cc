#include "executor/fusion.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

namespace onnx_light::core::runtime {

namespace {

using ConstantFn = std::function<const Tensor*(const std::string&)>;

// Producers and readers of the graph's values, over the nodes still to run.
class GraphIndex {
 public:
  GraphIndex(const GraphProto& graph, const std::vector<bool>& alive) : graph_(graph) {
    for (int i = 0; i < graph.node_size(); ++i) {
      if (!alive[static_cast<size_t>(i)]) continue;
      for (const auto& o : graph.node(i).output())
        if (!o.empty()) producer_[o] = i;
      for (const auto& in : graph.node(i).input())
        if (!in.empty()) readers_[in].push_back(i);
    }
  }
  // The node producing `name` when it is a default-domain `op` with the inputs the matchers
  // read, else -1. (The arity check bounds only the maximum; a malformed node with too few
  // inputs is left to its kernel, which names it.)
  int Producer(const std::string& name, const char* op) const {
    auto it = producer_.find(name);
    if (it == producer_.end()) return -1;
    const NodeProto& n = graph_.node(it->second);
    if (n.op_type() != op || !(n.domain().empty() || n.domain() == "ai.onnx")) return -1;
    return n.input_size() >= MinInputs(n.op_type()) ? it->second : -1;
  }
  // Whether node `i` is the producer Producer(.., op) would give for its first output. A
  // reader found through Readers may have no outputs at all (a malformed node the kernels
  // refuse later): it is no `op` here, and its output(0) is never read.
  bool Is(int i, const char* op) const {
    const NodeProto& n = graph_.node(i);
    return n.output_size() > 0 && Producer(n.output(0), op) == i;
  }
  const std::vector<int>& Readers(const std::string& name) const {
    static const std::vector<int> none;
    auto it = readers_.find(name);
    return it == readers_.end() ? none : it->second;
  }
  const NodeProto& node(int i) const { return graph_.node(i); }
  // The node producing `name`, whatever its op and domain, else -1.
  int AnyProducer(const std::string& name) const {
    auto it = producer_.find(name);
    return it == producer_.end() ? -1 : it->second;
  }

 private:
  static int MinInputs(const std::string& op) {
    static const std::unordered_map<std::string, int> kTwo = {
        {"Mul", 2},     {"Div", 2},    {"Add", 2},
        {"Pow", 2},     {"MatMul", 2}, {"Where", 3},
        {"Reshape", 2}, {"Expand", 2}, {"DequantizeLinear", 2}};
    auto it = kTwo.find(op);
    return it == kTwo.end() ? 1 : it->second;
  }

  const GraphProto& graph_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, std::vector<int>> readers_;
};

std::optional<std::vector<int64_t>> ConstInts(const ConstantFn& constant, const std::string& name) {
  const Tensor* t = constant(name);
  if (t == nullptr || (t->dtype() != DataType::kInt64 && t->dtype() != DataType::kInt32))
    return std::nullopt;
  return t->ToInt64Vector();
}

// A FLOAT scalar constant; with `half_too`, FLOAT16 and BFLOAT16 ones as well (for fusions
// whose kernels take those types: a FLOAT16 model's constants are FLOAT16).
std::optional<float> ConstScalar(const ConstantFn& constant, const std::string& name,
                                 bool half_too = false) {
  const Tensor* t = constant(name);
  if (t == nullptr || t->numel() != 1) return std::nullopt;
  const DataType dt = t->dtype();
  if (dt != DataType::kFloat &&
      !(half_too && (dt == DataType::kFloat16 || dt == DataType::kBFloat16)))
    return std::nullopt;
  return t->ToFloatVector()[0];
}

const AttributeProto* Attr(const NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

AttributeProto FloatAttr(const char* name, float value) {
  AttributeProto a;
  a.set_name(name);
  a.set_type(AttributeProto::FLOAT);
  a.set_f(value);
  return a;
}

AttributeProto StringAttr(const char* name, const std::string& value) {
  AttributeProto a;
  a.set_name(name);
  a.set_type(AttributeProto::STRING);
  a.set_s(value);
  return a;
}

// The node making `name` with op `op` and a scalar constant within 1e-6 of `want` as one
// operand (Div: the divisor): its index, the other operand in *other; -1 when not.
int ScalarOp(const GraphIndex& ix, const ConstantFn& constant, const std::string& name,
             const char* op, double want, std::string* other) {
  const int m = ix.Producer(name, op);
  if (m < 0) return -1;
  const NodeProto& n = ix.node(m);
  for (int side = std::string(op) == "Div" ? 1 : 0; side < 2; ++side) {
    const auto c = ConstScalar(constant, n.input(side));
    if (c && std::fabs(*c - want) <= 1e-6 * std::fabs(want)) {
      *other = n.input(1 - side);
      return m;
    }
  }
  return -1;
}

// Matches one attention subgraph ending at a MatMul, collecting the nodes it replaces.
class AttentionMatch {
 public:
  AttentionMatch(const GraphIndex& ix, const ConstantFn& constant) : ix_(ix), constant_(constant) {}

  std::optional<Fusion> Run(int final_matmul) {
    const NodeProto& m2 = ix_.node(final_matmul);
    Take(final_matmul);
    std::string probs = FloatCastInput(m2.input(0));
    if (int w = ix_.Producer(probs, "Where"); w >= 0) {  // Where(IsNaN(s), 0, s)
      const NodeProto& where = ix_.node(w);
      const int isnan = ix_.Producer(where.input(0), "IsNaN");
      const auto zero = ConstScalar(constant_, where.input(1), true);
      if (isnan < 0 || ix_.node(isnan).input(0) != where.input(2) || !zero || *zero != 0.0f)
        return std::nullopt;
      Take(w);
      Take(isnan);
      probs = where.input(2);
    }
    const int softmax = ix_.Producer(FloatCastInput(probs), "Softmax");
    if (softmax < 0) return std::nullopt;
    const AttributeProto* axis = Attr(ix_.node(softmax), "axis");
    if (axis == nullptr || (axis->i() != -1 && axis->i() != 3)) return std::nullopt;
    Take(softmax);
    std::string scores = ix_.node(softmax).input(0), mask;
    // The scores: MatMul(q, kT), scaled by a constant or not (eager attention scales the
    // scores, torch's SDPA decomposition q and k), soft-capped or not, plus a mask or not.
    float s_scale = 1.0f, softcap = 0.0f;
    int m1 = CappedProduct(scores, &s_scale, &softcap);
    if (m1 < 0) {
      const int add = ix_.Producer(scores, "Add");
      if (add < 0) return std::nullopt;
      const NodeProto& a = ix_.node(add);
      for (int side = 0; side < 2 && m1 < 0; ++side) {
        m1 = CappedProduct(a.input(side), &s_scale, &softcap);
        mask = a.input(1 - side);
      }
      if (m1 < 0) return std::nullopt;
      Take(add);
    }
    Take(m1);
    const NodeProto& qk = ix_.node(m1);
    float q_scale = 1.0f, k_scale = 1.0f;
    const std::string q = Unscaled(qk.input(0), &q_scale);
    q_scale *= s_scale;  // the kernel scales q . k by q_scale * k_scale
    const std::string kt = Unscaled(qk.input(1), &k_scale);
    const std::optional<std::string> k_rep = Untransposed(kt);
    if (!k_rep) return std::nullopt;
    std::string k_expand, k_reshape, v_expand, v_reshape;
    const std::string k = Unrepeated(*k_rep, &k_expand, &k_reshape);
    const std::string v = Unrepeated(m2.input(1), &v_expand, &v_reshape);

    Fusion f;
    f.removed.assign(taken_.begin(), taken_.end());
    f.rewired = rewired_;
    NodeProto& n = f.node;
    n.set_op_type("ScaledDotProductAttention");
    n.set_domain("ai.onnx_light.fused");
    n.set_name((m2.name().empty() ? m2.output(0) : m2.name()) + "/fused_attention");
    for (const std::string& in :
         std::vector<std::string>{q, k, v, mask, k_expand, k_reshape, transpose_in_, transpose_out_,
                                  v_expand, v_reshape})
      n.add_input(in);
    n.add_output(m2.output(0));
    *n.add_attribute() = FloatAttr("q_scale", q_scale);
    *n.add_attribute() = FloatAttr("k_scale", k_scale);
    if (softcap > 0.0f) *n.add_attribute() = FloatAttr("softcap", softcap);
    return f;
  }

 private:
  void Take(int i) { taken_.insert(i); }

  // x of Cast(x, to=FLOAT) (taken), else `name`. transformers' eager attention computes
  // softmax(dtype=float32).to(query.dtype), which the TorchScript exporter keeps as a Cast
  // to FLOAT of FLOAT probabilities; the fused kernel takes FLOAT only (it refuses other
  // types by name), so wherever it runs that Cast was a no-op.
  std::string FloatCastInput(const std::string& name) {
    const int c = ix_.Producer(name, "Cast");
    if (c < 0) return name;
    const AttributeProto* to = Attr(ix_.node(c), "to");
    if (to == nullptr || to->i() != TensorProto::FLOAT) return name;
    Take(c);
    return ix_.node(c).input(0);
  }

  // x of Mul(x, c) / Mul(c, x) with a scalar constant c (into *scale), else `name`.
  std::string Unscaled(const std::string& name, float* scale) {
    const int mul = ix_.Producer(name, "Mul");
    if (mul < 0) return name;
    const NodeProto& m = ix_.node(mul);
    for (int side = 0; side < 2; ++side)
      if (auto c = ConstScalar(constant_, m.input(side), true)) {
        *scale = *c;
        Take(mul);
        return m.input(1 - side);
      }
    return name;
  }

  // The MatMul producing `name`, or the MatMul of Mul(MatMul, c) / Mul(c, MatMul) with a
  // scalar constant c (into *scale; the Mul is taken); -1 when neither.
  int ScaledProduct(const std::string& name, float* scale) {
    if (const int m = ix_.Producer(name, "MatMul"); m >= 0) return m;
    const int mul = ix_.Producer(name, "Mul");
    if (mul < 0) return -1;
    const NodeProto& n = ix_.node(mul);
    for (int side = 0; side < 2; ++side) {
      const int m = ix_.Producer(n.input(1 - side), "MatMul");
      if (const auto c = ConstScalar(constant_, n.input(side), true); c && m >= 0) {
        *scale = *c;
        Take(mul);
        return m;
      }
    }
    return -1;
  }

  // ScaledProduct of `name`, or of x in Mul(Tanh(Div(x, c)), c) (Gemma 2's soft cap c > 0,
  // into *cap; Mul(x, 1 / c) for the Div, either operand order of the Muls); -1 when neither.
  // Nodes are taken only on a match.
  int CappedProduct(const std::string& name, float* scale, float* cap) {
    if (const int m = ScaledProduct(name, scale); m >= 0) return m;
    const int mul = ix_.Producer(name, "Mul");
    if (mul < 0) return -1;
    const NodeProto& outer = ix_.node(mul);
    for (int side = 0; side < 2; ++side) {
      const auto c = ConstScalar(constant_, outer.input(side), true);
      const int tanh = ix_.Producer(outer.input(1 - side), "Tanh");
      if (!c || *c <= 0.0f || tanh < 0) continue;
      // Tanh(x / c) or Tanh(x * (1 / c)).
      const std::string& inner = ix_.node(tanh).input(0);
      std::string x;
      int scaler = ScalarOp(ix_, constant_, inner, "Div", *c, &x);
      if (scaler < 0) scaler = ScalarOp(ix_, constant_, inner, "Mul", 1.0 / *c, &x);
      if (scaler < 0) return -1;
      const int m = ScaledProduct(x, scale);
      if (m < 0) return -1;
      *cap = *c;
      for (int i : {mul, tanh, scaler}) Take(i);
      return m;
    }
    return -1;
  }

  // X where `name` is X with its last two axes swapped: Transpose(X, [0, 1, 3, 2]), or
  // Reshape(Transpose(Reshape(X, [-1, T, D]), [0, 2, 1]), [B, H, D, T]) with both shapes
  // built from X's own shape (torch's matmul of a transposed 4D operand).
  std::optional<std::string> Untransposed(const std::string& name) {
    if (int t = ix_.Producer(name, "Transpose"); t >= 0) {
      if (!HasPerm(ix_.node(t), {0, 1, 3, 2})) return std::nullopt;
      Take(t);
      return ix_.node(t).input(0);
    }
    const int r2 = ix_.Producer(name, "Reshape");
    if (r2 < 0) return std::nullopt;
    const int t = ix_.Producer(ix_.node(r2).input(0), "Transpose");
    if (t < 0 || !HasPerm(ix_.node(t), {0, 2, 1})) return std::nullopt;
    const int r0 = ix_.Producer(ix_.node(t).input(0), "Reshape");
    if (r0 < 0) return std::nullopt;
    const std::string x = ix_.node(r0).input(0);
    // [-1, T, D] and [B, H, D, T] from Shape(x): then the three nodes are a transpose.
    std::vector<int> shape_nodes;
    if (ShapeConcat(ix_.node(r0).input(1), x, {{-1, -1}, {2, 3}, {3, 4}}, &shape_nodes) &&
        ShapeConcat(ix_.node(r2).input(1), x, {{0, 2}, {3, 4}, {2, 3}}, &shape_nodes)) {
      for (int i : shape_nodes) Take(i);
    } else {  // shapes from elsewhere: the kernel checks their values at run time
      transpose_in_ = ix_.node(r0).input(1);
      transpose_out_ = ix_.node(r2).input(1);
    }
    Take(r2);
    Take(t);
    Take(r0);
    return x;
  }

  // Whether `name` is Concat(axis 0) of parts, each {start, end} a Slice of Shape(x) over
  // axes [start, end) of a 4D x, or {-1, -1} the constant [-1]; its nodes go to `taken`.
  bool ShapeConcat(const std::string& name, const std::string& x,
                   const std::vector<std::pair<int64_t, int64_t>>& parts, std::vector<int>* taken) {
    const int c = ix_.Producer(name, "Concat");
    if (c < 0 || ix_.node(c).input_size() != static_cast<int>(parts.size())) return false;
    std::vector<int> nodes = {c};
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string& in = ix_.node(c).input(static_cast<int>(i));
      if (parts[i].first < 0) {
        if (ConstInts(constant_, in) != std::vector<int64_t>{-1}) return false;
        continue;
      }
      const int s = ix_.Producer(in, "Slice");
      if (s < 0) return false;
      const NodeProto& slice = ix_.node(s);
      const int shape = ix_.Producer(slice.input(0), "Shape");
      if (shape < 0 || ix_.node(shape).input(0) != x || !WholeShape(ix_.node(shape)) ||
          slice.input_size() < 3)
        return false;
      const auto starts = ConstInts(constant_, slice.input(1));
      const auto ends = ConstInts(constant_, slice.input(2));
      if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return false;
      if (slice.input_size() > 3 && ConstInts(constant_, slice.input(3)) != std::vector<int64_t>{0})
        return false;
      if (slice.input_size() > 4 && ConstInts(constant_, slice.input(4)) != std::vector<int64_t>{1})
        return false;
      auto norm = [](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + 4 : v, 0, 4); };
      if (norm((*starts)[0]) != parts[i].first || norm((*ends)[0]) != parts[i].second) return false;
      nodes.push_back(s);
      nodes.push_back(shape);
    }
    taken->insert(taken->end(), nodes.begin(), nodes.end());
    return true;
  }

  // K of Reshape(Expand(Unsqueeze(K, [2]), E), R) (the GQA head repeat; E and R go to the
  // kernel, which checks them), else `name` itself.
  std::string Unrepeated(const std::string& name, std::string* expand, std::string* reshape) {
    const int r = ix_.Producer(name, "Reshape");
    if (r < 0) return name;
    const int e = ix_.Producer(ix_.node(r).input(0), "Expand");
    if (e < 0) return name;
    const int u = ix_.Producer(ix_.node(e).input(0), "Unsqueeze");
    if (u < 0) return name;
    const NodeProto& un = ix_.node(u);
    std::optional<std::vector<int64_t>> axes;
    if (un.input_size() > 1) {
      axes = ConstInts(constant_, un.input(1));
    } else if (const AttributeProto* a = Attr(un, "axes")) {
      axes = std::vector<int64_t>(a->ints().begin(), a->ints().end());
    }
    if (!axes || axes->size() != 1 || ((*axes)[0] != 2 && (*axes)[0] != -3)) return name;
    Take(r);
    Take(e);
    Take(u);
    *expand = ix_.node(e).input(1);
    *reshape = ix_.node(r).input(1);
    RewireShapeReaders(ix_.node(r).output(0), un.input(0));
    return un.input(0);
  }

  // Every Shape of `repeated` ([B, H, T, D]) whose only readers Gather its dimension 0, 2
  // or 3 (where the head repeat changes nothing) reads `unrepeated` ([B, KV, T, D]) instead.
  void RewireShapeReaders(const std::string& repeated, const std::string& unrepeated) {
    for (int s : ix_.Readers(repeated)) {
      if (!ix_.Is(s, "Shape") || !WholeShape(ix_.node(s))) continue;
      const std::vector<int>& gathers = ix_.Readers(ix_.node(s).output(0));
      const bool invariant =
          !gathers.empty() && std::all_of(gathers.begin(), gathers.end(), [&](int g) {
            if (!ix_.Is(g, "Gather") || ix_.node(g).input(0) != ix_.node(s).output(0)) return false;
            const AttributeProto* axis = Attr(ix_.node(g), "axis");
            const auto index = ConstInts(constant_, ix_.node(g).input(1));
            return (axis == nullptr || axis->i() == 0) && index && index->size() == 1 &&
                   (*index)[0] != 1 && (*index)[0] != -3;
          });
      if (invariant) rewired_.push_back({s, 0, unrepeated});
    }
  }

  // Shape with no `end` and `start` absent or 0: every dimension.
  static bool WholeShape(const NodeProto& shape) {
    const AttributeProto* start = Attr(shape, "start");
    return Attr(shape, "end") == nullptr && (start == nullptr || start->i() == 0);
  }

  static bool HasPerm(const NodeProto& n, const std::vector<int64_t>& perm) {
    const AttributeProto* a = Attr(n, "perm");
    return a != nullptr && std::vector<int64_t>(a->ints().begin(), a->ints().end()) == perm;
  }

  const GraphIndex& ix_;
  const ConstantFn& constant_;
  std::set<int> taken_;
  std::vector<Rewire> rewired_;
  std::string transpose_in_, transpose_out_;
};

// The other operand of a two-input node when one of them is `name`, else "".
std::string Other(const NodeProto& n, const std::string& name) {
  if (n.input_size() != 2) return "";
  return n.input(0) == name ? n.input(1) : n.input(1) == name ? n.input(0) : "";
}

bool IsLastAxis(const std::optional<std::vector<int64_t>>& axes) {
  return axes && axes->size() == 1 && (*axes)[0] == -1;
}

AttributeProto IntAttr(const char* name, int64_t value) {
  AttributeProto a;
  a.set_name(name);
  a.set_type(AttributeProto::INT);
  a.set_i(value);
  return a;
}

Fusion MakeFusion(std::set<int> removed, const char* op, const std::string& name,
                  const std::vector<std::string>& inputs, const std::string& output,
                  const std::vector<AttributeProto>& attributes) {
  Fusion f;
  f.removed.assign(removed.begin(), removed.end());
  f.node.set_op_type(op);
  f.node.set_domain("ai.onnx_light.fused");
  f.node.set_name((name.empty() ? output : name) + "/fused");
  for (const auto& in : inputs) f.node.add_input(in);
  f.node.add_output(output);
  for (const auto& a : attributes) *f.node.add_attribute() = a;
  return f;
}

// [W *] X / sqrt(ReduceMean(Pow(X, 2) or X * X, [-1]) + eps), the reciprocal as Reciprocal +
// Mul or as Div -> RMSNormalization(X[, W]), W a constant vector.
std::optional<Fusion> MatchRmsNorm(const GraphIndex& ix, const ConstantFn& constant,
                                   int final_mul) {
  std::set<int> taken = {final_mul};
  const NodeProto& last = ix.node(final_mul);
  auto normalized = [&](const std::string& name, std::string* x, float* eps) -> bool {
    std::set<int> mine;  // merged into `taken` only on a match
    std::string root;    // Sqrt(...) output
    if (int m = ix.Producer(name, "Mul"); m >= 0) {
      const NodeProto& mul = ix.node(m);
      for (int side = 0; side < 2 && root.empty(); ++side) {
        std::string denominator;  // Reciprocal(r) or Div(1, r) (TorchScript's rsqrt)
        int r = ix.Producer(mul.input(side), "Reciprocal");
        if (r >= 0) {
          denominator = ix.node(r).input(0);
        } else if ((r = ix.Producer(mul.input(side), "Div")) >= 0 &&
                   ConstScalar(constant, ix.node(r).input(0), true) == 1.0f) {
          denominator = ix.node(r).input(1);
        }
        if (!denominator.empty()) {
          *x = mul.input(1 - side);
          root = denominator;
          mine.insert({m, r});
        }
      }
    } else if (int d = ix.Producer(name, "Div"); d >= 0) {
      *x = ix.node(d).input(0);
      root = ix.node(d).input(1);
      mine.insert(d);
    }
    const int sq = root.empty() ? -1 : ix.Producer(root, "Sqrt");
    const int add = sq < 0 ? -1 : ix.Producer(ix.node(sq).input(0), "Add");
    if (add < 0) return false;
    std::string mean;
    for (int side = 0; side < 2 && mean.empty(); ++side)
      if (auto e = ConstScalar(constant, ix.node(add).input(side), true)) {
        *eps = *e;
        mean = ix.node(add).input(1 - side);
      }
    const int rm = mean.empty() ? -1 : ix.Producer(mean, "ReduceMean");
    if (rm < 0) return false;
    const NodeProto& reduce = ix.node(rm);
    const AttributeProto* keep = Attr(reduce, "keepdims");
    std::optional<std::vector<int64_t>> axes;
    if (reduce.input_size() > 1)
      axes = ConstInts(constant, reduce.input(1));
    else if (const AttributeProto* a = Attr(reduce, "axes"))
      axes = std::vector<int64_t>(a->ints().begin(), a->ints().end());
    if ((keep != nullptr && keep->i() != 1) || !IsLastAxis(axes)) return false;
    // The square as Pow(X, 2) or as Mul(X, X).
    int pw = ix.Producer(reduce.input(0), "Pow");
    if (pw >= 0 && ConstScalar(constant, ix.node(pw).input(1), true) != 2.0f) pw = -1;
    if (pw < 0 && (pw = ix.Producer(reduce.input(0), "Mul")) >= 0 &&
        ix.node(pw).input(1) != ix.node(pw).input(0))
      pw = -1;
    if (pw < 0 || ix.node(pw).input(0) != *x) return false;
    mine.insert({sq, add, rm, pw});
    taken.insert(mine.begin(), mine.end());
    return true;
  };
  // transformers' RMS norms compute in FLOAT: X = Cast(input, FLOAT), and the TorchScript
  // exporter keeps the cast back to the input's type before the scale, a Cast to FLOAT there
  // too. With X a Cast to FLOAT that one changes nothing: it goes with the norm.
  auto float_cast = [&](const std::string& name) {
    const int c = ix.Producer(name, "Cast");
    const AttributeProto* to = c < 0 ? nullptr : Attr(ix.node(c), "to");
    return to != nullptr && to->i() == TensorProto::FLOAT ? c : -1;
  };
  auto scaled = [&](const std::string& name, std::string* x, float* eps) {
    const int cast = float_cast(name);
    if (cast < 0) return normalized(name, x, eps);
    const std::set<int> before = taken;
    if (!normalized(ix.node(cast).input(0), x, eps) || float_cast(*x) < 0) {
      taken = before;
      return false;
    }
    taken.insert(cast);
    return true;
  };
  std::string x, scale;
  float eps = 0;
  bool ok = false;
  for (int side = 0; side < 2 && !ok; ++side) {
    const Tensor* w = constant(last.input(side));
    if (w != nullptr && w->rank() == 1 && w->numel() > 1 &&
        scaled(last.input(1 - side), &x, &eps)) {
      scale = last.input(side);
      ok = true;
    }
  }
  if (!ok) {
    // A scale Mul reading this one (or its Cast to FLOAT) will match the whole norm there.
    std::string out = last.output(0);
    if (const std::vector<int>& r = ix.Readers(out);
        r.size() == 1 &&
        float_cast(ix.node(r[0]).output_size() > 0 ? ix.node(r[0]).output(0) : "") == r[0])
      out = ix.node(r[0]).output(0);
    const std::vector<int>& readers = ix.Readers(out);
    if (readers.size() == 1 && ix.Is(readers[0], "Mul")) {
      const std::string other = Other(ix.node(readers[0]), out);
      const Tensor* w = other.empty() ? nullptr : constant(other);
      if (w != nullptr && w->rank() == 1 && w->numel() > 1) return std::nullopt;
    }
    taken = {};
    if (!normalized(last.output(0), &x, &eps)) return std::nullopt;
  }
  return MakeFusion(taken, "RMSNormalization", last.name(), {x, scale}, last.output(0),
                    {FloatAttr("epsilon", eps)});
}

// X * cos + Concat(Neg(X[..., h:]), X[..., :h]) * sin (Slices and Concat on the last axis)
// -> RotaryHalf(X, cos, sin), half = h.
std::optional<Fusion> MatchRotary(const GraphIndex& ix, const ConstantFn& constant, int final_add) {
  const NodeProto& add = ix.node(final_add);
  if (add.input_size() != 2) return std::nullopt;
  constexpr int64_t kNoAxis = std::numeric_limits<int64_t>::min();
  auto slice_of = [&](const std::string& name, const std::string& x, int64_t* start, int64_t* end,
                      int64_t* axis) -> int {
    const int s = ix.Producer(name, "Slice");
    if (s < 0 || ix.node(s).input(0) != x || ix.node(s).input_size() < 4) return -1;
    const NodeProto& n = ix.node(s);
    const auto st = ConstInts(constant, n.input(1)), en = ConstInts(constant, n.input(2));
    const auto ax = ConstInts(constant, n.input(3));
    if (!st || !en || st->size() != 1 || en->size() != 1 || !ax || ax->size() != 1) return -1;
    if (*axis == kNoAxis) *axis = (*ax)[0];
    if ((*ax)[0] != *axis) return -1;
    if (n.input_size() > 4 && ConstInts(constant, n.input(4)) != std::vector<int64_t>{1}) return -1;
    *start = (*st)[0];
    *end = (*en)[0];
    return s;
  };
  for (int side = 0; side < 2; ++side) {
    const int plain = ix.Producer(add.input(side), "Mul");
    const int rotated = ix.Producer(add.input(1 - side), "Mul");
    if (plain < 0 || rotated < 0) continue;
    for (int rs = 0; rs < 2; ++rs) {
      const std::string cat_name = ix.node(rotated).input(rs);
      const std::string sin = ix.node(rotated).input(1 - rs);
      const int cat = ix.Producer(cat_name, "Concat");
      if (cat < 0 || ix.node(cat).input_size() != 2) continue;
      const AttributeProto* cat_axis = Attr(ix.node(cat), "axis");
      if (cat_axis == nullptr) continue;
      const int neg = ix.Producer(ix.node(cat).input(0), "Neg");
      if (neg < 0) continue;
      int64_t s0, e0, s1, e1;
      // X is the sliced tensor; the plain Mul must read it too.
      const int second_slice = ix.Producer(ix.node(neg).input(0), "Slice");
      if (second_slice < 0) continue;
      const std::string x = ix.node(second_slice).input(0);
      const std::string cos = Other(ix.node(plain), x);
      if (cos.empty() || cos == x) continue;
      // The slices share one axis and the concat is on it or on -1; the kernel checks that
      // this axis is X's last.
      int64_t axis = kNoAxis;
      const int second = slice_of(ix.node(neg).input(0), x, &s1, &e1, &axis);
      const int first = slice_of(ix.node(cat).input(1), x, &s0, &e0, &axis);
      if (second < 0 || first < 0 || s0 != 0 || e0 <= 0 || s1 != e0 || e1 < 2 * e0) continue;
      if (cat_axis->i() != -1 && cat_axis->i() != axis) continue;
      return MakeFusion({final_add, plain, rotated, cat, neg, second, first}, "RotaryHalf",
                        add.name(), {x, cos, sin}, add.output(0),
                        {IntAttr("half", e0), IntAttr("axis", axis)});
    }
  }
  return std::nullopt;
}

// torch's decomposed GELUs -> Gelu(x): x * (0.5 * (1 + T)) or (x * 0.5) * (1 + T), with T
// tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3))) (approximate "tanh": Gemma, Phi,
// StarCoder2) or erf(x / sqrt(2)) (exact: Falcon).
std::optional<Fusion> MatchGelu(const GraphIndex& ix, const ConstantFn& constant, int mul) {
  const NodeProto& n = ix.node(mul);
  if (n.input_size() != 2) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    std::string x = n.input(side), one_plus, t_out, halved;
    int half = ScalarOp(ix, constant, n.input(1 - side), "Mul", 0.5, &one_plus);
    if (half < 0 && (half = ScalarOp(ix, constant, x, "Mul", 0.5, &halved)) >= 0) {
      x = halved;
      one_plus = n.input(1 - side);
    }
    const int add1 = half < 0 ? -1 : ScalarOp(ix, constant, one_plus, "Add", 1.0, &t_out);
    if (add1 < 0) continue;
    if (const int t = ix.Producer(t_out, "Tanh"); t >= 0) {
      std::string inner, cube_term;
      const int k = ScalarOp(ix, constant, ix.node(t).input(0), "Mul", 0.7978845608028654, &inner);
      const int sum = k < 0 ? -1 : ix.Producer(inner, "Add");
      if (sum < 0) continue;
      const NodeProto& a = ix.node(sum);
      if (a.input(0) != x && a.input(1) != x) continue;
      const int c =
          ScalarOp(ix, constant, a.input(a.input(0) == x ? 1 : 0), "Mul", 0.044715, &cube_term);
      std::string base;
      const int pow = c < 0 ? -1 : ScalarOp(ix, constant, cube_term, "Pow", 3.0, &base);
      if (pow < 0 || base != x || ix.node(pow).input(0) != x) continue;
      return MakeFusion({mul, half, add1, t, k, sum, c, pow}, "Gelu", n.name(), {x}, n.output(0),
                        {StringAttr("approximate", "tanh")});
    }
    if (const int e = ix.Producer(t_out, "Erf"); e >= 0) {
      std::string arg;
      int scale = ScalarOp(ix, constant, ix.node(e).input(0), "Div", 1.4142135623730951, &arg);
      if (scale < 0)
        scale = ScalarOp(ix, constant, ix.node(e).input(0), "Mul", 0.7071067811865476, &arg);
      if (scale < 0 || arg != x) continue;
      return MakeFusion({mul, half, add1, e, scale}, "Gelu", n.name(), {x}, n.output(0),
                        {StringAttr("approximate", "none")});
    }
  }
  return std::nullopt;
}

// Whether node `i` is a com.microsoft MatMulNBits of a dense constant weight the group can
// take: B, scales (and zero points when given) plan constants of the sizes K, N, bits and
// block_size ask for, no g_idx or bias. Writes its attributes (K, N, bits, block_size,
// accuracy_level) and the zero points' type (kUndefined when absent).
bool GroupableNBits(const GraphIndex& ix, const ConstantFn& constant, int i,
                    std::array<int64_t, 5>& attrs, DataType& zp_type) {
  const NodeProto& n = ix.node(i);
  if (n.op_type() != "MatMulNBits" || n.domain() != "com.microsoft" || n.input_size() < 3 ||
      n.input_size() > 4 || n.output_size() != 1)
    return false;
  const char* names[] = {"K", "N", "bits", "block_size", "accuracy_level"};
  for (size_t a = 0; a < attrs.size(); ++a) {
    const AttributeProto* attr = Attr(n, names[a]);
    if (attr == nullptr && a < 4) return false;
    attrs[a] = attr == nullptr ? 0 : attr->i();
  }
  const int64_t k = attrs[0], cols = attrs[1], bits = attrs[2], block = attrs[3];
  if (k <= 0 || cols <= 0 || (bits != 4 && bits != 8) || block < 16 || block > 256 ||
      (block & (block - 1)) != 0)
    return false;
  const int64_t k_blocks = (k + block - 1) / block;
  const Tensor* b = constant(n.input(1));
  const Tensor* scales = constant(n.input(2));
  if (b == nullptr || scales == nullptr || b->dtype() != DataType::kUint8 ||
      b->numel() != cols * k_blocks * block * bits / 8 || scales->numel() != cols * k_blocks)
    return false;
  zp_type = DataType::kUndefined;
  if (n.input_size() == 4 && !n.input(3).empty()) {
    const Tensor* zp = constant(n.input(3));
    if (zp == nullptr) return false;
    zp_type = zp->dtype();
  }
  return true;
}

// Whether `g` and `u` are MatMul(A, B_g) and MatMul(A, B_u) of one A with dense FLOAT (or
// FLOAT16) constants of one shape and type, or MatMulNBits of one A, N and bits whose
// weights GroupableNBits takes: then the products have one shape and type, as SiluMul's
// gate needs.
bool SameShapeProducts(const GraphIndex& ix, const ConstantFn& constant, const std::string& g,
                       const std::string& u) {
  const int ng = ix.AnyProducer(g), nu = ix.AnyProducer(u);
  std::array<int64_t, 5> ag{}, au{};
  DataType zg = DataType::kUndefined, zu = DataType::kUndefined;
  if (ng >= 0 && nu >= 0 && GroupableNBits(ix, constant, ng, ag, zg) &&
      GroupableNBits(ix, constant, nu, au, zu))
    return ix.node(ng).input(0) == ix.node(nu).input(0) && ag == au;
  const int pg = ix.Producer(g, "MatMul"), pu = ix.Producer(u, "MatMul");
  if (pg < 0 || pu < 0 || ix.node(pg).input(0) != ix.node(pu).input(0)) return false;
  const Tensor* bg = constant(ix.node(pg).input(1));
  const Tensor* bu = constant(ix.node(pu).input(1));
  return bg != nullptr && bu != nullptr &&
         (bg->dtype() == DataType::kFloat || bg->dtype() == DataType::kFloat16) &&
         bu->dtype() == bg->dtype() && bg->rank() == 2 && bg->shape() == bu->shape();
}

// Mul(G, Sigmoid(G)) -> SiluMul(G); with a gate Mul(that, U) as its only reader, U a
// product of G's shape (SameShapeProducts) -> SiluMul(G, U), the Llama MLP's gating.
std::optional<Fusion> MatchSilu(const GraphIndex& ix, const ConstantFn& constant, int mul) {
  const NodeProto& n = ix.node(mul);
  if (n.input_size() != 2) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int sig = ix.Producer(n.input(side), "Sigmoid");
    if (sig < 0 || ix.node(sig).input(0) != n.input(1 - side)) continue;
    const std::string& g = n.input(1 - side);
    const std::vector<int>& readers = ix.Readers(n.output(0));
    if (readers.size() == 1 && ix.Is(readers[0], "Mul")) {
      const NodeProto& gate = ix.node(readers[0]);
      const std::string& u = gate.input(gate.input(0) == n.output(0) ? 1 : 0);
      if (u != n.output(0) && SameShapeProducts(ix, constant, g, u))
        return MakeFusion({readers[0], mul, sig}, "SiluMul", gate.name(), {g, u}, gate.output(0),
                          {});
    }
    return MakeFusion({mul, sig}, "SiluMul", n.name(), {g}, n.output(0), {});
  }
  return std::nullopt;
}

// MatMul(A, B_i) for every MatMul reading A as its first input with a dense FLOAT (or, all
// of them, FLOAT16) rank-2 constant B_i of the same K (at least two) -> MatMulGroup(A, B_1 ..,
// B_n).
std::optional<Fusion> MatchMatMulGroup(const GraphIndex& ix, const ConstantFn& constant,
                                       const std::string& a) {
  Fusion f;
  NodeProto& n = f.node;
  n.add_input(a);
  int64_t k = -1;
  DataType dt = DataType::kFloat;
  for (int reader : ix.Readers(a)) {
    const NodeProto& mm = ix.node(reader);
    if (!ix.Is(reader, "MatMul") || mm.input_size() != 2 || mm.input(0) != a || mm.input(1) == a)
      continue;
    const Tensor* b = constant(mm.input(1));
    if (b == nullptr || (b->dtype() != DataType::kFloat && b->dtype() != DataType::kFloat16) ||
        b->rank() != 2 || !b->contiguous() || (k >= 0 && (b->dim(0) != k || b->dtype() != dt)))
      continue;
    k = b->dim(0);
    dt = b->dtype();
    f.removed.push_back(reader);
    n.add_input(mm.input(1));
    n.add_output(mm.output(0));
  }
  if (f.removed.size() < 2) return std::nullopt;
  n.set_op_type("MatMulGroup");
  n.set_domain("ai.onnx_light.fused");
  const NodeProto& first = ix.node(f.removed[0]);
  n.set_name((first.name().empty() ? first.output(0) : first.name()) + "/matmul_group");
  f.run_at_first = true;
  return f;
}

// MatMulNBits(A, B_i, scales_i[, zero_points_i]) for every such node reading A as its first
// input with the same K, bits, block_size, accuracy_level and zero-point type (at least two)
// -> MatMulNBitsGroup(A, B_1, scales_1, zero_points_1 or "", ...).
std::optional<Fusion> MatchMatMulNBitsGroup(const GraphIndex& ix, const ConstantFn& constant,
                                            const std::string& a) {
  Fusion f;
  NodeProto& n = f.node;
  n.add_input(a);
  std::optional<std::array<int64_t, 5>> shared;
  DataType shared_zp = DataType::kUndefined;
  AttributeProto widths;
  widths.set_name("N");
  widths.set_type(AttributeProto::INTS);
  for (int reader : ix.Readers(a)) {
    std::array<int64_t, 5> attrs{};
    DataType zp = DataType::kUndefined;
    const NodeProto& mm = ix.node(reader);
    // (A node reading A twice is listed twice; one reading it beyond input 0 is no product
    // of A by constants.)
    if (!GroupableNBits(ix, constant, reader, attrs, zp) || mm.input(0) != a ||
        std::count(mm.input().begin(), mm.input().end(), a) != 1 ||
        std::count(f.removed.begin(), f.removed.end(), reader) != 0)
      continue;
    if (shared && (attrs[0] != (*shared)[0] || attrs[2] != (*shared)[2] ||
                   attrs[3] != (*shared)[3] || attrs[4] != (*shared)[4] || zp != shared_zp))
      continue;
    shared = attrs;
    shared_zp = zp;
    f.removed.push_back(reader);
    n.add_input(mm.input(1));
    n.add_input(mm.input(2));
    n.add_input(mm.input_size() == 4 ? mm.input(3) : "");
    n.add_output(mm.output(0));
    widths.add_ints(attrs[1]);
  }
  if (f.removed.size() < 2) return std::nullopt;
  n.set_op_type("MatMulNBitsGroup");
  n.set_domain("ai.onnx_light.fused");
  const NodeProto& first = ix.node(f.removed[0]);
  n.set_name((first.name().empty() ? first.output(0) : first.name()) + "/matmul_nbits_group");
  *n.add_attribute() = IntAttr("K", (*shared)[0]);
  *n.add_attribute() = IntAttr("bits", (*shared)[2]);
  *n.add_attribute() = IntAttr("block_size", (*shared)[3]);
  *n.add_attribute() = IntAttr("accuracy_level", (*shared)[4]);
  *n.add_attribute() = widths;
  f.run_at_first = true;
  return f;
}

// Mul(Cast(MatMulInteger(A, W, a_zero, w_zero), FLOAT), Mul(a_scale, w_scale)) (either
// operand order in both Muls) with A, a_scale and a_zero (when given) outputs of one
// DynamicQuantizeLinear, W a constant [K, N] INT8/UINT8, w_zero absent or a constant of W's
// type (one value or [N]) and w_scale a constant FLOAT of one value or [N] (rank <= 1, so the
// product keeps MatMulInteger's shape) -> MatMulIntegerToFloat(A, W, a_scale, w_scale, a_zero,
// w_zero): what onnxruntime's quantize_dynamic writes for every product.
std::optional<Fusion> MatchMatMulIntegerToFloat(const GraphIndex& ix, const ConstantFn& constant,
                                                int mul) {
  const NodeProto& n = ix.node(mul);
  if (n.input_size() != 2) return std::nullopt;
  auto per_column = [](const Tensor* t, int64_t cols) {
    return t != nullptr && t->rank() <= 1 && (t->numel() == 1 || t->numel() == cols);
  };
  for (int side = 0; side < 2; ++side) {
    const int cast = ix.Producer(n.input(side), "Cast");
    const int scale_mul = ix.Producer(n.input(1 - side), "Mul");
    if (cast < 0 || scale_mul < 0) continue;
    const AttributeProto* to = Attr(ix.node(cast), "to");
    if (to == nullptr || to->i() != static_cast<int64_t>(DataType::kFloat)) continue;
    const int mi = ix.Producer(ix.node(cast).input(0), "MatMulInteger");
    if (mi < 0 || ix.node(mi).input_size() < 2 || ix.node(mi).input_size() > 4) continue;
    const NodeProto& m = ix.node(mi);
    const Tensor* w = constant(m.input(1));
    if (w == nullptr || w->rank() != 2 ||
        (w->dtype() != DataType::kInt8 && w->dtype() != DataType::kUint8))
      continue;
    const std::string a_zero = m.input_size() > 2 ? m.input(2) : "";
    const std::string w_zero = m.input_size() > 3 ? m.input(3) : "";
    if (!w_zero.empty() &&
        (!per_column(constant(w_zero), w->dim(1)) || constant(w_zero)->dtype() != w->dtype()))
      continue;
    const NodeProto& sm = ix.node(scale_mul);
    for (int s = 0; s < 2; ++s) {
      const Tensor* w_scale = constant(sm.input(s));
      if (!per_column(w_scale, w->dim(1)) || w_scale->dtype() != DataType::kFloat) continue;
      const std::string& a_scale = sm.input(1 - s);
      const int dq = ix.Producer(a_scale, "DynamicQuantizeLinear");
      if (dq < 0 || ix.node(dq).output_size() < 3) continue;
      const NodeProto& d = ix.node(dq);
      if (d.output(1) != a_scale || d.output(0) != m.input(0) ||
          (!a_zero.empty() && d.output(2) != a_zero))
        continue;
      return MakeFusion({mi, cast, scale_mul, mul}, "MatMulIntegerToFloat", n.name(),
                        {m.input(0), m.input(1), a_scale, sm.input(s), a_zero, w_zero}, n.output(0),
                        {});
    }
  }
  return std::nullopt;
}

// MatMul(A, DequantizeLinear(W, scale, zp)) with a packable constant W -> DequantizeMatMul.
std::optional<Fusion> MatchDequantizeMatMul(const GraphIndex& ix, const ConstantFn& constant,
                                            int matmul) {
  const NodeProto& mm = ix.node(matmul);
  if (mm.input_size() != 2) return std::nullopt;
  const int d = ix.Producer(mm.input(1), "DequantizeLinear");
  if (d < 0) return std::nullopt;
  const NodeProto& dq = ix.node(d);
  const Tensor* zp = dq.input_size() > 2 && !dq.input(2).empty() ? constant(dq.input(2)) : nullptr;
  if (dq.input_size() > 2 && !dq.input(2).empty() && zp == nullptr) return std::nullopt;
  if (!PackableDequantize(dq, constant(dq.input(0)), constant(dq.input(1)), zp))
    return std::nullopt;
  Fusion f;
  f.removed = {d, matmul};
  NodeProto& n = f.node;
  n.set_op_type("DequantizeMatMul");
  n.set_domain("ai.onnx_light.fused");
  n.set_name((mm.name().empty() ? mm.output(0) : mm.name()) + "/dequantize_matmul");
  n.add_input(mm.input(0));
  for (const auto& in : dq.input()) n.add_input(in);
  n.add_output(mm.output(0));
  const AttributeProto* block = Attr(dq, "block_size");
  AttributeProto* b = n.add_attribute();
  if (block != nullptr && block->i() != 0) {
    *b = *block;
  } else {  // per-tensor or per-column scales, repeated over blocks of this many rows
    b->set_name("block_size");
    b->set_type(AttributeProto::INT);
    b->set_i(kWholeColumnBlock);
  }
  return f;
}

// Every value a fusion removes is read only inside it and is not a graph output.
bool Private(const GraphIndex& ix, const Fusion& f,
             const std::function<bool(const std::string&)>& graph_output) {
  const std::set<int> removed(f.removed.begin(), f.removed.end());
  const std::set<std::string> kept(f.node.output().begin(), f.node.output().end());
  auto rewired = [&](int reader, const std::string& value) {
    return std::any_of(f.rewired.begin(), f.rewired.end(), [&](const Rewire& r) {
      return r.node == reader && ix.node(reader).input(r.input) == value;
    });
  };
  for (int i : f.removed)
    for (const auto& o : ix.node(i).output()) {
      if (o.empty() || kept.count(o)) continue;
      if (graph_output(o)) return false;
      for (int reader : ix.Readers(o))
        if (!removed.count(reader) && !rewired(reader, o)) return false;
    }
  // The substitute reads nothing the subgraph computed.
  for (const auto& in : f.node.input())
    for (int i : f.removed)
      for (const auto& o : ix.node(i).output())
        if (!in.empty() && in == o) return false;
  return true;
}

}  // namespace

bool PackableDequantize(const NodeProto& dq, const Tensor* x, const Tensor* scale,
                        const Tensor* zero_point) {
  if (dq.op_type() != "DequantizeLinear" || !(dq.domain().empty() || dq.domain() == "ai.onnx") ||
      x == nullptr || scale == nullptr || x->rank() != 2 || scale->dtype() != DataType::kFloat)
    return false;
  const DataType t = x->dtype();
  if (t != DataType::kInt4 && t != DataType::kUint4 && t != DataType::kInt8 &&
      t != DataType::kUint8)
    return false;
  const AttributeProto* out = Attr(dq, "output_dtype");
  if (out != nullptr && out->i() != 0 && out->i() != static_cast<int64_t>(DataType::kFloat))
    return false;
  if (zero_point != nullptr && (zero_point->dtype() != t || zero_point->shape() != scale->shape()))
    return false;
  const AttributeProto* axis_attr = Attr(dq, "axis");
  const AttributeProto* block = Attr(dq, "block_size");
  const int64_t axis = axis_attr == nullptr ? 1 : axis_attr->i();  // DequantizeLinear's default
  const int64_t k = x->dim(0), n = x->dim(1);
  if (block == nullptr || block->i() == 0) {
    // Per-tensor (one scale) or per output column (axis 1, scale [N]): DequantizeMatMul
    // repeats the scale over blocks of kWholeColumnBlock rows.
    if (scale->numel() == 1 && scale->rank() <= 1) return true;
    return (axis == 1 || axis == -1) && scale->rank() == 1 && scale->dim(0) == n;
  }
  if ((axis != 0 && axis != -2) || scale->rank() != 2 || block->i() < 16 || block->i() > 256 ||
      (block->i() & (block->i() - 1)) != 0)
    return false;
  const int64_t blocks = (k + block->i() - 1) / block->i();
  return scale->dim(0) == blocks && scale->dim(1) == n;
}

std::vector<Fusion> FindFusions(const GraphProto& graph, const std::vector<bool>& alive,
                                const ConstantFn& constant,
                                const std::function<bool(const std::string&)>& graph_output) {
  const GraphIndex ix(graph, alive);
  std::vector<Fusion> out;
  std::set<int> used;
  auto keep = [&](std::optional<Fusion> f) {
    if (!f || !Private(ix, *f, graph_output)) return;
    if (std::any_of(f->removed.begin(), f->removed.end(), [&](int n) { return used.count(n); }))
      return;
    used.insert(f->removed.begin(), f->removed.end());
    out.push_back(std::move(*f));
  };
  for (int i = 0; i < graph.node_size(); ++i) {
    if (!alive[static_cast<size_t>(i)] || graph.node(i).output_size() == 0) continue;
    const std::string& y = graph.node(i).output(0);
    if (ix.Producer(y, "MatMul") == i) {
      if (auto f = MatchDequantizeMatMul(ix, constant, i)) {
        keep(std::move(f));
      } else {
        AttentionMatch match(ix, constant);
        keep(match.Run(i));
      }
    } else if (ix.Producer(y, "Mul") == i) {
      if (auto q = MatchMatMulIntegerToFloat(ix, constant, i))
        keep(std::move(q));
      else if (auto f = MatchRmsNorm(ix, constant, i))
        keep(std::move(f));
      else if (auto g = MatchGelu(ix, constant, i))
        keep(std::move(g));
      else
        keep(MatchSilu(ix, constant, i));
    } else if (ix.Producer(y, "Add") == i) {
      keep(MatchRotary(ix, constant, i));
    }
  }
  // Groups last: a MatMul that is part of a matched attention stays there.
  std::set<std::string> grouped, grouped_nbits;
  for (int i = 0; i < graph.node_size(); ++i) {
    if (!alive[static_cast<size_t>(i)] || graph.node(i).output_size() == 0) continue;
    const NodeProto& n = graph.node(i);
    if (used.count(i) || n.input_size() == 0) continue;
    if (n.op_type() == "MatMulNBits" && n.domain() == "com.microsoft") {
      if (grouped_nbits.insert(n.input(0)).second)
        keep(MatchMatMulNBitsGroup(ix, constant, n.input(0)));
      continue;
    }
    if (ix.Producer(n.output(0), "MatMul") != i || n.input_size() != 2) continue;
    if (grouped.insert(n.input(0)).second) keep(MatchMatMulGroup(ix, constant, n.input(0)));
  }
  return out;
}

}  // namespace onnx_light::core::runtime
