#pragma once
// One table of kernel entry points per backend (DESIGN.md section 2). Each slot takes a plain
// <Op>Args struct of tensor views and scalars; a nullptr slot means "not implemented here" and the
// ops layer runs its composed fallback (or throws under FLUXRT_STRICT_KERNELS=1). The full list of
// ops is this one file, so it is greppable and reviewed as a unit.
//
// Output tensors in the Args are preallocated by the ops layer, on the same device as the inputs.
// Kernels validate nothing that the ops layer already checked (they may FLUXRT_DCHECK).
#include <memory>

#include "backend/args/attention.h"
#include "backend/args/conv.h"
#include "backend/args/elementwise.h"
#include "backend/args/linear.h"
#include "backend/args/norm.h"
#include "backend/args/tile_blend.h"
#include "backend/args/vae_ops.h"
#include "core/device.h"

namespace fluxrt::backend {

struct KernelTable {
  const char* name = "";  // "ref", "cpu", "cuda": shown in logs and test names

  // --- big ops (GEMM, convolution, attention; see args/linear.h, conv.h, attention.h) ---
  std::shared_ptr<PreparedLinear> (*prepare_linear)(const Tensor& weight, const Tensor& bias) = nullptr;
  void (*linear)(const LinearArgs&) = nullptr;
  // A weight kept quantized (core/quant.h); null: ops dequantizes it to bf16 and uses prepare_linear.
  std::shared_ptr<PreparedLinear> (*prepare_linear_quantized)(const QuantizedMatrix& weight,
                                                              const Tensor& bias) = nullptr;
  // LinearFormat::Int8 (W8A8) preparations of a dense and of a quantized weight; null where the
  // backend has no int8 GEMM (ops then refuses the format). The quantized one takes the types of
  // a byte per weight or more (Q8_0, fp8) to int8 and prepares the smaller ones as
  // prepare_linear_quantized does, since int8 would make them larger.
  std::shared_ptr<PreparedLinear> (*prepare_linear_int8)(const Tensor& weight, const Tensor& bias) = nullptr;
  std::shared_ptr<PreparedLinear> (*prepare_linear_quantized_int8)(const QuantizedMatrix& weight,
                                                                   const Tensor& bias) = nullptr;
  std::shared_ptr<PreparedConv2d> (*prepare_conv2d)(const Tensor& weight, const Tensor& bias) = nullptr;
  void (*conv2d)(const Conv2dArgs&) = nullptr;
  void (*attention)(const AttentionArgs&) = nullptr;

  // --- element-wise (args/elementwise.h) ---
  void (*unary)(const UnaryArgs&) = nullptr;
  void (*binary)(const BinaryArgs&) = nullptr;
  void (*glu)(const GluArgs&) = nullptr;
  void (*gated_residual)(const GatedResidualArgs&) = nullptr;
  void (*softmax)(const SoftmaxArgs&) = nullptr;
  void (*embedding)(const EmbeddingArgs&) = nullptr;

  // --- normalisation (args/norm.h) ---
  void (*adaln_modulate)(const AdaLnArgs&) = nullptr;
  void (*layer_norm)(const LayerNormArgs&) = nullptr;
  void (*rms_norm)(const RmsNormArgs&) = nullptr;

  // --- VAE (args/vae_ops.h) ---
  void (*group_norm)(const GroupNormArgs&) = nullptr;
  void (*upsample_nearest_2x)(const Upsample2xArgs&) = nullptr;
  // The same two on channels-last x and y (Tensor::is_channels_last). A backend that has the
  // GroupNorm runs the VAE channels-last (ops::prefers_channels_last); without it the ops layer
  // goes through NCHW copies.
  void (*group_norm_channels_last)(const GroupNormArgs&) = nullptr;
  void (*upsample_nearest_2x_channels_last)(const Upsample2xArgs&) = nullptr;
  void (*channel_norm)(const ChannelNormArgs&) = nullptr;
  // Tiled passes: blend a tile into an f32 accumulator, normalise (args/tile_blend.h).
  void (*tile_blend)(const TileBlendArgs&) = nullptr;
  void (*tile_normalize)(const TileNormalizeArgs&) = nullptr;

  // A table of the same backend whose kernels compute nothing and only do the one-time work of
  // their call's shapes (primitive creation, weight reorders for a new layout, scratch growth):
  // a forward run under it (ops::ScopedKernelPlanning) before the first timed step takes that
  // work out of the step. Its outputs are left unwritten. Null: the backend needs none.
  const KernelTable* planning = nullptr;
};

// Each backend fills its table once (src/backend/<name>/<name>_kernels.cpp).
void fill_ref_kernels(KernelTable& table);
void fill_cpu_kernels(KernelTable& table);

// The filled tables, built on first use (thread-safe static initialisation).
const KernelTable& ref_kernels();
const KernelTable& cpu_kernels();
const KernelTable& cpu_planning_kernels();  // cpu_kernels().planning

// The table of the backend that owns `device`: cpu_kernels() for the CPU, cuda::cuda_kernels() for
// CUDA (which throws Unsupported when built without CUDA, Device when the device is absent).
// Defined in the ops layer, the lowest layer that links every backend.
const KernelTable& kernels_for(Device device);

}  // namespace fluxrt::backend
