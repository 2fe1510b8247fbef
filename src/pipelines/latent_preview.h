#pragma once
// Cheap previews of images still being denoised (a server's partial images): the clean latents
// the current step predicts, x0 = x_t - sigma_t * v (flow matching: x_t = (1 - sigma) x0 +
// sigma noise, v = noise - x0), each VAE latent cell (a token is a 2x2 patch of them, packed as
// (channel, dy, dx) by both FLUX families) mapped to one colour by an affine map over its latent
// channels, and that grid scaled up to the image size. No VAE decode: a preview costs one small
// matrix product per latent cell.
//
// The map is not a table of constants for one model: it is fitted by least squares from the
// images this pipeline has finished (each cell's latent channels against the mean colour of the
// pixels it decoded to), so it fits whatever VAE the folder has. Until a first image has finished there
// is nothing to fit and previews are empty; every later image refines the fit.
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"

namespace fluxrt::pipelines {

// The side of the latent patch a token packs (2 x 2 in FLUX.1 and FLUX.2).
inline constexpr int64_t kPatch = 2;

class LatentPreviewer {
 public:
  // A finished batch: tokens [B, lh * lw, C] (the latents the VAE decoded, raster order over the
  // lh x lw token grid, C a multiple of kPatch^2) and its images [B, H, W, 3] uint8, H and W
  // multiples of kPatch * lh and kPatch * lw.
  void observe(const Tensor& tokens, const Tensor& images_u8, int64_t lh, int64_t lw);
  bool ready() const { return !weights_.empty(); }
  // Previews of x0 tokens [B, lh * lw, C] as RGB images of width x height (bilinear from the token
  // grid); empty when not ready() or when C is not the channel count the fit saw.
  std::vector<io::Image> preview(const Tensor& x0_tokens, int64_t lh, int64_t lw, int width,
                                 int height) const;

 private:
  void solve();

  int64_t channels_ = 0;  // latent channels per cell (C / kPatch^2)
  // Normal equations of the least-squares fit over features [latent, 1]: sum f f^T and sum f rgb^T.
  std::vector<double> gram_, cross_;
  double samples_ = 0;
  std::vector<float> weights_;  // [(C + 1), 3]: rgb = [latent, 1] . weights
};

// x0 = latents - sigma * v, in f32 on the host: what a preview maps to colour.
Tensor predicted_clean_latents(const Tensor& latents, const Tensor& velocity, float sigma);

}  // namespace fluxrt::pipelines
