// Where: out = condition ? X : Y with three-way numpy broadcasting, for every dtype of a
// whole byte width (and STRING).
#include "ops/elementwise/broadcast.h"
#include "ops/elementwise/parallel.h"
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::Shape;
using core::runtime::Tensor;

class Where final : public core::runtime::KernelBase {
 public:
  explicit Where(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    using namespace elementwise;
    const Tensor& cond = call.input(0);
    const Tensor& x = call.input(1);
    const Tensor& y = call.input(2);
    if (cond.dtype() != DataType::kBool)
      call.Fail("condition must be BOOL, got " + core::DataTypeName(cond.dtype()));
    if (x.dtype() != y.dtype())
      call.Fail("X and Y must have the same type, got " + core::DataTypeName(x.dtype()) + " and " +
                core::DataTypeName(y.dtype()));
    const Shape shapes[] = {cond.shape(), x.shape(), y.shape()};
    const Shape out_shape = BroadcastShapes(call, shapes);
    const BroadcastPlan plan(shapes, out_shape);
    DispatchByWidth(call, x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const bool* pc = cond.data<bool>();
      const T* px = x.data<T>();
      const T* py = y.data<T>();
      Tensor& out = call.AllocateOutput(0, x.dtype(), out_shape);
      T* po = out.mutable_data<T>();
      const int64_t sc = plan.inner_stride(0), sx = plan.inner_stride(1), sy = plan.inner_stride(2);
      ParallelFor(plan.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        plan.ForEachSegment(begin, end, [&](int64_t oi, const int64_t* off, int64_t n) {
          const bool* c = pc + off[0];
          const T* a = px + off[1];
          const T* b = py + off[2];
          T* o = po + oi;
          if (sc && sx && sy) {
            for (int64_t j = 0; j < n; ++j) o[j] = c[j] ? a[j] : b[j];
          } else {
            for (int64_t j = 0; j < n; ++j) o[j] = c[j * sc] ? a[j * sx] : b[j * sy];
          }
        });
      });
    });
  }
};

OL_KERNEL_FACTORY(Where)

}  // namespace onnx_light::ops
