#pragma once
// CPU 2-D convolution through oneDNN, NCHW tensors in and out.
//
// oneDNN's fast convolutions want channel-blocked layouts (nChw8c on AVX2, nChw16c on AVX-512);
// the input is reordered into that layout per call and the output reordered back, which costs two
// memory passes against 9*Cin MACs per output (bench_conv prints the split). Weights are
// reordered once at prepare time, and once more for each other layout a call shape's kernel
// wants (oneDNN chooses it per shape: layout `any`). Compute is bf16 where the CPU has native bf16 and the
// weights are bf16, f32 otherwise (oneDNN 2.6 has no bf16 convolution below avx512_core). Stride 2 with the
// VAE's asymmetric (0, 1, 0, 1) padding maps to oneDNN's padding_l/padding_r. The nearest 2x upsample is a
// broadcast copy into the (already blocked) input of the convolution.
#include <memory>
#include <string>

#include "backend/args/conv.h"

namespace fluxrt::backend {

std::shared_ptr<PreparedConv2d> prepare_conv2d_cpu(const Tensor& weight, const Tensor& bias);
void conv2d_cpu(const Conv2dArgs& args);

// The oneDNN implementation (impl_info_str, e.g. "brgconv:avx512_core_amx_bf16") that
// conv2d_cpu(args) would run; makes and keeps its primitive, reads and writes no tensor data.
std::string conv2d_cpu_kernel_for(const Conv2dArgs& args);

// "onednn conv f32 (jit:avx2)" for logs and benchmark tables (after at least one call).
std::string describe_conv2d_cpu(const PreparedConv2d& prepared);

// Per-phase timings of the last conv2d_cpu call on this thread (seconds), for bench_conv.
struct Conv2dPhaseTimes {
  double reorder_in = 0, conv = 0, reorder_out = 0;
};
Conv2dPhaseTimes last_conv2d_cpu_phases();

}  // namespace fluxrt::backend
