#include "backend/cpu/gemm_packed.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/dequant_cpu.h"
#include "backend/cpu/gemm_epilogue.h"
#include "core/error.h"
#include "core/threads.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FLUXRT_GEMM_X86 1
#define FLUXRT_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define FLUXRT_AVX2
#endif

namespace fluxrt::backend::gemm {
namespace {

// Block sizes (elements). Mc x Kc f32 activations (96 KiB) plus the Mc x Nc f32 output block
// (192 KiB) sit in a 512 KiB L2; a Kc x 16 bf16 weight panel (8 KiB) sits in L1.
constexpr int64_t kMc = 96;
constexpr int64_t kKc = 256;
constexpr int64_t kNc = 512;
static_assert(kMc % kMr == 0 && kNc % kNr == 0);
// Row stride of the output block: 16 floats past Nc so the six C rows of a micro-tile do not all
// fall into the same few L1 sets (a 2 KiB stride would).
constexpr int64_t kLdc = kNc + 16;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

void* aligned_alloc_bytes(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) fail(ErrorCode::OutOfMemory, "[linear] cannot allocate {} bytes for packed weights", bytes);
  return p;
}

#ifdef FLUXRT_GEMM_X86

// ---- micro-kernels: c[6][16] (+)= a[kc][6] * b[kc][16] ----

FLUXRT_AVX2 void kernel_6x16_bf16(int64_t kc, const float* a, const uint16_t* b, float* c, int64_t ldc,
                                  bool accumulate) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (accumulate) {
    c00 = _mm256_load_ps(c + 0 * ldc), c01 = _mm256_load_ps(c + 0 * ldc + 8);
    c10 = _mm256_load_ps(c + 1 * ldc), c11 = _mm256_load_ps(c + 1 * ldc + 8);
    c20 = _mm256_load_ps(c + 2 * ldc), c21 = _mm256_load_ps(c + 2 * ldc + 8);
    c30 = _mm256_load_ps(c + 3 * ldc), c31 = _mm256_load_ps(c + 3 * ldc + 8);
    c40 = _mm256_load_ps(c + 4 * ldc), c41 = _mm256_load_ps(c + 4 * ldc + 8);
    c50 = _mm256_load_ps(c + 5 * ldc), c51 = _mm256_load_ps(c + 5 * ldc + 8);
  } else {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  }
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = 0; k < kc; ++k) {
    __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + k * kNr));
    __m256 b0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));     // columns 0..7
    __m256 b1 = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));  // columns 8..15
    const float* ak = a + k * kMr;
    __m256 t;
    t = _mm256_broadcast_ss(ak + 0), c00 = _mm256_fmadd_ps(t, b0, c00), c01 = _mm256_fmadd_ps(t, b1, c01);
    t = _mm256_broadcast_ss(ak + 1), c10 = _mm256_fmadd_ps(t, b0, c10), c11 = _mm256_fmadd_ps(t, b1, c11);
    t = _mm256_broadcast_ss(ak + 2), c20 = _mm256_fmadd_ps(t, b0, c20), c21 = _mm256_fmadd_ps(t, b1, c21);
    t = _mm256_broadcast_ss(ak + 3), c30 = _mm256_fmadd_ps(t, b0, c30), c31 = _mm256_fmadd_ps(t, b1, c31);
    t = _mm256_broadcast_ss(ak + 4), c40 = _mm256_fmadd_ps(t, b0, c40), c41 = _mm256_fmadd_ps(t, b1, c41);
    t = _mm256_broadcast_ss(ak + 5), c50 = _mm256_fmadd_ps(t, b0, c50), c51 = _mm256_fmadd_ps(t, b1, c51);
  }
  _mm256_store_ps(c + 0 * ldc, c00), _mm256_store_ps(c + 0 * ldc + 8, c01);
  _mm256_store_ps(c + 1 * ldc, c10), _mm256_store_ps(c + 1 * ldc + 8, c11);
  _mm256_store_ps(c + 2 * ldc, c20), _mm256_store_ps(c + 2 * ldc + 8, c21);
  _mm256_store_ps(c + 3 * ldc, c30), _mm256_store_ps(c + 3 * ldc + 8, c31);
  _mm256_store_ps(c + 4 * ldc, c40), _mm256_store_ps(c + 4 * ldc + 8, c41);
  _mm256_store_ps(c + 5 * ldc, c50), _mm256_store_ps(c + 5 * ldc + 8, c51);
}

