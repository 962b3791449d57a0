// Elementwise loops over broadcast inputs and the kernel templates built on them. Functors
// take and return compute-type values (float for FLOAT16/BFLOAT16); loads and stores convert.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "ops/elementwise/broadcast.h"
#include "ops/elementwise/parallel.h"
#include "ops/elementwise/types.h"
#include "ops/math/half_convert.h"

namespace onnx_light::ops::elementwise {

// FLOAT16 operands and results are converted a block at a time (math::HalvesToFloats), not
// one call per element.
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16>;
constexpr int64_t kHalfBlock = 256;

// v[0, n) = the compute-type values of p[0, n) (strided) or of *p repeated.
template <typename T>
void LoadBlock(const T* p, bool strided, int64_t n, Compute<T>* v) {
  if (!strided) {
    std::fill(v, v + n, Load(*p));
  } else if constexpr (kIsHalf<T>) {
    math::HalvesToFloats(reinterpret_cast<const uint16_t*>(p), v, n);
  } else {
    for (int64_t j = 0; j < n; ++j) v[j] = Load(p[j]);
  }
}

// o[0, n) = v[0, n) stored as O.
template <typename O, typename R>
void StoreBlock(const R* v, int64_t n, O* o) {
  if constexpr (kIsHalf<O> && std::is_same_v<R, float>) {
    math::FloatsToHalves(v, reinterpret_cast<uint16_t*>(o), n);
  } else {
    for (int64_t j = 0; j < n; ++j) o[j] = Store<O>(v[j]);
  }
}

// One segment of BinaryLoop with a FLOAT16 operand or result, block by block.
template <typename A, typename B, typename O, typename F>
void BinarySegmentInBlocks(const A* pa, bool sa, const B* pb, bool sb, O* po, int64_t n,
                           const F& f) {
  using R = std::invoke_result_t<const F&, Compute<A>, Compute<B>>;
  Compute<A> va[kHalfBlock];
  Compute<B> vb[kHalfBlock];
  R vr[kHalfBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kHalfBlock) {
    const int64_t m = std::min(kHalfBlock, n - j0);
    LoadBlock(sa ? pa + j0 : pa, sa, m, va);
    LoadBlock(sb ? pb + j0 : pb, sb, m, vb);
    for (int64_t j = 0; j < m; ++j) vr[j] = f(va[j], vb[j]);
    StoreBlock(vr, m, po + j0);
  }
}

// o[i] = f(a[i], b[i]) over a broadcast plan of two inputs.
template <typename A, typename B, typename O, typename F>
void BinaryLoop(const BroadcastPlan& plan, const A* a, const B* b, O* o, const F& f) {
  const bool sa = plan.inner_stride(0) != 0;
  const bool sb = plan.inner_stride(1) != 0;
  ParallelFor(plan.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
    plan.ForEachSegment(begin, end, [&](int64_t oi, const int64_t* off, int64_t n) {
      const A* pa = a + off[0];
      const B* pb = b + off[1];
      O* po = o + oi;
      if constexpr (kIsHalf<A> || kIsHalf<B> || kIsHalf<O>) {
        BinarySegmentInBlocks(pa, sa, pb, sb, po, n, f);
      } else if (sa && sb) {
        for (int64_t j = 0; j < n; ++j) po[j] = Store<O>(f(Load(pa[j]), Load(pb[j])));
      } else if (sa) {
        const auto vb = Load(*pb);
        for (int64_t j = 0; j < n; ++j) po[j] = Store<O>(f(Load(pa[j]), vb));
      } else if (sb) {
        const auto va = Load(*pa);
        for (int64_t j = 0; j < n; ++j) po[j] = Store<O>(f(va, Load(pb[j])));
      } else {
        const O v = Store<O>(f(Load(*pa), Load(*pb)));
        for (int64_t j = 0; j < n; ++j) po[j] = v;
      }
    });
  });
}

