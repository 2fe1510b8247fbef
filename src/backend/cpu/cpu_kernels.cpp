// The CPU backend's kernel table: oneDNN for GEMM and convolution, Highway SIMD + OpenMP for the
// rest. A nullptr slot falls back to the ops layer's composed version.
#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/conv_cpu.h"
#include "backend/cpu/linear_cpu.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_tile_blend.h"
#include "backend/kernel_table.h"

namespace fluxrt::backend {

void fill_cpu_kernels(KernelTable& t) {
  t.name = "cpu";
  // Element-wise, norms and VAE ops (src/backend/cpu/cpu_*.cpp).
  t.unary = cpu::unary;
  t.binary = cpu::binary;
  t.glu = cpu::glu;
  t.gated_residual = cpu::gated_residual;
  t.softmax = cpu::softmax;
  t.embedding = cpu::embedding;
  t.adaln_modulate = cpu::adaln_modulate;
  t.layer_norm = cpu::layer_norm;
  t.rms_norm = cpu::rms_norm;
  t.group_norm = cpu::group_norm;
  t.upsample_nearest_2x = cpu::upsample_nearest_2x;
  t.channel_norm = cpu::channel_norm;
  t.tile_blend = cpu::tile_blend;
  t.tile_normalize = cpu::tile_normalize;
  // GEMM, convolution and attention live in their own files (linear_*, conv_*, attention_*).
  t.prepare_linear = prepare_linear_cpu;
  t.linear = linear_cpu;
  t.prepare_linear_quantized = prepare_linear_quantized_cpu;
  t.prepare_conv2d = prepare_conv2d_cpu;
  t.conv2d = conv2d_cpu;
  t.attention = static_cast<void (*)(const AttentionArgs&)>(cpu::attention);
}

const KernelTable& cpu_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    fill_cpu_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace fluxrt::backend
