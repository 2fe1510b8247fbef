// The reference backend's kernel table: naive loops that compute in f64 and round once to the
// output dtype. Every test compares the other backends against these.
#include "backend/kernel_table.h"
#include "backend/ref/ref_tile_blend.h"
#include "backend/ref/attention_ref.h"
#include "backend/ref/conv_ref.h"
#include "backend/ref/linear_ref.h"
#include "backend/ref/ref_ops.h"

namespace fluxrt::backend {

void fill_ref_kernels(KernelTable& t) {
  t.name = "ref";
  // Element-wise, norms and VAE ops (src/backend/ref/ref_*.cpp).
  t.unary = ref::unary;
  t.binary = ref::binary;
  t.glu = ref::glu;
  t.gated_residual = ref::gated_residual;
  t.softmax = ref::softmax;
  t.embedding = ref::embedding;
  t.adaln_modulate = ref::adaln_modulate;
  t.layer_norm = ref::layer_norm;
  t.rms_norm = ref::rms_norm;
  t.group_norm = ref::group_norm;
  t.upsample_nearest_2x = ref::upsample_nearest_2x;
  t.channel_norm = ref::channel_norm;
  t.tile_blend = ref::tile_blend;
  t.tile_normalize = ref::tile_normalize;
  // GEMM, convolution and attention live in their own files (linear_*, conv_*, attention_*).
  t.prepare_linear = prepare_linear_ref;
  t.linear = linear_ref;
  t.prepare_linear_quantized = prepare_linear_quantized_ref;
  t.prepare_conv2d = prepare_conv2d_ref;
  t.conv2d = conv2d_ref;
  t.attention = ref::attention;
}

const KernelTable& ref_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    fill_ref_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace fluxrt::backend
