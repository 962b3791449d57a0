// What this CPU can run, detected once: the kernels pick their SIMD paths from these.
#pragma once

namespace onnx_light::ops::math {

// AVX2 and FMA (the AVX2 paths of every kernel).
bool CpuHasAvx2Fma();
// AVX2, FMA and F16C (16-bit float conversions in registers).
bool CpuHasAvx2FmaF16c();
// AVX-512F on top of AVX2/FMA (the default M > 1 SGEMM micro-kernel then).
bool CpuHasAvx512();
// AVX-512F and AVX-512 VNNI (int8 dot products: vpdpbusd).
bool CpuHasAvx512Vnni();
// AVX-512 VNNI with BW and VBMI (byte permutes across the register: vpermt2b).
bool CpuHasAvx512VnniVbmi();

}  // namespace onnx_light::ops::math
