#pragma once
// FLUX.1-dev / FLUX.1-schnell text-to-image and image-to-image, step for step what diffusers 0.42.1
// FluxPipeline.__call__ and FluxImg2ImgPipeline.__call__ do (flux-reference.md section 5):
//   prompts -> CLIP-L pooled embedding (77 tokens) + T5 embeddings (max_sequence_length, padded
//   rows kept), repeated per image; text ids zeros [L, 3];
//   noise torch.randn [B, 16, 2*(H/(2f)), 2*(W/(2f))] (f = the VAE's vae_scale_factor,
//   2 ** (levels - 1), 8 for the released VAE) on one CPU generator seeded with the request seed,
//   in the prompt dtype, 2x2-packed to [B, (H/(2f))*(W/(2f)), 64] with ids (0, i, j);
//   flux1_schedule (dynamic shift for dev, none for schnell); the distilled guidance value fed to
//   the transformer (dev only); true CFG with the negative prompt when true_cfg_scale > 1; Euler;
//   unpack, z / 0.3611 + 0.1159, VAE decode, 8-bit conversion.
// img2img (request.init_image): the image resized to the output size (PIL Lanczos), scaled to
// [-1, 1], VAE-encoded with a posterior SAMPLE drawn from the same generator (before the noise, as
// diffusers' retrieve_latents), (z - shift) * scale, the schedule trimmed by strength
// (t_start = int(N - min(N * strength, N))), and noised with sigma_{t_start} (scale_noise).
// With a mask: FluxInpaintPipeline (the kept region put back after every step, img2img.h); on a
// FluxFillPipeline folder (kind() is flux1_fill_kind()) FluxFillPipeline instead, the masked image
// and the mask concatenated to the transformer's input (flux1_fill.h).
// On a FluxKontextPipeline folder (flux1_kontext_kind()): the request's reference image appended
// as tokens with their own ids (flux1_kontext.h).
//
// It takes the request / result / options types every pipeline takes (pipelines/pipeline.h)
// and records the profiler span names of pipelines/spans.h, so the CLI and the benchmarks drive both the
// same way; inside kSpanTextEncoding it also records CLIP-L and T5-XXL apart (kSpanTextEncodingClip / T5).
// Fields that mean nothing for the model (reference_images but on Kontext) are refused by
// plan_request.
//
//   auto pipe = Flux1Pipeline::load("models/flux1-schnell", {});
//   GenerateRequest req; req.prompts = {"a red circle"}; req.seed = 7;
//   GenerateResult out = pipe->generate(req);
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "io/image.h"
#include "models/flux/flux1_config.h"
#include "pipelines/noise.h"
#include "pipelines/pipeline.h"
#include "pipelines/schedule.h"

namespace fluxrt::pipelines {

// What the folder says about itself: the defaults a request falls back to. Values are diffusers'
// __call__ defaults except where a variant is meant to run otherwise (schnell: 4 steps, 256 T5
// tokens, guidance unused), as the model cards and BFL's reference code run them.
struct Flux1ModelDefaults {
  bool guidance_distilled = true;       // dev: the transformer has a guidance embedding
  int num_steps = 28;                   // FluxPipeline's default; schnell: 4
  float guidance_scale = 3.5f;          // FluxPipeline's default (dev); schnell: unused
  float img2img_guidance_scale = 7.0f;  // FluxImg2ImgPipeline's default (dev)
  float img2img_strength = 0.6f;        // FluxImg2ImgPipeline's default
  int width = 1024;                     // diffusers' default_sample_size 128 x vae_scale_factor
  int height = 1024;
  int max_sequence_length = 512;  // schnell: 256
};

class Flux1Pipeline final : public Pipeline {
 public:
  // A diffusers FluxPipeline, FluxFillPipeline or FluxKontextPipeline folder (model_index.json, transformer/,
  // text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/, vae/, scheduler/). With options.low_memory
  // nothing is loaded here: each generate() loads the text encoders, frees them, then the transformer (bf16
  // weights used in place from the mapping), then the VAE.
  static std::unique_ptr<Flux1Pipeline> load(const std::filesystem::path& model_root,
                                             const PipelineOptions& options);
  // Random weights of a variant's real shapes and no weight files (benchmarks): "flux.1-dev",
  // "flux.1-schnell", or "flux.1-tiny" (the tiny test folders' shapes, a dev with guidance, for
  // smoke tests). The real tokenizers are still needed: `clip_tokenizer_dir` (tokenizer.json or
  // vocab.json + merges.txt) and `t5_tokenizer_dir` (spiece.model or tokenizer.json).
  static std::unique_ptr<Flux1Pipeline> synthetic(const std::string& variant,
                                                  const std::filesystem::path& clip_tokenizer_dir,
                                                  const std::filesystem::path& t5_tokenizer_dir,
                                                  const PipelineOptions& options, uint64_t seed = 42);
  ~Flux1Pipeline() override;

