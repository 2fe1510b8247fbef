// FLUX.1 Fill's condition (flux1_fill.h): FluxFillPipeline.prepare_mask_latents and the masked
// image of its __call__ step 6.
#include "pipelines/flux1/flux1_fill.h"

#include "core/error.h"
#include "models/weight_binder.h"
#include "ops/elementwise.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/img2img.h"

namespace fluxrt::pipelines {

Tensor flux1_fill_mask_tokens(const std::vector<float>& mask, int width, int height, int vae_scale_factor) {
  const int64_t f = vae_scale_factor;
  FLUXRT_CHECK(f > 0 && width % (2 * f) == 0 && height % (2 * f) == 0 &&
                   mask.size() == static_cast<size_t>(width) * height,
               ErrorCode::Internal, "fill mask: {} values for {}x{} at VAE factor {}", mask.size(), width,
               height, f);
  // latent size h x w; tokens are its 2x2 patches
  const int64_t h = height / f, w = width / f, per_pixel = f * f, channels = 4 * per_pixel;
  Tensor out = Tensor::empty({1, (h / 2) * (w / 2), channels}, DType::F32);
  float* p = out.data<float>();
  for (int64_t i = 0; i < h / 2; ++i)
    for (int64_t j = 0; j < w / 2; ++j) {
      float* token = p + (i * (w / 2) + j) * channels;
      // channel c = dy * f + dx: the pixel inside the latent pixel; (py, px): the latent pixel inside
      // the token's 2x2 patch; _pack_latents orders a token's channels (c, py, px).
      for (int64_t c = 0; c < per_pixel; ++c)
        for (int64_t py = 0; py < 2; ++py)
          for (int64_t px = 0; px < 2; ++px) {
            const int64_t row = (2 * i + py) * f + c / f, col = (2 * j + px) * f + c % f;
            token[c * 4 + py * 2 + px] = mask[static_cast<size_t>(row * width + col)];
          }
    }
  return out;
}

Flux1FillCondition Flux1FillCondition::prepare(const Tensor& source_pixels, const io::Image& mask,
                                               int source_width, int source_height, int width, int height,
                                               int vae_scale_factor) {
  FLUXRT_CHECK(source_pixels.defined() && source_pixels.dtype() == DType::F32 &&
                   source_pixels.shape() == Shape({1, 3, height, width}),
               ErrorCode::Internal, "fill: the source pixels are {}, not [1, 3, {}, {}] f32",
               source_pixels.defined() ? source_pixels.shape().str() : "undefined", height, width);
  // mask_processor.preprocess(mask_image, height=height, width=width): [1, 1, H, W] in {0, 1}
  const std::vector<float> binary = binarise_inpaint_mask(mask, source_width, source_height, width, height);
  Flux1FillCondition out;
  // masked_image = init_image * (1 - mask_image), in f32 (both are)
  out.masked_pixels = Tensor::empty({1, 3, height, width}, DType::F32);
  const Tensor source = source_pixels.contiguous();
  const float* s = source.data<float>();
  float* m = out.masked_pixels.data<float>();
  const size_t plane = binary.size();
  for (size_t c = 0; c < 3; ++c)
    for (size_t i = 0; i < plane; ++i) m[c * plane + i] = s[c * plane + i] * (1.0f - binary[i]);
  out.mask_tokens = flux1_fill_mask_tokens(binary, width, height, vae_scale_factor);
  return out;
}

Tensor Flux1FillCondition::condition(const Tensor& masked_latents, int64_t batch, DType dtype) const {
  FLUXRT_CHECK(
      masked_latents.defined() && masked_latents.dim() == 4 && masked_latents.size(0) == 1 && batch >= 1,
      ErrorCode::Internal, "fill: masked image latents {} for {} images",
      masked_latents.defined() ? masked_latents.shape().str() : "undefined", batch);
  const Tensor packed = flux1_pack_latents(models::to_device(masked_latents, Device::cpu()).to(dtype));
  FLUXRT_CHECK(packed.size(1) == mask_tokens.size(1), ErrorCode::Internal,
               "fill: {} masked-image tokens, {} mask tokens", packed.size(1), mask_tokens.size(1));
  // torch.cat((masked_image_latents, mask), dim=-1), each repeated for the batch's images
  const Tensor one = ops::concat({packed, mask_tokens.to(dtype)}, 2);  // [1, N, 4C + 4 f^2]
  Shape shape = one.shape();
  shape[0] = batch;
  return models::to_device(one.expand(shape).contiguous(), masked_latents.device());
}

}  // namespace fluxrt::pipelines
