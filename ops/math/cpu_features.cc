#include "ops/math/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace onnx_light::ops::math {

#if defined(__x86_64__)
bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
bool CpuHasAvx2FmaF16c() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return CpuHasAvx2Fma() && __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  }();
  return has;
}
bool CpuHasAvx512() {
  static const bool has = CpuHasAvx2Fma() && __builtin_cpu_supports("avx512f");
  return has;
}
bool CpuHasAvx512Vnni() {
  static const bool has = CpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
  return has;
}
bool CpuHasAvx512VnniVbmi() {
  // CPUID leaf 7: EBX bit 30 AVX512BW, ECX bit 1 AVX512_VBMI (read directly, as for F16C).
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return CpuHasAvx512Vnni() && __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 &&
           (b & (1u << 30)) != 0 && (c & (1u << 1)) != 0;
  }();
  return has;
}
#else
bool CpuHasAvx2Fma() { return false; }
bool CpuHasAvx2FmaF16c() { return false; }
bool CpuHasAvx512() { return false; }
bool CpuHasAvx512Vnni() { return false; }
bool CpuHasAvx512VnniVbmi() { return false; }
#endif

}  // namespace onnx_light::ops::math