FLUXRT_AVX2 void kernel_6x16_f32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                                 bool accumulate) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (accumulate) {
    c00 = _mm256_load_ps(c + 0 * ldc), c01 = _mm256_load_ps(c + 0 * ldc + 8);
    c10 = _mm256_load_ps(c + 1 * ldc), c11 = _mm256_load_ps(c + 1 * ldc + 8);
    c20 = _mm256_load_ps(c + 2 * ldc), c21 = _mm256_load_ps(c + 2 * ldc + 8);
    c30 = _mm256_load_ps(c + 3 * ldc), c31 = _mm256_load_ps(c + 3 * ldc + 8);
    c40 = _mm256_load_ps(c + 4 * ldc), c41 = _mm256_load_ps(c + 4 * ldc + 8);
    c50 = _mm256_load_ps(c + 5 * ldc), c51 = _mm256_load_ps(c + 5 * ldc + 8);
  } else {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_load_ps(b + k * kNr);
    __m256 b1 = _mm256_load_ps(b + k * kNr + 8);
    const float* ak = a + k * kMr;
    __m256 t;
    t = _mm256_broadcast_ss(ak + 0), c00 = _mm256_fmadd_ps(t, b0, c00), c01 = _mm256_fmadd_ps(t, b1, c01);
    t = _mm256_broadcast_ss(ak + 1), c10 = _mm256_fmadd_ps(t, b0, c10), c11 = _mm256_fmadd_ps(t, b1, c11);
    t = _mm256_broadcast_ss(ak + 2), c20 = _mm256_fmadd_ps(t, b0, c20), c21 = _mm256_fmadd_ps(t, b1, c21);
    t = _mm256_broadcast_ss(ak + 3), c30 = _mm256_fmadd_ps(t, b0, c30), c31 = _mm256_fmadd_ps(t, b1, c31);
    t = _mm256_broadcast_ss(ak + 4), c40 = _mm256_fmadd_ps(t, b0, c40), c41 = _mm256_fmadd_ps(t, b1, c41);
    t = _mm256_broadcast_ss(ak + 5), c50 = _mm256_fmadd_ps(t, b0, c50), c51 = _mm256_fmadd_ps(t, b1, c51);
  }
  _mm256_store_ps(c + 0 * ldc, c00), _mm256_store_ps(c + 0 * ldc + 8, c01);
  _mm256_store_ps(c + 1 * ldc, c10), _mm256_store_ps(c + 1 * ldc + 8, c11);
  _mm256_store_ps(c + 2 * ldc, c20), _mm256_store_ps(c + 2 * ldc + 8, c21);
  _mm256_store_ps(c + 3 * ldc, c30), _mm256_store_ps(c + 3 * ldc + 8, c31);
  _mm256_store_ps(c + 4 * ldc, c40), _mm256_store_ps(c + 4 * ldc + 8, c41);
  _mm256_store_ps(c + 5 * ldc, c50), _mm256_store_ps(c + 5 * ldc + 8, c51);
}

// Widens one Kc x 16 bf16 weight panel (interleaved halves) into plain f32 rows of 16. Done once
// per panel and reused by all Mc/6 micro-tiles of the block, so it costs ~1% of the arithmetic,
// while it keeps the widening shift off the FMA ports inside the micro-kernel.
FLUXRT_AVX2 void widen_panel(int64_t kc, const uint16_t* b, float* out) {
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = 0; k < kc; ++k) {
    __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + k * kNr));
    _mm256_store_ps(out + k * kNr, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    _mm256_store_ps(out + k * kNr + 8, _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask)));
  }
}

