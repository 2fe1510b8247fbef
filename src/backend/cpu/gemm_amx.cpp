// The AMX bf16 GEMM (see gemm_amx.h). The tile instructions are compiled through target
// attributes, so nothing here runs on a CPU without them unless amx_gemm_supported() said yes.
#include "backend/cpu/gemm_amx.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/amx_tile_config.h"
#include "backend/cpu/gemm_epilogue.h"
#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "core/threads.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define FLUXRT_AMX_X86 1
#define FLUXRT_AMX __attribute__((target("amx-tile,amx-bf16")))
// The panel product carries the tile target for either policy: the hardware one's instructions
// must inline into it, and the emulated one's plain code may.
#define FLUXRT_AMX_OR_PLAIN FLUXRT_AMX
#else
#define FLUXRT_AMX_OR_PLAIN
#endif

namespace fluxrt::backend::gemm {
namespace {

constexpr int64_t kBlockRows = 32;       // rows per packed activation block (two 16-row A tiles)
constexpr int64_t kStepElements = 1024;  // one K step of a 32-row or 32-column block: two tiles
constexpr int64_t kTileElements = 512;   // 16 rows x 32 bf16
// Task and pass sizes (gemm_amx.h, "Blocking"). Measured on the AMX Xeon with the weights
// streaming from memory (8 weight copies cycled, 2 threads): columns 256 and passes of 256-512
// were best at M = 256 and 768 for 3072 -> 18432 / 27648 and 12288 -> 3072; 128 columns 5-10%
// slower, 512 columns 2-5% slower, passes of 1024 5-7% slower.
constexpr int64_t kTaskColumns = 256;
constexpr int64_t kTaskPanels = kTaskColumns / kAmxPanelColumns;
constexpr int64_t kPassDepth = 512;
constexpr int64_t kTaskRows = 512;

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// A buffer from the tensor allocator (2 MiB pages for large ones), freed with it.
struct AllocatorFree {
  void operator()(void* p) const { aligned_free(p); }
};
std::shared_ptr<void> allocate_shared(size_t bytes) {
  return std::shared_ptr<void>(aligned_alloc_bytes(bytes), AllocatorFree{});
}

// Per-calling-thread scratch, grown to the largest call: the packed activations, and for each
// worker its f32 block, an epilogue row and a conversion row. Grown memory is written once, so
// that its pages are faulted in when amx_gemm_plan grows it rather than inside a timed step.
struct Workspace {
  std::unique_ptr<void, AllocatorFree> activations, worker;
  size_t activation_bytes = 0, worker_bytes = 0;
  static void grow(std::unique_ptr<void, AllocatorFree>& buf, size_t& have, size_t want) {
    if (want <= have) return;
    buf.reset();
    buf.reset(aligned_alloc_bytes(want));
    std::memset(buf.get(), 0, want);
    have = want;
  }
  // Grows the packed activations and the workers' scratch to at least these sizes.
  void reserve(size_t activation_bytes_wanted, size_t worker_bytes_wanted) {
    grow(activations, activation_bytes, activation_bytes_wanted);
    grow(worker, worker_bytes, worker_bytes_wanted);
  }
};
Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// The tile configuration every product here uses (amx_tile_config.h).
using TileConfig = cpu::AmxTileConfig;
TileConfig tile_config() { return cpu::full_amx_tiles(); }

// The tile operations the GEMM uses, as two interchangeable policies: HardwareTiles issues the
// AMX instructions; EmulatedTiles carries out the same instructions in C++, so that everything
// around them (packing, blocking, passes, epilogue) is tested as the same code on CPUs without
// AMX (amx_gemm_emulated). Tile numbers are template arguments because the instructions encode
// them: GCC's intrinsics paste the number into the mnemonic, so each must be a literal.
#ifdef FLUXRT_AMX_X86
struct HardwareTiles {
  FLUXRT_AMX static void configure(const TileConfig& config) {
    // GCC's _tile_loadconfig names only the first 8 bytes of the config as its input; the barrier
    // makes the compiler write all 64 before the instruction reads them.
    __asm__ volatile("" : : "r"(&config) : "memory");
    _tile_loadconfig(&config);
  }
  FLUXRT_AMX static void release() { _tile_release(); }
  // tileloadd names no memory input either: the barrier orders it after the stores that filled a
  // and b (the packing), which are otherwise invisible to the compiler here.
  FLUXRT_AMX static void fence() { __asm__ volatile("" : : : "memory"); }
  template <int T>
  FLUXRT_AMX static void zero() {
    static_assert(T >= 0 && T < 4);
    if constexpr (T == 0) _tile_zero(0);
    if constexpr (T == 1) _tile_zero(1);
    if constexpr (T == 2) _tile_zero(2);
    if constexpr (T == 3) _tile_zero(3);
  }
  template <int T>
  FLUXRT_AMX static void load(const void* p, long stride) {
    static_assert(T >= 0 && T < 8);
    if constexpr (T == 0) _tile_loadd(0, p, stride);
    if constexpr (T == 1) _tile_loadd(1, p, stride);
    if constexpr (T == 2) _tile_loadd(2, p, stride);
    if constexpr (T == 3) _tile_loadd(3, p, stride);
    if constexpr (T == 4) _tile_loadd(4, p, stride);
    if constexpr (T == 5) _tile_loadd(5, p, stride);
    if constexpr (T == 6) _tile_loadd(6, p, stride);
    if constexpr (T == 7) _tile_loadd(7, p, stride);
  }
  template <int T>
  FLUXRT_AMX static void store(void* p, long stride) {
    static_assert(T >= 0 && T < 4);
    if constexpr (T == 0) _tile_stored(0, p, stride);
    if constexpr (T == 1) _tile_stored(1, p, stride);
    if constexpr (T == 2) _tile_stored(2, p, stride);
    if constexpr (T == 3) _tile_stored(3, p, stride);
  }
  // C (f32 16 x 16) += A (bf16 16 x 32) B (bf16 pairs 16 x 2 x 16): the four products used.
  template <int C, int A, int B>
  FLUXRT_AMX static void dot() {
    static_assert((C == 0 && A == 4 && B == 6) || (C == 1 && A == 4 && B == 7) ||
                  (C == 2 && A == 5 && B == 6) || (C == 3 && A == 5 && B == 7));
    if constexpr (C == 0) _tile_dpbf16ps(0, 4, 6);
    if constexpr (C == 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (C == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (C == 3) _tile_dpbf16ps(3, 5, 7);
  }
};
#endif  // FLUXRT_AMX_X86

struct EmulatedTiles {
  // One thread's tile unit: 8 tiles of 16 rows x 64 bytes, usable between configure and release.
  struct Unit {
    alignas(64) unsigned char tile[8][16][64];
    bool configured = false;
  };
  static Unit& unit() {
    thread_local Unit u;
    return u;
  }
  static unsigned char (&tile(int t))[16][64] {
    FLUXRT_CHECK(unit().configured, ErrorCode::Internal, "[linear] emulated AMX tile used unconfigured");
    return unit().tile[t];
  }
  static void configure(const TileConfig& config) {
    for (int t = 0; t < 8; ++t)
      FLUXRT_CHECK(config.palette == 1 && config.rows[t] == 16 && config.bytes_per_row[t] == 64,
                   ErrorCode::Internal,
                   "[linear] emulated AMX: only the 16 x 64-byte configuration is modelled");
    unit().configured = true;
  }
  static void release() { unit().configured = false; }
  static void fence() {}
  template <int T>
  static void zero() {
    std::memset(tile(T), 0, sizeof(tile(T)));
  }
  template <int T>
  static void load(const void* p, long stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(tile(T)[r], static_cast<const char*>(p) + r * stride, 64);
  }
  template <int T>
  static void store(void* p, long stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(p) + r * stride, tile(T)[r], 64);
  }
  // TDPBF16PS as the Intel SDM states it: for each row m of C and each pair row k of B, in k
  // order, c[m][n] += a[m][2k] * b[k][2n], then += a[m][2k+1] * b[k][2n+1], each in f32 with
  // round to nearest even (bf16 products are exact in f32). The hardware also flushes denormal
  // inputs and results to zero, which this does not model.
  template <int C, int A, int B>
  static void dot() {
    auto& c = tile(C);
    const auto& a = tile(A);
    const auto& b = tile(B);
    const auto bf16 = [](const unsigned char* row, int i) {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, sizeof(h));
      return bf16_to_f32(h);
    };
    for (int m = 0; m < 16; ++m) {
      float acc[16];
      std::memcpy(acc, c[m], sizeof(acc));
      for (int k = 0; k < 16; ++k) {
        const float a0 = bf16(a[m], 2 * k), a1 = bf16(a[m], 2 * k + 1);
        for (int n = 0; n < 16; ++n) {
          acc[n] += a0 * bf16(b[k], 2 * n);
          acc[n] += a1 * bf16(b[k], 2 * n + 1);
        }
      }
      std::memcpy(c[m], acc, sizeof(acc));
    }
  }
};

// c[32][32] (+)= A B over `steps` K steps: a is a packed 32-row activation block, b a packed
// weight panel, both advancing one step (two tiles) at a time; c is f32 with a row stride of
// ldc floats. Tiles 0-3 hold c, 4-5 the A tiles, 6-7 the B tiles.
template <class Tiles>
FLUXRT_AMX_OR_PLAIN void panel_product(const uint16_t* a, const uint16_t* b, int64_t steps, float* c,
                                       int64_t ldc, bool accumulate) {
  const long stride = static_cast<long>(ldc * sizeof(float));
  Tiles::fence();
  if (accumulate) {
    Tiles::template load<0>(c, stride);
    Tiles::template load<1>(c + 16, stride);
    Tiles::template load<2>(c + 16 * ldc, stride);
    Tiles::template load<3>(c + 16 * ldc + 16, stride);
  } else {
    Tiles::template zero<0>();
    Tiles::template zero<1>();
    Tiles::template zero<2>();
    Tiles::template zero<3>();
  }
  for (int64_t s = 0; s < steps; ++s) {
    Tiles::template load<4>(a, 64);
    Tiles::template load<6>(b, 64);
    Tiles::template load<5>(a + kTileElements, 64);
    Tiles::template load<7>(b + kTileElements, 64);
    Tiles::template dot<0, 4, 6>();
    Tiles::template dot<1, 4, 7>();
    Tiles::template dot<2, 5, 6>();
    Tiles::template dot<3, 5, 7>();
    a += kStepElements;
    b += kStepElements;
  }
  Tiles::template store<0>(c, stride);
  Tiles::template store<1>(c + 16, stride);
  Tiles::template store<2>(c + 16 * ldc, stride);
  Tiles::template store<3>(c + 16 * ldc + 16, stride);
}

#ifdef FLUXRT_AMX_X86
bool tiles_granted() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  if (!amx_bf16 || !amx_tile) return false;
  // The OS must save the tile state (XCR0 bits 17 and 18, readable once OSXSAVE is set)...
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  // ...and Linux (5.16 on) hands its 8 KiB to a process only on request; the first tile
  // instruction without it is a SIGILL. oneDNN asks the same way; asking twice is harmless.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif  // FLUXRT_AMX_X86

// Packs rows [r0, r0 + 32) of x (zeros past m) as one activation block: dst[k step][2][16][32].
// `row` holds k_pad bf16 of scratch for rows that are not bf16 or whose K is off the step.
void pack_activation_block(const Tensor& x, int64_t r0, int64_t k_pad, uint16_t* dst, uint16_t* row) {
  const int64_t m = x.size(0), k = x.size(1), steps = k_pad / kAmxDepthStep;
  const size_t es = x.element_size();
  const auto* base = static_cast<const char*>(x.raw_data());
  for (int64_t r = 0; r < kBlockRows; ++r) {
    uint16_t* out = dst + (r / 16) * kTileElements + (r % 16) * kAmxDepthStep;
    const int64_t i = r0 + r;
    if (i >= m) {
      for (int64_t s = 0; s < steps; ++s) std::memset(out + s * kStepElements, 0, 64);
      continue;
    }
    const char* src = base + static_cast<size_t>(i * x.stride(0)) * es;
    const uint16_t* bf16 = reinterpret_cast<const uint16_t*>(src);
    if (x.dtype() != DType::BF16 || k != k_pad) {
      if (x.dtype() == DType::BF16)
        std::memcpy(row, src, static_cast<size_t>(k) * sizeof(uint16_t));
      else
        convert(src, x.dtype(), row, DType::BF16, static_cast<size_t>(k));
      std::fill(row + k, row + k_pad, uint16_t{0});
      bf16 = row;
    }
    for (int64_t s = 0; s < steps; ++s) std::memcpy(out + s * kStepElements, bf16 + s * kAmxDepthStep, 64);
  }
}

}  // namespace

AmxWeights pack_weights_amx(const Tensor& weight, const Tensor& bias) {
  FLUXRT_CHECK(weight.dim() == 2 && weight.dtype() == DType::BF16, ErrorCode::InvalidArgument,
               "[linear] the AMX GEMM packs bf16 [N, K] weights, got {} {}", dtype_name(weight.dtype()),
               weight.shape().str());
  AmxWeights p;
  p.n = weight.size(0);
  p.k = weight.size(1);
  p.k_pad = round_up(std::max<int64_t>(p.k, 1), kAmxDepthStep);
  p.panels = (p.n + kAmxPanelColumns - 1) / kAmxPanelColumns;
  p.buffer = allocate_shared(std::max<size_t>(p.bytes(), 64));
  auto* dst = static_cast<uint16_t*>(p.buffer.get());
  const auto* w = static_cast<const uint16_t*>(weight.raw_data());
  const int64_t s0 = weight.stride(0), s1 = weight.stride(1), n = p.n, k = p.k;
  const int64_t steps = p.k_pad / kAmxDepthStep;
  // Each B tile of a step is a 16 x 16 transpose of 32-bit words: word c of its row r is the pair
  // (k, k + 1) = (32s + 2r, 32s + 2r + 1) of column c. A contiguous weight row is read as words
  // (64 bytes per step per column); any other layout, or the odd last K, pair by pair.
  const bool word_rows = s1 == 1 && k % 2 == 0;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int64_t panel = 0; panel < p.panels; ++panel) {
    uint16_t* out = dst + panel * steps * kStepElements;
    for (int64_t col = 0; col < kAmxPanelColumns; ++col) {
      const int64_t j = panel * kAmxPanelColumns + col;
      uint16_t* tile_col = out + (col / 16) * kTileElements + 2 * (col % 16);
      if (word_rows && j < n) {
        const uint16_t* wrow = w + j * s0;
        for (int64_t kk = 0; kk < p.k_pad; kk += 2) {
          uint32_t pair = 0;
          if (kk < k) std::memcpy(&pair, wrow + kk, sizeof(pair));
          std::memcpy(tile_col + (kk / kAmxDepthStep) * kStepElements + (kk % kAmxDepthStep) / 2 * 32, &pair,
                      sizeof(pair));
        }
        continue;
      }
      for (int64_t kk = 0; kk < p.k_pad; kk += 2) {
        uint16_t* pair = tile_col + (kk / kAmxDepthStep) * kStepElements + (kk % kAmxDepthStep) / 2 * 32;
        pair[0] = j < n && kk < k ? w[j * s0 + kk * s1] : uint16_t{0};
        pair[1] = j < n && kk + 1 < k ? w[j * s0 + (kk + 1) * s1] : uint16_t{0};
      }
    }
  }
  if (bias.defined()) {
    const int64_t n_pad = p.panels * kAmxPanelColumns;
    p.bias = std::static_pointer_cast<float>(allocate_shared(static_cast<size_t>(n_pad) * sizeof(float)));
    padded_vector_f32(bias, n, n_pad, p.bias.get());
  }
  return p;
}

