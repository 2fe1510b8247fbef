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
  t.group_norm_channels_last = cpu::group_norm_channels_last;
  t.upsample_nearest_2x_channels_last = cpu::upsample_nearest_2x_channels_last;
  t.channel_norm = cpu::channel_norm;
  t.tile_blend = cpu::tile_blend;
  t.tile_normalize = cpu::tile_normalize;
  // GEMM, convolution and attention live in their own files (linear_*, conv_*, attention_*).
  t.prepare_linear = prepare_linear_cpu;
  t.linear = linear_cpu;
  t.prepare_linear_quantized = prepare_linear_quantized_cpu;
  t.prepare_linear_int8 = prepare_linear_int8_cpu;
  t.prepare_linear_quantized_int8 = prepare_linear_quantized_int8_cpu;
  t.prepare_conv2d = prepare_conv2d_cpu;
  t.conv2d = conv2d_cpu;
  t.attention = static_cast<void (*)(const AttentionArgs&)>(cpu::attention);
}

const KernelTable& cpu_planning_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    fill_cpu_kernels(t);
    t.name = "cpu (planning)";
    // Weights are still prepared for real (a forward may prepare one on the fly); every compute
    // slot is a no-op except the two with per-shape one-time work.
    t.linear = plan_linear_cpu;
    t.attention = cpu::plan_attention;
    t.conv2d = [](const Conv2dArgs&) {};
    t.unary = [](const UnaryArgs&) {};
    t.binary = [](const BinaryArgs&) {};
    t.glu = [](const GluArgs&) {};
    t.gated_residual = [](const GatedResidualArgs&) {};
    t.softmax = [](const SoftmaxArgs&) {};
    t.embedding = [](const EmbeddingArgs&) {};
    t.adaln_modulate = [](const AdaLnArgs&) {};
    t.layer_norm = [](const LayerNormArgs&) {};
    t.rms_norm = [](const RmsNormArgs&) {};
    t.group_norm = [](const GroupNormArgs&) {};
    t.upsample_nearest_2x = [](const Upsample2xArgs&) {};
    t.group_norm_channels_last = [](const GroupNormArgs&) {};
    t.upsample_nearest_2x_channels_last = [](const Upsample2xArgs&) {};
    t.channel_norm = [](const ChannelNormArgs&) {};
    t.tile_blend = [](const TileBlendArgs&) {};
    t.tile_normalize = [](const TileNormalizeArgs&) {};
    return t;
  }();
  return table;
}

const KernelTable& cpu_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    fill_cpu_kernels(t);
    t.planning = &cpu_planning_kernels();
    return t;
  }();
  return table;
}

}  // namespace fluxrt::backend
