#pragma once
// CPU kernels (Highway SIMD with runtime dispatch + OpenMP over rows). Inputs and outputs share a
// storage dtype (f32, bf16 or f16; the ops layer converts otherwise); arithmetic and statistics
// are f32; bf16/f16 are widened on load and rounded to nearest even on store.
#include "backend/args/elementwise.h"
#include "backend/args/norm.h"
#include "backend/args/vae_ops.h"

namespace fluxrt::backend::cpu {

void unary(const UnaryArgs& a);
void binary(const BinaryArgs& a);
void glu(const GluArgs& a);
void gated_residual(const GatedResidualArgs& a);
void softmax(const SoftmaxArgs& a);
void embedding(const EmbeddingArgs& a);

void adaln_modulate(const AdaLnArgs& a);
void layer_norm(const LayerNormArgs& a);
void rms_norm(const RmsNormArgs& a);

void group_norm(const GroupNormArgs& a);
void upsample_nearest_2x(const Upsample2xArgs& a);
// The two above on channels-last x and y (cpu_vae_channels_last.cpp).
void group_norm_channels_last(const GroupNormArgs& a);
void upsample_nearest_2x_channels_last(const Upsample2xArgs& a);
void channel_norm(const ChannelNormArgs& a);

}  // namespace fluxrt::backend::cpu
