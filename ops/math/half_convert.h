// FLOAT16 <-> FLOAT conversion of whole runs of elements, with the F16C instructions where the
// CPU has them (8 elements an instruction) and core::HalfToFloat / FloatToHalf elsewhere. The
// results are the scalar functions' bits for every input, NaN included (a NaN becomes the
// canonical quiet NaN of its sign, as core::FloatToHalf makes it), so a kernel gives the same
// output on every CPU. FLOAT16 models convert at every kernel edge: one call per element
// (about 2 ns) was most of an elementwise FLOAT16 kernel's time.
#pragma once

#include <cstdint>

namespace onnx_light::ops::math {

void HalvesToFloats(const uint16_t* src, float* dst, int64_t n);
void FloatsToHalves(const float* src, uint16_t* dst, int64_t n);

}  // namespace onnx_light::ops::math