// Broadcasts `a` and `b` into a new tensor of `out_dtype` from the call's allocator.
template <typename A, typename B, typename O, typename F>
Tensor ComputeBinary(KernelCall& call, const Tensor& a, const Tensor& b, DataType out_dtype,
                     const F& f) {
  const Shape shapes[] = {a.shape(), b.shape()};
  const Shape out_shape = BroadcastShapes(call, shapes);
  const BroadcastPlan plan(shapes, out_shape);
  Tensor out("", out_dtype, out_shape, call.allocator());
  BinaryLoop(plan, a.data<A>(), b.data<B>(), out.mutable_data<O>(), f);
  return out;
}

// Broadcasts inputs `a` and `b` into output 0 of type `out_dtype`.
template <typename A, typename B, typename O, typename F>
void RunBinary(KernelCall& call, const Tensor& a, const Tensor& b, DataType out_dtype, const F& f) {
  call.SetOutput(0, ComputeBinary<A, B, O>(call, a, b, out_dtype, f));
}

// o[i] = f(a[i]) for a contiguous tensor.
template <typename A, typename O, typename F>
void UnaryLoop(int64_t n, const A* a, O* o, const F& f) {
  ParallelFor(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    if constexpr (kIsHalf<A> || kIsHalf<O>) {
      using R = std::invoke_result_t<const F&, Compute<A>>;
      Compute<A> va[kHalfBlock];
      R vr[kHalfBlock];
      for (int64_t i0 = begin; i0 < end; i0 += kHalfBlock) {
        const int64_t m = std::min(kHalfBlock, end - i0);
        LoadBlock(a + i0, true, m, va);
        for (int64_t j = 0; j < m; ++j) vr[j] = f(va[j]);
        StoreBlock(vr, m, o + i0);
      }
    } else {
      for (int64_t i = begin; i < end; ++i) o[i] = Store<O>(f(Load(a[i])));
    }
  });
}

// Requires both inputs to have the same dtype (T in the schema), else fails naming them.
void CheckSameType(const KernelCall& call, const Tensor& a, const Tensor& b);

// The kernel for a binary op whose output type equals its input type.
template <typename Op, TypeSet kAllowed>
class SameTypeBinary : public core::runtime::KernelBase {
 public:
  explicit SameTypeBinary(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override {
    const Tensor& a = call.input(0);
    const Tensor& b = call.input(1);
    CheckSameType(call, a, b);
    DispatchType<kAllowed>(call, a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Op::template Check<T>(call, b);
      RunBinary<T, T, T>(call, a, b, a.dtype(), Op{});
    });
  }
};

// The kernel for a comparison: inputs of one type, BOOL output.
template <typename Op, TypeSet kAllowed>
class CompareBinary : public core::runtime::KernelBase {
 public:
  explicit CompareBinary(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override {
    const Tensor& a = call.input(0);
    const Tensor& b = call.input(1);
    CheckSameType(call, a, b);
    DispatchType<kAllowed>(call, a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      RunBinary<T, T, bool>(call, a, b, DataType::kBool, Op{});
    });
  }
};

// The kernel for a unary op; Op::kBoolOutput selects a BOOL output (IsNaN, IsInf).
template <typename Op, TypeSet kAllowed>
class UnaryKernel : public core::runtime::KernelBase {
 public:
  explicit UnaryKernel(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    DispatchType<kAllowed>(call, x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      if constexpr (Op::kBoolOutput) {
        Tensor& y = call.AllocateOutput(0, DataType::kBool, x.shape());
        UnaryLoop(x.numel(), px, y.mutable_data<bool>(), op_);
      } else {
        Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
        UnaryLoop(x.numel(), px, y.mutable_data<T>(), op_);
      }
    });
  }

 protected:
  Op op_;
};

// Arithmetic that wraps on signed overflow (as numpy does) instead of being undefined.
template <typename T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}
template <typename T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return static_cast<T>(a - b);
  }
}
template <typename T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    // Promote narrow unsigned types to unsigned int so the product cannot overflow int.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)));
  } else if constexpr (std::is_integral_v<T> && sizeof(T) < sizeof(unsigned)) {
    return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
  } else {
    return static_cast<T>(a * b);
  }
}

// Default (no-op) per-type check for SameTypeBinary ops.
struct NoCheck {
  template <typename T>
  static void Check(const KernelCall&, const Tensor&) {}
};

}  // namespace onnx_light::ops::elementwise
