#include "ops/math/reduce.h"

#include <cmath>
#include <limits>

#include "executor/attributes.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops::math {

namespace {

// The input viewed as runs of dimensions that are all reduced or all kept.
struct Runs {
  std::vector<int64_t> size;
  std::vector<bool> reduced;
  int64_t count = 1;  // elements folded into each output
};

template <typename A, ReduceKind K>
struct Acc {
  static A Init() {
    if constexpr (K == ReduceKind::kMax) {
      if constexpr (std::numeric_limits<A>::has_infinity)
        return -std::numeric_limits<A>::infinity();
      else
        return std::numeric_limits<A>::lowest();
    } else {
      return A(0);
    }
  }
  static void Add(A& a, A x) {
    if constexpr (K == ReduceKind::kMax) {
      if constexpr (std::numeric_limits<A>::has_quiet_NaN) {
        if (std::isnan(a)) return;
        if (!(x <= a)) a = x;  // takes NaN
      } else {
        if (x > a) a = x;
      }
    } else {
      a += x;
    }
  }
};

// T: element type read and written (float for the 16-bit types); A: accumulator.
template <typename T, typename A, ReduceKind K>
void ReduceTyped(const T* x, T* y, int64_t out_n, const Runs& runs) {
  using Op = Acc<A, K>;
  std::vector<A> acc(static_cast<size_t>(out_n), Op::Init());
  const size_t nr = runs.size.size();
  const int64_t inner = nr ? runs.size.back() : 1;
  const bool inner_reduced = nr ? runs.reduced.back() : false;
  if (nr == 2 && !runs.reduced[0] && inner_reduced) {
    // [kept, reduced]: independent contiguous rows.
    ParallelFor(out_n, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                [&](int64_t r0, int64_t r1) {
                  for (int64_t r = r0; r < r1; ++r) {
                    A a = Op::Init();
                    const T* row = x + r * inner;
                    for (int64_t i = 0; i < inner; ++i) Op::Add(a, static_cast<A>(row[i]));
                    acc[static_cast<size_t>(r)] = a;
                  }
                });
  } else if (nr > 0) {
    // Odometer over the outer runs; the innermost run is a contiguous loop.
    std::vector<int64_t> out_stride(nr, 0);
    int64_t s = inner_reduced ? 1 : inner;
    for (size_t d = nr - 1; d-- > 0;) {
      if (!runs.reduced[d]) {
        out_stride[d] = s;
        s *= runs.size[d];
      }
    }
    int64_t outer = 1;
    for (size_t d = 0; d + 1 < nr; ++d) outer *= runs.size[d];
    std::vector<int64_t> counter(nr, 0);
    int64_t out_off = 0;
    for (int64_t o = 0; o < outer; ++o) {
      const T* run = x + o * inner;
      if (inner_reduced) {
        A& a = acc[static_cast<size_t>(out_off)];
        for (int64_t i = 0; i < inner; ++i) Op::Add(a, static_cast<A>(run[i]));
      } else {
        A* a = acc.data() + out_off;
        for (int64_t i = 0; i < inner; ++i) Op::Add(a[i], static_cast<A>(run[i]));
      }
      for (size_t d = nr - 1; d-- > 0;) {
        if (++counter[d] < runs.size[d]) {
          out_off += out_stride[d];
          break;
        }
        out_off -= out_stride[d] * (counter[d] - 1);
        counter[d] = 0;
      }
    }
  } else {
    acc[0] = Op::Init();
    if (runs.count > 0) Op::Add(acc[0], static_cast<A>(x[0]));
  }
  for (int64_t i = 0; i < out_n; ++i) {
    A v = acc[static_cast<size_t>(i)];
    if constexpr (K == ReduceKind::kMean) {
      if constexpr (std::is_floating_point_v<A>) {
        v = v / static_cast<A>(runs.count);
      } else {
        v = runs.count ? static_cast<A>(static_cast<double>(v) / static_cast<double>(runs.count))
                       : A(0);
      }
    }
    y[i] = static_cast<T>(v);
  }
}

template <typename T, typename A>
void Dispatch(ReduceKind kind, const T* x, T* y, int64_t out_n, const Runs& runs) {
  switch (kind) {
    case ReduceKind::kSum:
      return ReduceTyped<T, A, ReduceKind::kSum>(x, y, out_n, runs);
    case ReduceKind::kMean:
      return ReduceTyped<T, A, ReduceKind::kMean>(x, y, out_n, runs);
    case ReduceKind::kMax:
      return ReduceTyped<T, T, ReduceKind::kMax>(x, y, out_n, runs);
  }
}

}  // namespace