// Eight rows of eight floats (row stride ld) transposed into out[c][8] (row stride ldo).
FLUXRT_AVX2 inline void transpose_8x8(const float* in, int64_t ld, float* out, int64_t ldo) {
  __m256 r0 = _mm256_loadu_ps(in + 0 * ld), r1 = _mm256_loadu_ps(in + 1 * ld),
         r2 = _mm256_loadu_ps(in + 2 * ld), r3 = _mm256_loadu_ps(in + 3 * ld),
         r4 = _mm256_loadu_ps(in + 4 * ld), r5 = _mm256_loadu_ps(in + 5 * ld),
         r6 = _mm256_loadu_ps(in + 6 * ld), r7 = _mm256_loadu_ps(in + 7 * ld);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
               t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
               t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  r0 = _mm256_shuffle_ps(t0, t2, 0x44), r1 = _mm256_shuffle_ps(t0, t2, 0xEE),
  r2 = _mm256_shuffle_ps(t1, t3, 0x44), r3 = _mm256_shuffle_ps(t1, t3, 0xEE),
  r4 = _mm256_shuffle_ps(t4, t6, 0x44), r5 = _mm256_shuffle_ps(t4, t6, 0xEE),
  r6 = _mm256_shuffle_ps(t5, t7, 0x44), r7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out + 0 * ldo, _mm256_permute2f128_ps(r0, r4, 0x20));
  _mm256_storeu_ps(out + 1 * ldo, _mm256_permute2f128_ps(r1, r5, 0x20));
  _mm256_storeu_ps(out + 2 * ldo, _mm256_permute2f128_ps(r2, r6, 0x20));
  _mm256_storeu_ps(out + 3 * ldo, _mm256_permute2f128_ps(r3, r7, 0x20));
  _mm256_storeu_ps(out + 4 * ldo, _mm256_permute2f128_ps(r0, r4, 0x31));
  _mm256_storeu_ps(out + 5 * ldo, _mm256_permute2f128_ps(r1, r5, 0x31));
  _mm256_storeu_ps(out + 6 * ldo, _mm256_permute2f128_ps(r2, r6, 0x31));
  _mm256_storeu_ps(out + 7 * ldo, _mm256_permute2f128_ps(r3, r7, 0x31));
}

// Weight rows [16 panel, +16) x columns [p0, p0+kc) of a quantized W as a plain f32 panel
// out[kc][16] (rows past N are zero): each row's blocks in the range dequantized into `rows`
// ([16][kc]), then transposed 8x8 at a time. p0 is a multiple of Kc and so of every block size.
FLUXRT_AVX2 void dequantize_panel(const QuantizedMatrix& q, int64_t panel, int64_t p0, int64_t kc,
                                  float* rows, float* out) {
  const int64_t r0 = panel * kNr, nr = std::min(kNr, q.rows - r0);
  for (int64_t r = 0; r < nr; ++r) cpu::dequantize_row_part_cpu(q, r0 + r, p0, kc, rows + r * kc);
  if (nr < kNr) std::fill(rows + nr * kc, rows + kNr * kc, 0.0f);
  const int64_t k8 = kc / 8 * 8;
  for (int64_t k = 0; k < k8; k += 8) {
    transpose_8x8(rows + k, kc, out + k * kNr, kNr);
    transpose_8x8(rows + 8 * kc + k, kc, out + k * kNr + 8, kNr);
  }
  for (int64_t k = k8; k < kc; ++k)  // fp8 rows (blocks of one) need not be a multiple of 8 long
    for (int64_t j = 0; j < kNr; ++j) out[k * kNr + j] = rows[j * kc + k];
}

// Asks for the bytes dequantize_panel will read for `panel` (16 row parts, each one stride of the
// weight apart): the hardware prefetchers do not follow 16 interleaved streams, so without this
// every panel waits on memory; issued ahead of use, the loads overlap the micro-kernels.
FLUXRT_AVX2 void prefetch_panel(const QuantizedMatrix& q, int64_t panel, int64_t p0, int64_t kc) {
  const QuantTraits& t = quant_traits(q.type);
  const size_t offset = static_cast<size_t>(p0 / t.block) * t.block_bytes;
  const size_t bytes = static_cast<size_t>(kc / t.block) * t.block_bytes;
  const int64_t r0 = panel * kNr, nr = std::min(kNr, q.rows - r0);
  for (int64_t r = 0; r < nr; ++r) {
    const char* p = reinterpret_cast<const char*>(q.row(r0 + r)) + offset;
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  }
}

