// The shared GEMM epilogue and row conversions (see gemm_epilogue.h). AVX2 code, compiled with
// target attributes so the rest of the build keeps its baseline ISA.
#include "backend/cpu/gemm_epilogue.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"

namespace fluxrt::backend::gemm {

// Plain code, needed on every CPU (the weight packers run anywhere).
void padded_vector_f32(const Tensor& v, int64_t n, int64_t n_pad, float* dst) {
  const Tensor c = v.contiguous();
  convert(c.raw_data(), c.dtype(), dst, DType::F32, static_cast<size_t>(n));
  std::fill(dst + n, dst + n_pad, 0.0f);
}

}  // namespace fluxrt::backend::gemm

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FLUXRT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace fluxrt::backend::gemm {
namespace {

// f32 -> bf16 with round-to-nearest-even; NaN becomes kBF16NaNFromF32 as in fluxrt::f32_to_bf16.
FLUXRT_AVX2 inline __m128i f32x8_to_bf16(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(kBF16NaNFromF32), nan);
  __m256i packed = _mm256_packus_epi32(r, r);  // per 128-bit lane: [a0..a3 a0..a3 | a4..a7 ...]
  packed = _mm256_permute4x64_epi64(packed, 0x08);
  return _mm256_castsi256_si128(packed);
}

// exp(x) for x in [-87, 88] (clamped), Cephes-style polynomial, ~1 ulp.
FLUXRT_AVX2 inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// Both activations are x * sigmoid(z): SiLU with z = x; GELU-tanh with z = 2u, since
// 0.5 (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
FLUXRT_AVX2 inline __m256 activate(__m256 x, Activation act) {
  __m256 z = x;
  if (act == Activation::GeluTanh) {
    const __m256 c2 = _mm256_set1_ps(2.0f * 0.7978845608028654f);
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    z = _mm256_mul_ps(c2, _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
  }
  __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), z));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace

FLUXRT_AVX2 void load_row_f32(const void* src, DType dt, int64_t n, float* dst) {
  if (dt == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  if (dt == DType::BF16) {
    const auto* s = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
    }
    for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
    return;
  }
  if (dt == DType::F16) {
    const auto* s = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
    return;
  }
  convert(src, dt, dst, DType::F32, static_cast<size_t>(n));
}

FLUXRT_AVX2 void store_row_f32(const float* src, DType dt, int64_t n, void* dst) {
  if (dt == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  if (dt == DType::BF16) {
    auto* d = static_cast<uint16_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), f32x8_to_bf16(_mm256_loadu_ps(src + i)));
    for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
    return;
  }
  convert(src, DType::F32, dst, dt, static_cast<size_t>(n));
}

FLUXRT_AVX2 void epilogue_block(const EpilogueCtx& e, float* c, int64_t ldc, int64_t i0, int64_t mc,
                                int64_t j0, int64_t nc, float* row) {
  const int64_t nc_pad = (nc + 7) / 8 * 8;
  const Tensor& y = *e.y;
  char* ybase = static_cast<char*>(y.raw_data());
  const size_t ye = y.element_size();
  for (int64_t r = 0; r < mc; ++r) {
    float* cr = c + r * ldc;
    if (e.bias || e.act != Activation::None || e.gate) {
      if (e.gate) {
        const Tensor& res = *e.residual;
        load_row_f32(
            static_cast<const char*>(res.raw_data()) + ((i0 + r) * res.stride(0) + j0) * res.element_size(),
            res.dtype(), nc, row);
      }
      for (int64_t j = 0; j < nc_pad; j += 8) {
        __m256 v = _mm256_load_ps(cr + j);
        if (e.bias) v = _mm256_add_ps(v, _mm256_loadu_ps(e.bias + j0 + j));
        if (e.act != Activation::None) v = activate(v, e.act);
        if (e.gate) v = _mm256_fmadd_ps(_mm256_loadu_ps(e.gate + j0 + j), v, _mm256_loadu_ps(row + j));
        _mm256_store_ps(cr + j, v);
      }
    }
    store_row_f32(cr, y.dtype(), nc, ybase + ((i0 + r) * y.stride(0) + j0) * ye);
  }
}

}  // namespace fluxrt::backend::gemm
#endif
