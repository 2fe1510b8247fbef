#pragma once
// CPU linear on quantized weights (GGUF blocks, fp8): the weight stays in its bytes, so the
// resident model is the file's size. The packed GEMM dequantizes each Kc x 16 weight panel (with
// the Highway dequantization and 8x8 transposes) into an L1 buffer when a task reaches it and runs
// its micro-kernel and fused epilogue as for bf16 weights: dequantization is O(N*K) per Mc rows of
// x (96), against the GEMM's O(M*N*K), and no f32 copy of the weight is made. Where the CPU has
// bf16 matrix units, oneDNN's matmul runs on chunks of rows dequantized to bf16 instead.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/args/linear.h"
#include "core/quant.h"

namespace fluxrt::backend {

namespace onednn {
class MatmulLinear;
}

// Weight rows per chunk of the oneDNN path (3 MB of bf16 at K = 3072).
inline constexpr int64_t kOneDnnChunkRows = 512;

// oneDNN matmuls for chunks of kOneDnnChunkRows weight rows given per call, and for the last,
// shorter chunk (null when N is a multiple of the chunk), in one compute dtype.
struct OneDnnChunks {
  std::shared_ptr<onednn::MatmulLinear> chunk, tail;
};

struct QuantLinearCpu {
  QuantizedMatrix q;
  std::shared_ptr<float> bias;  // [N rounded up to 16] f32, or null
  // On CPUs with native bf16 matmul (AVX512_BF16, AMX), whose units the AVX2 kernel would leave
  // idle: per call, kOneDnnChunkRows weight rows at a time are dequantized and multiplied by
  // oneDNN's matmul with the weights in that plain layout. bf16 activations use `bf16` (rows
  // rounded to bf16, as a GPU's upload of the weight is), f32 activations `f32` (the f32 mode
  // stays f32). The same code runs in f32 where bf16 is not native (chosen with
  // FLUXRT_LINEAR_IMPL=onednn, as the tests do on AVX2 machines). Both empty: the packed GEMM.
  OneDnnChunks f32, bf16;
  bool onednn() const { return f32.chunk != nullptr; }
};

// Null when this CPU can run neither path (no AVX2, no JIT oneDNN matmul for plain weights): the
// caller then widens the weight. `onednn` asks for the oneDNN path (else the packed AVX2 GEMM).
std::shared_ptr<QuantLinearCpu> prepare_quant_linear_cpu(const QuantizedMatrix& q, const Tensor& bias,
                                                         bool onednn);
void quant_linear_cpu(const LinearArgs& args, const QuantLinearCpu& w);
// The oneDNN path's one-time work for a call like `args` (its chunk and tail matmuls' primitives
// and scratchpad), computing nothing; nothing for the packed path, which has none.
void plan_quant_linear_cpu(const LinearArgs& args, const QuantLinearCpu& w);
std::string describe_quant_linear_cpu(const QuantLinearCpu& w);

}  // namespace fluxrt::backend