// Packs rows [i0, i0+mc) x columns [p0, p0+kc) of x into kMr-row panels: out[r/6][k][r%6] (f32);
// rows past mc are zero so the micro-kernel never needs an edge case.
FLUXRT_AVX2 void pack_activations(const Tensor& x, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* out,
                                  float* row) {
  const size_t es = x.element_size();
  const auto* base = static_cast<const char*>(x.raw_data());
  const int64_t mc_pad = (mc + kMr - 1) / kMr * kMr;
  for (int64_t r = 0; r < mc_pad; ++r) {
    float* dst = out + (r / kMr) * kc * kMr + r % kMr;
    if (r >= mc) {
      for (int64_t k = 0; k < kc; ++k) dst[k * kMr] = 0.0f;
      continue;
    }
    load_row_f32(base + ((i0 + r) * x.stride(0) + p0) * es, x.dtype(), kc, row);
    for (int64_t k = 0; k < kc; ++k) dst[k * kMr] = row[k];
  }
}

#endif  // FLUXRT_GEMM_X86

}  // namespace

bool packed_gemm_supported() {
#ifdef FLUXRT_GEMM_X86
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

PackedWeights pack_weights(const Tensor& weight, const Tensor& bias) {
  PackedWeights p;
  p.n = weight.size(0);
  p.k = weight.size(1);
  p.panels = (p.n + kNr - 1) / kNr;
  p.dtype = weight.dtype() == DType::BF16 ? DType::BF16 : DType::F32;
  const size_t bytes = p.bytes();
  p.buffer = std::shared_ptr<void>(aligned_alloc_bytes(bytes), AlignedFree{});
  p.data = p.buffer.get();

  const auto* src = static_cast<const char*>(weight.raw_data());
  const int64_t s0 = weight.stride(0), s1 = weight.stride(1);
  const size_t es = weight.element_size();
  const int64_t n = p.n, k = p.k;
  if (p.dtype == DType::BF16) {
    auto* dst = static_cast<uint16_t*>(p.buffer.get());
    const auto* w = reinterpret_cast<const uint16_t*>(src);
#pragma omp parallel for schedule(static)
    for (int64_t panel = 0; panel < p.panels; ++panel) {
      uint16_t* out = dst + panel * k * kNr;
      for (int64_t kk = 0; kk < k; ++kk) {
        for (int64_t j = 0; j < 8; ++j) {
          const int64_t lo = panel * kNr + j, hi = lo + 8;
          out[kk * kNr + 2 * j] = lo < n ? w[lo * s0 + kk * s1] : 0;
          out[kk * kNr + 2 * j + 1] = hi < n ? w[hi * s0 + kk * s1] : 0;
        }
      }
    }
  } else {
    auto* dst = static_cast<float*>(p.buffer.get());
#pragma omp parallel for schedule(static)
    for (int64_t panel = 0; panel < p.panels; ++panel) {
      float* out = dst + panel * k * kNr;
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t j = 0; j < kNr; ++j) {
          const int64_t col = panel * kNr + j;
          float v = 0.0f;
          if (col < n) convert(src + (col * s0 + kk * s1) * es, weight.dtype(), &v, DType::F32, 1);
          out[kk * kNr + j] = v;
        }
    }
  }
  if (bias.defined()) {
    const int64_t n_pad = p.panels * kNr;
    p.bias = std::shared_ptr<float>(static_cast<float*>(aligned_alloc_bytes(static_cast<size_t>(n_pad) * 4)),
                                    AlignedFree{});
    padded_vector_f32(bias, n, n_pad, p.bias.get());
  }
  return p;
}

