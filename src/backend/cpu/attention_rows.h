#pragma once
// Row helpers shared by the two CPU attention implementations (attention_cpu.cpp, the SIMD
// kernel; attention_onednn.cpp, the matmul-primitive one): the call's shape, their grow-only
// scratch buffers, strided [B, L, H, D] row loads and stores in f32, RoPE in f32, and the
// fixed-maximum acceptance window both apply.
#include <hwy/aligned_allocator.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>

#include "backend/args/attention.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace fluxrt::backend::cpu::detail {

// q [B, Lq, H, D], k and v [B, Lk, Hkv, D]; `group` query heads share a kv head.
struct AttentionShape {
  int64_t B = 0, Lq = 0, Lk = 0, H = 0, Hkv = 0, D = 0, group = 1;
  AttentionShape() = default;
  explicit AttentionShape(const AttentionArgs& a)
      : B(a.q.size(0)),
        Lq(a.q.size(1)),
        Lk(a.k.size(1)),
        H(a.q.size(2)),
        Hkv(a.k.size(2)),
        D(a.q.size(3)),
        group(a.q.size(2) / a.k.size(2)) {}
  bool no_output() const { return B == 0 || Lq == 0 || H == 0 || D == 0; }
};

// Scratch allocations of both implementations, process-wide (attention_scratch_allocations()).
inline std::atomic<int64_t>& scratch_allocation_count() {
  static std::atomic<int64_t> count{0};
  return count;
}

// A grow-only aligned buffer: reallocated only when a call needs more than any before it.
template <typename T>
class GrowBuffer {
 public:
  T* get(int64_t n) {
    const size_t want = static_cast<size_t>(std::max<int64_t>(n, 1));
    if (want > capacity_) {
      data_ = hwy::AllocateAligned<T>(want);
      FLUXRT_CHECK(data_ != nullptr, ErrorCode::OutOfMemory,
                   "[attention] cannot allocate {} bytes of scratch", want * sizeof(T));
      capacity_ = want;
      scratch_allocation_count().fetch_add(1, std::memory_order_relaxed);
    }
    return data_.get();
  }
  T* data() const { return data_.get(); }  // what the last get() returned

 private:
  hwy::AlignedFreeUniquePtr<T[]> data_;
  size_t capacity_ = 0;
};

constexpr double kLog2e = 1.4426950408889634;
// Fixed-maximum acceptance window for l_i = sum_j 2^(s_ij - m_i): l_i >= 2^-60 proves the bound
// is within 60 + log2(Lk) < 100 binades of the true maximum, so every term that matters (relative
// weight above 2^-26 of the largest) is a normal f32 and nothing that was flushed to zero by the
// 2^-127 floor of exp2 can add up to more than Lk * 2^-27 relative. The upper limit catches
// overflow when f32 rounding in q·k exceeds the bound by a lot (huge norms).
constexpr float kMinRowSum = 0x1p-60f;
constexpr float kMaxRowSum = 0x1p60f;

// Reads n elements of a row (unit stride) as f32.
inline void load_row(const Tensor& t, int64_t offset, float* dst, int64_t n) {
  const char* base = static_cast<const char*>(t.raw_data()) + offset * static_cast<int64_t>(t.element_size());
  if (t.dtype() == DType::F32) {
    std::memcpy(dst, base, n * sizeof(float));
  } else if (t.dtype() == DType::BF16) {
    // Widening bf16 is exact (the bits move up by 16), so no call into the general converter for
    // every 128-element row; this loop vectorises.
    const uint16_t* src = reinterpret_cast<const uint16_t*>(base);
    for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
  } else {
    convert(base, t.dtype(), dst, DType::F32, static_cast<size_t>(n));
  }
}

inline void store_row(const Tensor& t, int64_t offset, const float* src, int64_t n) {
  char* base = static_cast<char*>(t.raw_data()) + offset * static_cast<int64_t>(t.element_size());
  if (t.dtype() == DType::F32)
    std::memcpy(base, src, n * sizeof(float));
  else
    convert(src, DType::F32, base, t.dtype(), static_cast<size_t>(n));
}

inline int64_t off4(const Tensor& t, int64_t b, int64_t l, int64_t h) {
  return b * t.stride(0) + l * t.stride(1) + h * t.stride(2);
}

// Asks for the cache lines of n elements of a row ahead of their use. Rows of one head are
// H * D elements apart, one 4 KiB page or more: the hardware prefetchers, which stay inside a
// page, never follow them, so without this every row load waits for memory on its own.
inline void prefetch_row(const Tensor& t, int64_t offset, int64_t n, bool for_write = false) {
  const char* base = static_cast<const char*>(t.raw_data()) + offset * static_cast<int64_t>(t.element_size());
  const int64_t bytes = n * static_cast<int64_t>(t.element_size());
  for (int64_t o = 0; o < bytes; o += 64) {
    if (for_write)
      __builtin_prefetch(base + o, 1);
    else
      __builtin_prefetch(base + o, 0);
  }
}

// Row `pos` of a [L, D/2] or [B, L, D/2] f32 table.
inline const float* rope_table_row(const Tensor& t, int64_t b, int64_t pos) {
  const float* base = t.data<float>();
  return t.dim() == 3 ? base + b * t.stride(0) + pos * t.stride(1) : base + pos * t.stride(0);
}

// Rotates x[0, D) in place in f32 (y_a = x_a cos - x_b sin, y_b = x_b cos + x_a sin).
inline void rope_rotate_row(float* x, int64_t D, RopeLayout layout, const float* cos, const float* sin) {
  const int64_t half = D / 2;
  if (layout == RopeLayout::AdjacentPairs) {
    for (int64_t j = 0; j < half; ++j) {
      const float xa = x[2 * j], xb = x[2 * j + 1];
      x[2 * j] = xa * cos[j] - xb * sin[j];
      x[2 * j + 1] = xb * cos[j] + xa * sin[j];
    }
  } else if (layout == RopeLayout::HalfSplit) {
    for (int64_t j = 0; j < half; ++j) {
      const float xa = x[j], xb = x[j + half];
      x[j] = xa * cos[j] - xb * sin[j];
      x[j + half] = xb * cos[j] + xa * sin[j];
    }
  }
}

// Whether key j of batch element b takes part (in range and not masked by key_padding_mask).
inline bool key_visible(const AttentionArgs& a, int64_t b, int64_t j) {
  if (j >= a.k.size(1)) return false;
  if (!a.key_padding_mask.defined()) return true;
  const Tensor& km = a.key_padding_mask;
  return static_cast<const uint8_t*>(km.raw_data())[b * km.stride(0) + j * km.stride(1)] != 0;
}

}  // namespace fluxrt::backend::cpu::detail
