#pragma once
// Target-independent helpers shared by the CPU kernels: dtype dispatch, the f32 copies of small
// broadcast vectors, and the OpenMP work split.
#include <hwy/base.h>
#include <hwy/cache_control.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace fluxrt::backend::cpu {

// Calls f.template operator()<T>() with T = float, hwy::bfloat16_t or hwy::float16_t.
template <typename F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32:
      f.template operator()<float>();
      return;
    case DType::BF16:
      f.template operator()<hwy::bfloat16_t>();
      return;
    case DType::F16:
      f.template operator()<hwy::float16_t>();
      return;
    default:
      fail(ErrorCode::Unsupported, "[{}] cpu kernel has no {} version", op, dtype_name(dtype));
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
inline std::vector<float> f32_copy(const Tensor& t) {
  return t.defined() ? t.to_vector() : std::vector<float>{};
}

// Below this many elements a kernel runs on the calling thread: waking the pool costs more.
inline constexpr int64_t kParallelMinElements = 1 << 15;

// Runs fn(unit) for unit in [0, units) on the OpenMP pool when the total work is large enough.
// Each thread fences its non-temporal stores (simd-inl.h) after its share, before the region's
// closing barrier, so whatever fn streamed is visible to every thread once parallel_for returns
// (an sfence costs nothing measurable when no streamed line is pending).
template <typename Fn>
void parallel_for(int64_t units, int64_t elements, Fn&& fn) {
  if (elements < kParallelMinElements || units < 2) {
    for (int64_t u = 0; u < units; ++u) fn(u);
    hwy::FlushStream();
    return;
  }
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t u = 0; u < units; ++u) fn(u);
    hwy::FlushStream();
  }
}

// Runs fn(thread, threads) once on every thread of the pool (on the calling thread alone when the
// work is small), for kernels whose threads meet at team_barrier() between phases; each thread
// fences its non-temporal stores at the end, as parallel_for does.
template <typename Fn>
void parallel_team(int64_t elements, Fn&& fn) {
  if (elements < kParallelMinElements || omp_get_max_threads() < 2) {
    fn(0, 1);
    hwy::FlushStream();
    return;
  }
#pragma omp parallel
  {
    fn(omp_get_thread_num(), omp_get_num_threads());
    hwy::FlushStream();
  }
}

// Every thread of parallel_team waits here for the others (nothing when it runs alone).
inline void team_barrier() {
#pragma omp barrier
}

// Outputs at least this large are written with non-temporal stores. An ordinary store first
// reads its line from DRAM (read-for-ownership), so a streaming op moves read + RFO + write, 3
// units to memcpy's 2; a non-temporal store skips the read but leaves the line out of cache,
// which costs the next op its cache hits when the output could have stayed there. 32 MiB is the
// L3 of a Zen3 CCX (30-60 MiB on one socket of common x86 servers): outputs this large no longer
// fit next to their input. Measured on the shared 2-core Zen3 box (single thread, streaming on
// vs off): upsample 2x 0.49x, softmax f32 and AdaLN f32 0.8x, but the 28 MB QK-norm output of
// [1,4608,24,128] took 1.2x longer streamed, so the 28 MB FLUX norms keep ordinary stores.
inline constexpr size_t kStreamMinOutputBytes = size_t{32} << 20;

// The threshold in use: kStreamMinOutputBytes, or FLUXRT_STREAM_MIN_BYTES (a byte count, read
// once) to measure where streaming starts to pay on a machine with another cache size.
inline size_t stream_min_output_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("FLUXRT_STREAM_MIN_BYTES");
    if (env == nullptr) return kStreamMinOutputBytes;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (*env < '0' || *env > '9' || end == env || *end != '\0')
      fail(ErrorCode::InvalidArgument, "FLUXRT_STREAM_MIN_BYTES must be a byte count, got '{}'", env);
    return static_cast<size_t>(v);
  }();
  return bytes;
}

