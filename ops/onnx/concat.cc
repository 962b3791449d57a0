// Concat: joins inputs along `axis` (negative counts from the end). Inputs must share
// dtype, rank and every other dimension; zero-length inputs are allowed.
//
// The exporters' KV-cache pattern `present = Concat(past, new)` with past <- present bound
// in a PersistentValueState uses the state's append reservation: the result buffer already
// holds the past, and only the later inputs are copied (spec "Contiguous CPU Attention
// feedback"; the reservation declines layouts it cannot append in place). With several
// blocks before the axis (batch, heads) the past is a strided view with spare rows in each
// block; the first input is read through its strides, block by block.
#include <cstring>

#include "core/checked_math.h"
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

class Concat final : public core::runtime::KernelBase {
 public:
  explicit Concat(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::RequiredAttrInt(node, "axis");
  }

  bool ReadsStridedInput(size_t index) const override { return index == 0; }

  void Compute(KernelCall& call) const override {
    std::vector<const Tensor*> inputs;
    for (size_t i = 0; i < call.input_count(); ++i)
      if (call.has_input(i)) inputs.push_back(&call.input(i));
    if (inputs.empty()) call.Fail("needs at least one input");
    const int64_t rank = inputs[0]->rank();
    if (rank == 0) call.Fail("cannot concatenate scalars (rank 0)");
    const int64_t axis = elementwise::NormalizeAxis(call, axis_, rank);
    Tensor first_dense;  // a strided first input whose blocks are not dense from the axis
    if (!inputs[0]->DenseFrom(axis)) inputs[0] = &(first_dense = inputs[0]->Contiguous());
    const Tensor& first = *inputs[0];
    Shape out_shape = first.shape();
    out_shape[static_cast<size_t>(axis)] = 0;
    for (const Tensor* t : inputs) {
      if (t->dtype() != first.dtype())
        call.Fail("inputs must have one type, got " + core::DataTypeName(first.dtype()) + " and " +
                  core::DataTypeName(t->dtype()));
      bool ok = t->rank() == rank;
      for (int64_t d = 0; ok && d < rank; ++d)
        ok = d == axis ||
             t->shape()[static_cast<size_t>(d)] == first.shape()[static_cast<size_t>(d)];
      if (!ok)
        call.Fail("inputs must match in every dimension but axis " + std::to_string(axis) + ": " +
                  elementwise::DescribeInputs(call));
      out_shape[static_cast<size_t>(axis)] =
          core::CheckedAdd(out_shape[static_cast<size_t>(axis)],
                           t->shape()[static_cast<size_t>(axis)], "Concat's output axis");
    }
    core::CheckedNumel(out_shape, "Concat's output");  // out_row below must not overflow
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out_shape[static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= out_shape[static_cast<size_t>(d)];
    if (TryAppend(call, inputs, out_shape, axis)) return;
    const int64_t out_row = out_shape[static_cast<size_t>(axis)] * inner;
    elementwise::DispatchByWidth(call, first.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& out = call.AllocateOutput(0, first.dtype(), out_shape);
      T* dst = out.mutable_data<T>();
      const int64_t grain =
          std::max<int64_t>(1, elementwise::kParallelGrain / std::max<int64_t>(out_row, 1));
      elementwise::ParallelFor(outer, grain, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          T* row = dst + o * out_row;
          for (const Tensor* t : inputs) {
            const int64_t chunk = t->shape()[static_cast<size_t>(axis)] * inner;
            if (chunk > 0)
              elementwise::CopyElements(
                  static_cast<const T*>(t->strided_data()) + t->BlockOffset(axis, o), chunk, row);
            row += chunk;
          }
        }
      });
    });
  }

 private:
  // Appends inputs[1..] after the bound past in its reserved buffer; false when no
  // reservation is granted (then the ordinary concatenation runs).
  static bool TryAppend(KernelCall& call, const std::vector<const Tensor*>& inputs,
                        const Shape& out_shape, int64_t axis) {
    if (!call.has_context() || !call.has_input(0) || inputs[0] != &call.input(0)) return false;
    const auto& context = call.context();
    auto reservation = context.ReservePersistentAppend(call, out_shape, axis, 0, 0);
    if (!reservation) return false;
    // Block b of each later input (dense) is a run of whole rows after block b's past.
    size_t written = 0;
    for (size_t b = 0; b < reservation->blocks(); ++b) {
      std::byte* out = reservation->block(b).data();
      for (size_t i = 1; i < inputs.size(); ++i) {
        const size_t n = inputs[i]->nbytes() / reservation->blocks();
        if (n > 0)
          std::memcpy(out, static_cast<const std::byte*>(inputs[i]->raw_data()) + b * n, n);
        out += n;
        written += n;
      }
    }
    call.SetOutput(0, context.CommitPersistentAppend(call, std::move(*reservation), written));
    core::runtime::RecordStorage(call, {.append_copied_bytes = written});
    return true;
  }

  int64_t axis_ = 0;
};

OL_KERNEL_FACTORY(Concat)

}  // namespace onnx_light::ops