  const PipelineKind& kind() const override;
  const ModelFacts& facts() const override;
  using Pipeline::generate;
  GenerateResult generate(const std::vector<PlannedRequest>& batch, const CallContext& call) override;
  // PipelineKind::describe and ::plan of FLUX.1.
  static ModelFacts describe(const std::filesystem::path& model_root, const PipelineOptions& options);
  static fluxrt::RequestPlan plan_for(const fluxrt::GenerateRequest& request, const ModelFacts& facts);

  const Flux1ModelDefaults& defaults() const;
  const models::Flux1Config& transformer_config() const;
  const PipelineOptions& options() const override;
  // diffusers' vae_scale_factor, 2 ** (len(vae.config.block_out_channels) - 1): 8 for FLUX.1's VAE.
  int vae_scale_factor() const;
  // InvalidArgument (one line) when a size is not a positive multiple of 2 x vae_scale_factor,
  // OutOfMemory when the activations of a batch plus memory.weight_bytes (the weights resident at
  // the same time) would not fit in the RAM (memory.ram_bytes, default the machine's).
  static void validate_size(int width, int height, int batch, int vae_scale_factor = 8,
                            const MemoryCheck& memory = {});
  // The weights this pipeline keeps resident (from the checkpoint headers; 0 for synthetic ones).
  const ResidentWeights& resident_weights() const;

  struct Impl;

 private:
  explicit Flux1Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// FluxPipeline._pack_latents: [B, C, h, w] (h, w even) -> [B, (h/2)*(w/2), 4C], each token the
// 2x2 patch in (c, dy, dx) order.
Tensor flux1_pack_latents(const Tensor& latents);
// FluxPipeline._unpack_latents: [B, (h/2)*(w/2), 4C] -> [B, C, h, w].
Tensor flux1_unpack_latents(const Tensor& tokens, int64_t h, int64_t w);
// _prepare_latent_image_ids: [(h/2)*(w/2), 3] i64 rows (first, i, j) in raster order (h, w: latent
// size); `first` is 0 for the generated image, 1 for Kontext's image to edit.
Tensor flux1_image_ids(int64_t h, int64_t w, int64_t first = 0);
// text ids: zeros [length, 3] i64.
Tensor flux1_text_ids(int64_t length);

// FluxImg2ImgPipeline.get_timesteps: the first schedule index used (t_start); the steps run are
// num_steps - t_start. InvalidArgument when strength is outside [0, 1] or leaves no step.
int flux1_img2img_start_index(int num_steps, float strength);
// FlowMatchEulerDiscreteScheduler.scale_noise at a sigma: sigma * noise + (1 - sigma) * sample with
// sigma and every operation rounded to the sample's dtype (f32, bf16 or f16), as torch does.
Tensor flux1_scale_noise(const Tensor& sample, const Tensor& noise, float sigma);
// DiagonalGaussianDistribution(moments).sample(generator): mean + exp(0.5 * clamp(logvar, -30, 20))
// * randn(mean.shape) in the moments' dtype; moments [B, 2C, h, w]. Advances the generator.
Tensor flux1_sample_posterior(const Tensor& moments, TorchGenerator& generator);
// VaeImageProcessor.preprocess of one RGB 8-bit image at (width, height): PIL Lanczos resize when
// the size differs, x / 255 * 2 - 1 in f32. Returns [1, 3, height, width] f32.
Tensor flux1_preprocess_init_image(const io::Image& image, int width, int height);

}  // namespace fluxrt::pipelines
