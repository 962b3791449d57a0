#include "ops/elementwise/cast_util.h"

#include <cstring>

#include "onnx_light.pb.h"
#include "ops/elementwise/float8.h"
#include "ops/elementwise/parallel.h"

namespace onnx_light::ops::elementwise {

std::vector<double> ToDoubles(const KernelCall& call, const Tensor& t, const char* what) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  DispatchType<kNumericAndBool>(
      call, t.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* p = t.data<T>();
        for (int64_t i = 0; i < t.numel(); ++i)
          out[static_cast<size_t>(i)] = static_cast<double>(Load(p[i]));
      },
      what);
  return out;
}

}  // namespace onnx_light::ops::elementwise

namespace onnx_light::ops::elementwise {

namespace {

constexpr TypeSet kPackedInts =
    Bit(DataType::kInt4) | Bit(DataType::kUint4) | Bit(DataType::kInt2) | Bit(DataType::kUint2);

// Loads element i of `in` as compute type of S (packed types: int32).
template <typename S, typename D>
void CastLoop(const Tensor& in, DataType from, DataType to, Tensor& out) {
  const int64_t n = in.numel();
  using DC = Compute<D>;
  if constexpr (std::is_same_v<S, int32_t> && std::is_same_v<D, int32_t>) {
    // Packed -> packed (both int32 compute).
    if (IsPacked(from) && IsPacked(to)) {
      void* dst = out.mutable_raw_data();
      for (int64_t i = 0; i < n; ++i)
        core::PackedSet(to, dst, i, core::PackedGet(from, in.raw_data(), i));
      return;
    }
  }
  if (IsPacked(to)) {
    void* dst = out.mutable_raw_data();
    std::memset(dst, 0, out.nbytes());
    for (int64_t i = 0; i < n; ++i) {
      const auto v = IsPacked(from)
                         ? static_cast<Compute<S>>(core::PackedGet(from, in.raw_data(), i))
                         : Load(in.data<S>()[i]);
      core::PackedSet(to, dst, i, ConvertValue<int32_t>(v));
    }
    return;
  }
  D* dst = out.mutable_data<D>();
  if (IsPacked(from)) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = Store<D>(ConvertValue<DC>(core::PackedGet(from, in.raw_data(), i)));
    return;
  }
  const S* src = in.data<S>();
  ParallelFor(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = Store<D>(ConvertValue<DC>(Load(src[i])));
  });
}

// Dispatch that maps the packed integer types onto int32 (their compute type).
template <typename F>
void DispatchCastType(const KernelCall& call, DataType t, F&& f, const char* what) {
  if (InSet(kPackedInts, t)) {
    f(TypeTag<int32_t>{});
    return;
  }
  if (t == DataType::kString)
    core::Throw(core::ErrorCode::kNotImplemented,
                core::runtime::NodeLabel(call.node()) +
                    ": casting between STRING and numbers is not supported");
  DispatchType<kNumericAndBool>(call, t, f, what);
}

// Float8 on either side goes through a temporary FLOAT tensor.
void CastFloat8(KernelCall& call, const Tensor& in, DataType to, bool saturate) {
  const DataType from = in.dtype();
  const int64_t n = in.numel();
  Tensor floats("", DataType::kFloat, in.shape(), call.allocator());
  float* f = floats.mutable_data<float>();
  if (IsFloat8(from)) {
    const uint8_t* src = in.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) f[i] = Float8ToFloat(from, src[i]);
  } else {
    DispatchCastType(
        call, from,
        [&](auto stag) {
          CastLoop<typename decltype(stag)::type, float>(in, from, DataType::kFloat, floats);
        },
        "input");
  }
  if (IsFloat8(to)) {
    uint8_t* dst = call.AllocateOutput(0, to, in.shape()).mutable_data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) dst[i] = FloatToFloat8(to, f[i], saturate);
    return;
  }
  DispatchCastType(
      call, to,
      [&](auto dtag) {
        using D = typename decltype(dtag)::type;
        Tensor& out = call.AllocateOutput(0, to, in.shape());
        CastLoop<float, D>(floats, DataType::kFloat, to, out);
      },
      "target");
}

}  // namespace

void CastToOutput(KernelCall& call, const Tensor& in, DataType to, bool saturate) {
  const DataType from = in.dtype();
  if (from == to) {
    call.SetOutput(0, in.BorrowView());
    return;
  }
  if (IsFloat8(from) || IsFloat8(to)) {
    CastFloat8(call, in, to, saturate);
    return;
  }
  DispatchCastType(
      call, from,
      [&](auto stag) {
        using S = typename decltype(stag)::type;
        DispatchCastType(
            call, to,
            [&](auto dtag) {
              using D = typename decltype(dtag)::type;
              const Tensor& src = in;
              Tensor& out = call.AllocateOutput(0, to, src.shape());
              CastLoop<S, D>(src, from, to, out);
            },
            "target");
      },
      "input");
}

}  // namespace onnx_light::ops::elementwise