void packed_gemm(const Tensor& x, const PackedWeights& w, Activation act, const Tensor& residual,
                 const Tensor& gate, const Tensor& y) {
#ifndef FLUXRT_GEMM_X86
  (void)x, (void)w, (void)act, (void)residual, (void)gate, (void)y;
  fail(ErrorCode::Unsupported, "[linear] the packed AVX2 GEMM is x86-only");
#else
  FLUXRT_CHECK(packed_gemm_supported(), ErrorCode::Unsupported, "[linear] the packed GEMM needs AVX2 and FMA");
  const int64_t m = x.size(0), k = w.k, n = w.n;
  if (m == 0 || n == 0) return;
  const int64_t n_pad = w.panels * kNr;
  std::vector<float> gate_pad;
  if (gate.defined()) {
    gate_pad.resize(static_cast<size_t>(n_pad));
    padded_vector_f32(gate, n, n_pad, gate_pad.data());
  }
  const EpilogueCtx ectx{w.bias.get(), gate.defined() ? gate_pad.data() : nullptr, act, &residual, &y};

  const int64_t m_blocks = (m + kMc - 1) / kMc;
  const int64_t n_blocks = (n + kNc - 1) / kNc;
  const int64_t tasks = m_blocks * n_blocks;
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), tasks));

#pragma omp parallel num_threads(threads)
  {
    std::unique_ptr<float, AlignedFree> apack(static_cast<float*>(aligned_alloc_bytes(kMc * kKc * 4)));
    std::unique_ptr<float, AlignedFree> cblock(static_cast<float*>(aligned_alloc_bytes(kMc * kLdc * 4)));
    std::vector<float> row(static_cast<size_t>(std::max(kKc, kNc) + 8));
    std::unique_ptr<float, AlignedFree> bwide(static_cast<float*>(aligned_alloc_bytes(kKc * kNr * 4)));
    // Quantized weights: the panel's rows dequantized before the transpose into bwide.
    std::unique_ptr<float, AlignedFree> qrows(
        w.quantized ? static_cast<float*>(aligned_alloc_bytes(kNr * kKc * 4)) : nullptr);
    // Dynamic: on a shared machine a descheduled thread must not hold back half the work. Tasks
    // are in column-major order, so the threads work on neighbouring row blocks of one K x Nc
    // weight slab at a time (the slab stays in the shared L3 while the activations stream).
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t jb = t / m_blocks, ib = t % m_blocks;
      const int64_t i0 = ib * kMc, mc = std::min(kMc, m - i0);
      const int64_t j0 = jb * kNc, nc = std::min(kNc, n - j0);
      const int64_t mc_pad = (mc + kMr - 1) / kMr * kMr;
      const int64_t panels = (nc + kNr - 1) / kNr;
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t kc = std::min(kKc, k - p0);
        pack_activations(x, i0, mc, p0, kc, apack.get(), row.data());
        for (int64_t jp = 0; jp < panels; ++jp) {
          const int64_t panel = j0 / kNr + jp;
          const float* b = static_cast<const float*>(w.data) + (panel * k + p0) * kNr;
          if (w.quantized) {
            // Two panels ahead: one ahead left q8_0 (twice q4_K's bytes) still waiting.
            if (jp == 0 && panels > 1) prefetch_panel(*w.quantized, panel + 1, p0, kc);
            if (jp + 2 < panels) prefetch_panel(*w.quantized, panel + 2, p0, kc);
            dequantize_panel(*w.quantized, panel, p0, kc, qrows.get(), bwide.get());
            b = bwide.get();
          } else if (w.dtype == DType::BF16) {
            const auto* b16 = static_cast<const uint16_t*>(w.data) + (panel * k + p0) * kNr;
            if (mc_pad <= kMr) {
              // One micro-tile row (small M): widen in registers, the panel is used once.
              kernel_6x16_bf16(kc, apack.get(), b16, cblock.get() + jp * kNr, kLdc, p0 > 0);
              continue;
            }
            widen_panel(kc, b16, bwide.get());
            b = bwide.get();
          }
          for (int64_t ir = 0; ir < mc_pad; ir += kMr) {
            float* c = cblock.get() + ir * kLdc + jp * kNr;
            kernel_6x16_f32(kc, apack.get() + ir * kc, b, c, kLdc, p0 > 0);
          }
        }
      }
      epilogue_block(ectx, cblock.get(), kLdc, i0, mc, j0, nc, row.data());
    }
  }
#endif
}

}  // namespace fluxrt::backend::gemm
