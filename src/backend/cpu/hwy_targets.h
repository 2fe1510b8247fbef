#pragma once
// Which Highway targets the CPU kernels are compiled for. Each target is one more compilation of
// every SIMD translation unit, so we keep the ones that matter for inference machines: AVX2 (+FMA,
// F16C), AVX-512 (SKX) and the baseline Highway always builds (plus NEON/SVE on ARM, untouched).
// Must come before any <hwy/...> include.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