namespace {

// How a call of M rows is split and what scratch it needs (the run and the plan agree on it).
struct CallShape {
  int64_t task_rows = 0, row_tasks = 0, tasks = 0;
  size_t activation_bytes = 0, block_floats = 0, row_floats = 0, worker_stride = 0;
};

CallShape call_shape(int64_t m, const AmxWeights& w, int threads) {
  CallShape s;
  const int64_t m_pad = round_up(m, kBlockRows);
  // Tasks: column blocks of 256 (the last narrower) times row ranges of up to 512; ranges are
  // shortened (to whole 32-row blocks) until there are two tasks per thread.
  const int64_t column_tasks = (w.panels + kTaskPanels - 1) / kTaskPanels;
  s.task_rows = std::min(kTaskRows, m_pad);
  const int64_t want_row_tasks = (2 * threads + column_tasks - 1) / column_tasks;
  if (want_row_tasks > (m_pad + s.task_rows - 1) / s.task_rows)
    s.task_rows = std::max(kBlockRows, round_up((m_pad + want_row_tasks - 1) / want_row_tasks, kBlockRows));
  s.row_tasks = (m_pad + s.task_rows - 1) / s.task_rows;
  s.tasks = column_tasks * s.row_tasks;
  s.activation_bytes = static_cast<size_t>(m_pad * w.k_pad) * sizeof(uint16_t);
  // Each worker: its f32 block, an epilogue row, and a conversion row of k_pad bf16.
  s.block_floats = static_cast<size_t>(s.task_rows * kTaskColumns);
  s.row_floats = kTaskColumns + 16;
  const size_t worker_bytes =
      (s.block_floats + s.row_floats) * sizeof(float) + static_cast<size_t>(w.k_pad) * sizeof(uint16_t);
  s.worker_stride = static_cast<size_t>(round_up(static_cast<int64_t>(worker_bytes), 4096));
  return s;
}

// The GEMM, on either tile policy (see HardwareTiles).
template <class Tiles>
void amx_gemm_with(const Tensor& x, const AmxWeights& w, Activation act, const Tensor& residual,
                   const Tensor& gate, const Tensor& y) {
  FLUXRT_CHECK(x.dim() == 2 && x.size(1) == w.k && x.stride(1) == 1, ErrorCode::InvalidArgument,
               "[linear] AMX GEMM: x {} for a weight of K = {}", x.shape().str(), w.k);
  const int64_t m = x.size(0), n = w.n;
  if (m == 0 || n == 0) return;
  const int64_t m_pad = round_up(m, kBlockRows), steps = w.k_pad / kAmxDepthStep;
  const int64_t n_pad = w.panels * kAmxPanelColumns;
  std::vector<float> gate_pad;
  if (gate.defined()) {
    gate_pad.resize(static_cast<size_t>(n_pad));
    padded_vector_f32(gate, n, n_pad, gate_pad.data());
  }
  const EpilogueCtx epilogue{w.bias.get(), gate.defined() ? gate_pad.data() : nullptr, act, &residual, &y};

  const int threads = num_threads();
  const CallShape shape = call_shape(m, w, threads);
  const int64_t task_rows = shape.task_rows, row_tasks = shape.row_tasks, tasks = shape.tasks;
  Workspace& ws = workspace();
  ws.reserve(shape.activation_bytes, shape.worker_stride * threads);
  auto* packed = static_cast<uint16_t*>(ws.activations.get());
  char* workers = static_cast<char*>(ws.worker.get());
  const size_t worker_stride = shape.worker_stride;
  const size_t block_floats = shape.block_floats, row_floats = shape.row_floats;
  const auto* weights = static_cast<const uint16_t*>(w.buffer.get());
  const TileConfig config = tile_config();

#pragma omp parallel num_threads(threads)
  {
    char* mine = workers + worker_stride * omp_get_thread_num();
    float* block = reinterpret_cast<float*>(mine);
    float* row = block + block_floats;
    auto* convert_row = reinterpret_cast<uint16_t*>(row + row_floats);
#pragma omp for schedule(static)
    for (int64_t rb = 0; rb < m_pad / kBlockRows; ++rb)
      pack_activation_block(x, rb * kBlockRows, w.k_pad, packed + rb * kBlockRows * w.k_pad, convert_row);
    // (implicit barrier: every block is packed before any task reads it)
    Tiles::configure(config);
    // Tasks in column-major order: the threads share one weight block's passes at a time.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t panel0 = (t / row_tasks) * kTaskPanels, i0 = (t % row_tasks) * task_rows;
      const int64_t panels = std::min(kTaskPanels, w.panels - panel0);
      const int64_t rows = std::min(task_rows, m_pad - i0);
      const int64_t j0 = panel0 * kAmxPanelColumns, columns = std::min(panels * kAmxPanelColumns, n - j0);
      for (int64_t k0 = 0; k0 < w.k_pad; k0 += kPassDepth) {
        const int64_t pass_steps = std::min(kPassDepth, w.k_pad - k0) / kAmxDepthStep;
        const bool last_pass = k0 + kPassDepth >= w.k_pad;
        for (int64_t r = 0; r < rows; r += kBlockRows) {
          const uint16_t* a = packed + ((i0 + r) / kBlockRows * steps + k0 / kAmxDepthStep) * kStepElements;
          float* c = block + r * kTaskColumns;
          for (int64_t p = 0; p < panels; ++p) {
            const uint16_t* b = weights + ((panel0 + p) * steps + k0 / kAmxDepthStep) * kStepElements;
            panel_product<Tiles>(a, b, pass_steps, c + p * kAmxPanelColumns, kTaskColumns, k0 > 0);
          }
          const int64_t valid = std::min(kBlockRows, m - (i0 + r));
          if (last_pass && valid > 0)
            epilogue_block(epilogue, c, kTaskColumns, i0 + r, valid, j0, columns, row);
        }
      }
    }
    Tiles::release();
  }
}

