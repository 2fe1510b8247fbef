#pragma once
// Target-independent helpers shared by the CPU kernels: dtype dispatch, the f32 copies of small
// broadcast vectors, and the OpenMP work split.
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <hwy/base.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace fluxrt::backend::cpu {

// Calls f.template operator()<T>() with T = float, hwy::bfloat16_t or hwy::float16_t.
template <typename F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: f.template operator()<float>(); return;
    case DType::BF16: f.template operator()<hwy::bfloat16_t>(); return;
    case DType::F16: f.template operator()<hwy::float16_t>(); return;
    default: fail(ErrorCode::Unsupported, "[{}] cpu kernel has no {} version", op, dtype_name(dtype));
  }
}

// One element of a storage type as f32 (scalar tails and broadcasts).
template <typename T>
inline float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {
    uint16_t b;
    std::memcpy(&b, &v, 2);
    return bf16_to_f32(b);
  } else {
    uint16_t b;
    std::memcpy(&b, &v, 2);
    return f16_to_f32(b);
  }
}

// A small per-channel or per-batch vector ([D] or [B, D], any strides) as contiguous f32; these
// are converted once per call so the inner loops see one dtype.
inline std::vector<float> f32_copy(const Tensor& t) { return t.defined() ? t.to_vector() : std::vector<float>{}; }

// Below this many elements a kernel runs on the calling thread: waking the pool costs more.
inline constexpr int64_t kParallelMinElements = 1 << 15;

// Runs fn(unit) for unit in [0, units) on the OpenMP pool when the total work is large enough.
template <typename Fn>
void parallel_for(int64_t units, int64_t elements, Fn&& fn) {
  if (elements < kParallelMinElements || units < 2) {
    for (int64_t u = 0; u < units; ++u) fn(u);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; ++u) fn(u);
}

// Element-wise ops split long rows into blocks so a few huge rows still use every thread.
inline constexpr int64_t kColumnBlock = 8192;

}  // namespace fluxrt::backend::cpu
