#pragma once
// Reference kernels (the oracle): plain loops over any strides, arithmetic in f64, one rounding to
// the output dtype per stored element. Slow by design; never used on the hot path.
#include "backend/args/elementwise.h"
#include "backend/args/norm.h"
#include "backend/args/vae_ops.h"

namespace fluxrt::backend::ref {

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
void channel_norm(const ChannelNormArgs& a);

// f64 -> storage dtype with a single correct rounding (used by the kernels above and by tests).
double round_to(double v, DType dtype);

}  // namespace fluxrt::backend::ref