#ifdef FLUXRT_AMX_X86
// Once per process, before the first use: one product with every part of the blocking that a
// small call reaches (two row blocks, a partial panel, odd K, bias and GELU) on the instructions
// and on the emulation. The instruction sequence was reviewed against the SDM and GCC's
// intrinsics and the rest tested through the emulation; should a CPU or hypervisor still
// disagree, bf16 linears keep oneDNN instead of drawing wrong images.
bool tile_unit_agrees() {
  const int64_t m = 40, k = 75, n = 48;
  const Tensor x = Tensor::empty({m, k}, DType::BF16), w = Tensor::empty({n, k}, DType::BF16);
  const Tensor bias = Tensor::empty({n}, DType::F32);
  uint32_t state = 12345;
  const auto next = [&state] {  // a small LCG: values in [-1, 1), bf16-exact
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int>(state >> 24) - 128) / 128.0f;
  };
  for (int64_t i = 0; i < m * k; ++i) x.data<uint16_t>()[i] = f32_to_bf16(next());
  for (int64_t i = 0; i < n * k; ++i) w.data<uint16_t>()[i] = f32_to_bf16(next() * 0.125f);
  for (int64_t i = 0; i < n; ++i) bias.data<float>()[i] = next();
  const AmxWeights packed = pack_weights_amx(w, bias);
  const Tensor hw = Tensor::empty({m, n}, DType::F32), emu = Tensor::empty({m, n}, DType::F32);
  amx_gemm_with<HardwareTiles>(x, packed, Activation::GeluTanh, Tensor(), Tensor(), hw);
  amx_gemm_with<EmulatedTiles>(x, packed, Activation::GeluTanh, Tensor(), Tensor(), emu);
  double worst = 0;
  for (int64_t i = 0; i < m * n; ++i)
    worst = std::max(worst, static_cast<double>(std::abs(hw.data<float>()[i] - emu.data<float>()[i])));
  if (worst <= 1e-4) return true;
  FLUXRT_LOG_WARN(
      "[linear] the AMX tile unit disagrees with its emulation here (max difference {:.3g}); "
      "bf16 linears use oneDNN",
      worst);
  return false;
}
#endif

}  // namespace