// The bytes [first, last) a CPU tensor's elements can touch (strides are never negative).
inline std::pair<const char*, const char*> byte_span(const Tensor& t) {
  const char* first = static_cast<const char*>(t.raw_data());
  int64_t last = 0;
  for (int d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {first, first + (last + 1) * static_cast<int64_t>(t.element_size())};
}

// Whether a kernel writes y with non-temporal stores: y is large (stream_min_output_bytes()) and no
// input overlaps it (an in-place op's lines were just read into cache, where ordinary stores
// cost no extra read).
inline bool stream_output(const Tensor& y, std::initializer_list<const Tensor*> inputs) {
  if (y.numel() == 0 || y.nbytes() < stream_min_output_bytes()) return false;
  const auto [y0, y1] = byte_span(y);
  for (const Tensor* x : inputs) {
    if (x == nullptr || !x->defined() || x->numel() == 0) continue;
    const auto [x0, x1] = byte_span(*x);
    if (x0 < y1 && y0 < x1) return false;
  }
  return true;
}

// Calls f.template operator()<kStream>() with kStream = stream.
template <typename F>
void with_stream(bool stream, F&& f) {
  if (stream)
    f.template operator()<true>();
  else
    f.template operator()<false>();
}

// Element-wise ops split long rows into blocks so a few huge rows still use every thread.
inline constexpr int64_t kColumnBlock = 8192;

// Offsets of consecutive rows of a tensor viewed as [rows, D] (RowIndex's view), found with one
// division per leading dim at seek() and none per row after: next() steps like an odometer.
// Short rows (a QK norm's 128-wide heads of a strided qkv view) otherwise spend about as long in
// RowIndex::offset's divisions as in their arithmetic.
class RowCursor {
 public:
  explicit RowCursor(const Tensor& t) : lead_(t.dim() > 0 ? t.dim() - 1 : 0) {
    for (int i = 0; i < lead_; ++i) {
      extent_[i] = t.size(i);
      stride_[i] = t.stride(i);
    }
  }
  void seek(int64_t r) {
    offset_ = 0;
    for (int i = lead_ - 1; i >= 0; --i) {
      index_[i] = r % extent_[i];
      offset_ += index_[i] * stride_[i];
      r /= extent_[i];
    }
  }
  int64_t offset() const { return offset_; }
  void next() {
    for (int i = lead_ - 1; i >= 0; --i) {
      offset_ += stride_[i];
      if (++index_[i] < extent_[i]) return;
      offset_ -= stride_[i] * extent_[i];
      index_[i] = 0;
    }
  }

 private:
  int lead_;
  int64_t extent_[kMaxDims] = {}, stride_[kMaxDims] = {}, index_[kMaxDims] = {};
  int64_t offset_ = 0;
};

// Runs body(r0, r1, x_cursor, y_cursor) over blocks [r0, r1) of consecutive rows of x and y
// ([rows, D] views of the same shape; about 16K elements a block) split over the thread pool, the
// cursors at row r0.
template <typename Body>
void for_each_row_block(const Tensor& x, const Tensor& y, int64_t rows, int64_t D, Body body) {
  const int64_t per_block = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(D, 1));
  const int64_t blocks = (rows + per_block - 1) / per_block;
  const RowCursor x_start(x), y_start(y);
  parallel_for(blocks, rows * D, [&](int64_t blk) {
    RowCursor xc = x_start, yc = y_start;
    const int64_t r0 = blk * per_block, r1 = std::min(rows, r0 + per_block);
    xc.seek(r0);
    yc.seek(r0);
    body(r0, r1, xc, yc);
  });
}

// Runs body(row, x_offset, y_offset) for every row of x and y, as for_each_row_block splits them.
template <typename Body>
void for_each_row(const Tensor& x, const Tensor& y, int64_t rows, int64_t D, Body body) {
  for_each_row_block(x, y, rows, D, [&](int64_t r0, int64_t r1, RowCursor& xc, RowCursor& yc) {
    for (int64_t r = r0; r < r1; ++r, xc.next(), yc.next()) body(r, xc.offset(), yc.offset());
  });
}

}  // namespace fluxrt::backend::cpu