ReduceAttrs ParseReduceAttrs(const NodeProto& node) {
  ReduceAttrs a;
  a.keepdims = core::runtime::AttrInt(node, "keepdims", 1) != 0;
  a.noop_with_empty_axes = core::runtime::AttrInt(node, "noop_with_empty_axes", 0) != 0;
  a.axes = core::runtime::OptionalAttrInts(node, "axes");
  return a;
}

void ReduceCompute(KernelCall& call, const ReduceAttrs& attrs, ReduceKind kind) {
  const Tensor& x = call.input(0);
  std::vector<int64_t> axes;
  if (call.has_input(1)) {
    axes = IntValues(call.node(), call.input(1), "input 'axes'");
  } else if (attrs.axes) {
    axes = *attrs.axes;
  }
  if (axes.empty() && attrs.noop_with_empty_axes) {
    call.SetOutputValue(0, call.input_value(0).BorrowView());
    return;
  }
  const int64_t rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    const int64_t n = NormalizeAxis(call.node(), a, rank, "reduction axis");
    if (reduced[static_cast<size_t>(n)])
      ThrowBadInput(call.node(), "reduction axis " + std::to_string(a) + " is repeated");
    reduced[static_cast<size_t>(n)] = true;
  }
  Shape out_shape;
  Runs runs;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = x.shape()[d];
    const bool r = reduced[static_cast<size_t>(d)];
    if (r) {
      runs.count *= size;
      if (attrs.keepdims) out_shape.push_back(1);
    } else {
      out_shape.push_back(size);
    }
    if (size == 1) continue;  // size-1 dims do not change the layout
    if (!runs.size.empty() && runs.reduced.back() == r) {
      runs.size.back() *= size;
    } else {
      runs.size.push_back(size);
      runs.reduced.push_back(r);
    }
  }
  const DataType dt = x.dtype();
  Tensor& y = call.AllocateOutput(0, dt, out_shape);
  const int64_t out_n = y.numel();
  if (out_n == 0) return;
  if (x.numel() == 0) runs.size.assign(1, 0), runs.reduced.assign(1, true);
  switch (dt) {
    case DataType::kFloat:
      return Dispatch<float, double>(kind, x.data<float>(), y.mutable_data<float>(), out_n, runs);
    case DataType::kDouble:
      return Dispatch<double, double>(kind, x.data<double>(), y.mutable_data<double>(), out_n,
                                      runs);
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const FloatView xv(x);
      FloatSink yv(y);
      Dispatch<float, double>(kind, xv.data(), yv.data(), out_n, runs);
      return yv.Finish();
    }
    case DataType::kInt32:
      return Dispatch<int32_t, int64_t>(kind, x.data<int32_t>(), y.mutable_data<int32_t>(), out_n,
                                        runs);
    case DataType::kInt64:
      return Dispatch<int64_t, int64_t>(kind, x.data<int64_t>(), y.mutable_data<int64_t>(), out_n,
                                        runs);
    case DataType::kUint32:
      return Dispatch<uint32_t, uint64_t>(kind, x.data<uint32_t>(), y.mutable_data<uint32_t>(),
                                          out_n, runs);
    case DataType::kUint64:
      return Dispatch<uint64_t, uint64_t>(kind, x.data<uint64_t>(), y.mutable_data<uint64_t>(),
                                          out_n, runs);
    case DataType::kInt8:
      if (kind == ReduceKind::kMax)
        return Dispatch<int8_t, int64_t>(kind, x.data<int8_t>(), y.mutable_data<int8_t>(), out_n,
                                         runs);
      break;
    case DataType::kUint8:
      if (kind == ReduceKind::kMax)
        return Dispatch<uint8_t, uint64_t>(kind, x.data<uint8_t>(), y.mutable_data<uint8_t>(),
                                           out_n, runs);
      break;
    default:
      break;
  }
  ThrowUnsupportedType(call.node(), "input 'data'", dt);
}

}  // namespace onnx_light::ops::math