bool amx_gemm_supported() {
#ifdef FLUXRT_AMX_X86
  static const bool ok = tiles_granted() && tile_unit_agrees();
  return ok;
#else
  return false;
#endif
}

void amx_gemm(const Tensor& x, const AmxWeights& w, Activation act, const Tensor& residual,
              const Tensor& gate, const Tensor& y) {
#ifdef FLUXRT_AMX_X86
  FLUXRT_CHECK(amx_gemm_supported(), ErrorCode::Unsupported,
               "[linear] the AMX GEMM needs AMX-BF16 and the OS's tile state");
  amx_gemm_with<HardwareTiles>(x, w, act, residual, gate, y);
#else
  (void)x, (void)w, (void)act, (void)residual, (void)gate, (void)y;
  fail(ErrorCode::Unsupported, "[linear] the AMX GEMM needs an x86-64 Linux machine");
#endif
}

void amx_gemm_plan(int64_t m, const AmxWeights& w) {
  if (m <= 0 || w.n == 0) return;
  const int threads = num_threads();
  const CallShape shape = call_shape(m, w, threads);
  workspace().reserve(shape.activation_bytes, shape.worker_stride * threads);
}

void amx_gemm_emulated(const Tensor& x, const AmxWeights& w, Activation act, const Tensor& residual,
                       const Tensor& gate, const Tensor& y) {
  amx_gemm_with<EmulatedTiles>(x, w, act, residual, gate, y);
}

}  // namespace fluxrt::backend::gemm
