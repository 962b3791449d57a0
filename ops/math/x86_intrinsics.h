// <immintrin.h> for the SIMD kernels, on x86-64 only. GCC 12's AVX-512 intrinsics seed results
// with a self-initialised "undefined" vector, which -Wmaybe-uninitialized reports at the
// header's lines (GCC bug 105593, fixed in 13): the include is wrapped once, here.
#pragma once

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
