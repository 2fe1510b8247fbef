#pragma once
// A bf16 GEMM on the AMX tile unit (Intel Sapphire Rapids and later): y = epilogue(x @ W^T).
//
// Why it exists: on the AMX Xeon, oneDNN 2.6's brgemm reaches ~1.4 TFLOP/s on two cores where the
// tile unit itself multiplies at ~3 TFLOP/s per core from registers; with the weights streaming
// from memory, as in a model step, its wide and shallow-M layers fell to 60-75% of that, and
// neither column groups nor K slices recovered it (docs/cpu.md, "The AMX GEMM").
//
// Layout: the weights are packed once into panels of 32 output columns, each [K/32][2][16][32]
// bf16: K step s of the panel is two B tiles (columns 0-15, 16-31) in the tile unit's pair
// layout (row r holds k = 32s + 2r and 32s + 2r + 1 of each column), 1 KiB each, so a panel's
// tiles follow one another in memory. Same bytes as the checkpoint, plus K and N padded to 32.
// The activations are packed per call the same way in 32-row blocks (A tiles of 16 rows x 32
// k), converted to bf16 when they are not, which costs O(M*K) against the O(M*N*K) products.
//
// Blocking: a task owns up to 512 rows x 256 columns of y, in an f32 block (512 KiB, L2). It
// walks K in passes of 512; in a pass, each 32-row block's 32 KiB of activations stay in L1 while
// it runs the task's 8 panels (their 256 KiB for the pass stay in L2 across the row blocks); each
// panel product keeps a 32 x 32 f32 result in four C tiles (2 A + 2 B + 4 C = the 8 tiles). After
// the last pass, each row block goes through the shared epilogue (gemm_epilogue.h) while hot.
#include <cstdint>
#include <memory>

#include "backend/args/linear.h"
#include "core/tensor.h"

namespace fluxrt::backend::gemm {

inline constexpr int64_t kAmxPanelColumns = 32;  // output columns per packed weight panel
inline constexpr int64_t kAmxDepthStep = 32;     // K per tile product (bf16 pairs x 16)

// True when the CPU has AMX-TILE and AMX-BF16, the OS enables the tile state, the process was
// granted it (Linux asks for it once per process: arch_prctl ARCH_REQ_XCOMP_PERM), and a small
// product on the tile unit agrees with the emulation below (else a warning, and false). Checked
// once; false on other systems.
bool amx_gemm_supported();

struct AmxWeights {
  int64_t n = 0, k = 0;           // W is [n, k]
  int64_t k_pad = 0, panels = 0;  // k rounded up to 32; ceil(n / 32) panels
  std::shared_ptr<void> buffer;   // [panels][k_pad / 32][2][16][32] bf16
  std::shared_ptr<float> bias;    // [panels * 32] f32 (zero past n), or null
  size_t bytes() const { return static_cast<size_t>(panels * kAmxPanelColumns * k_pad) * sizeof(uint16_t); }
};

// Packs a bf16 W [N, K] (any strides) and the optional bias [N] (any dtype).
AmxWeights pack_weights_amx(const Tensor& weight, const Tensor& bias);

// y = epilogue(x @ W^T) for x [M, K] (stride(1) == 1; bf16, f32 or f16, rounded to bf16 as
// oneDNN's bf16 matmul rounds it), y [M, N] (rows strided; f32, bf16 or f16); activation,
// residual and gate as in LinearArgs (the residual may alias y).
void amx_gemm(const Tensor& x, const AmxWeights& w, Activation act, const Tensor& residual,
              const Tensor& gate, const Tensor& y);

// Grows the calling thread's scratch to what amx_gemm needs for M rows of x against w, and
// faults it in, so that the first timed call allocates nothing (the planning pass calls it).
void amx_gemm_plan(int64_t m, const AmxWeights& w);

// The same GEMM with each tile instruction carried out in C++ (slowly) instead of on the tile
// unit: everything else is the code amx_gemm runs, so the conformance tests check the packing,
// blocking and epilogue on any CPU with AVX2 (the epilogue's ISA), and on an AMX CPU that the
// emulation agrees with the instructions.
void amx_gemm_emulated(const Tensor& x, const AmxWeights& w, Activation act, const Tensor& residual,
                       const Tensor& gate, const Tensor& y);

}  // namespace fluxrt::backend::gemm
