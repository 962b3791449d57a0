#include "ops/math/matmul_shape.h"

#include <optional>
#include <string>

#include "ops/elementwise/broadcast.h"

namespace onnx_light::ops::math {

MatMulShape MatMulShapes(core::runtime::KernelCall& call, const Shape& a, const Shape& b) {
  using core::runtime::ShapeToString;
  if (a.empty() || b.empty()) call.Fail("scalar inputs are not accepted");
  Shape as = a, bs = b;
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  MatMulShape s;
  s.m = as[as.size() - 2];
  s.k = as.back();
  s.n = bs.back();
  if (bs[bs.size() - 2] != s.k)
    call.Fail("inner dimensions differ: A has shape " + ShapeToString(a) + " and B has shape " +
              ShapeToString(b));
  s.a_batch.assign(as.begin(), as.end() - 2);
  s.b_batch.assign(bs.begin(), bs.end() - 2);
  const Shape batches[2] = {s.a_batch, s.b_batch};
  std::optional<Shape> broadcast = elementwise::TryBroadcastShapes(batches);
  if (!broadcast)
    call.Fail("shapes " + ShapeToString(s.a_batch) + " and " + ShapeToString(s.b_batch) +
              " cannot be broadcast");
  s.batch = *broadcast;
  s.out = s.batch;
  if (!a_vec) s.out.push_back(s.m);
  if (!b_vec) s.out.push_back(s.n);
  return s;
}

}  // namespace onnx_light::ops::math
