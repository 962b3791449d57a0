#include "ops/math/cpu_features.h"

namespace onnx_light::ops::math {

#if defined(__x86_64__)
bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
bool CpuHasAvx2FmaF16c() {
  static const bool has = CpuHasAvx2Fma() && __builtin_cpu_supports("f16c");
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
#else
bool CpuHasAvx2Fma() { return false; }
bool CpuHasAvx2FmaF16c() { return false; }
bool CpuHasAvx512() { return false; }
bool CpuHasAvx512Vnni() { return false; }
#endif

}  // namespace onnx_light::ops::math
