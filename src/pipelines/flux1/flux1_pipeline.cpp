// Flux1Pipeline: diffusers 0.42.1 FluxPipeline.__call__ / FluxImg2ImgPipeline.__call__ step for
// step (the comments name the upstream step each block mirrors), with FluxInpaintPipeline's blend
// and FluxFillPipeline's condition (flux1_fill.h). Component loading lives in flux1_components.cpp.
#include "pipelines/flux1/flux1_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "models/weight_binder.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "pipelines/batch.h"
#include "pipelines/denoise.h"
#include "pipelines/flux1/flux1_components.h"
#include "pipelines/flux1/flux1_fill.h"
#include "pipelines/flux1/flux1_kontext.h"
#include "pipelines/img2img.h"
#include "pipelines/reference_image.h"
#include "pipelines/request_loras.h"
#include "pipelines/spans.h"
#include "pipelines/step_cache.h"
#include "pipelines/step_graph.h"

namespace fluxrt::pipelines {
namespace {

constexpr const char* kWho = "flux.1 pipeline";

// A FLUX.1 step for StepGraph: request inputs {T5 embeddings, CLIP pooled, their negatives
// (undefined without true CFG), guidance projection (undefined for schnell), RoPE cos, RoPE sin},
// step inputs {latents, timestep projection}; outputs the velocity, then the negative one.
StepGraph::Fn flux1_step(const models::Flux1Transformer& transformer) {
  return [&transformer](const std::vector<Tensor>& request, const std::vector<Tensor>& step) {
    const models::Flux1Transformer::Rope rope{request[5], request[6]};
    std::vector<Tensor> v{
        transformer.forward_on_device(step[0], request[0], request[1], step[1], request[4], rope)};
    if (request[2].defined())
      v.push_back(transformer.forward_on_device(step[0], request[2], request[3], step[1], request[4], rope));
    return v;
  };
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Packing, ids, img2img helpers (flux-reference.md 5.2)

Tensor flux1_pack_latents(const Tensor& latents) {
  FLUXRT_CHECK(latents.dim() == 4 && latents.size(2) % 2 == 0 && latents.size(3) % 2 == 0,
               ErrorCode::InvalidArgument, "flux1_pack_latents: expected [B, C, h, w] with h, w even, got {}",
               latents.defined() ? latents.shape().str() : "undefined");
  const int64_t b = latents.size(0), c = latents.size(1), h2 = latents.size(2) / 2, w2 = latents.size(3) / 2;
  return latents.contiguous()
      .view({b, c, h2, 2, w2, 2})
      .permute({0, 2, 4, 1, 3, 5})  // [B, h/2, w/2, C, 2, 2]
      .contiguous()
      .view({b, h2 * w2, c * 4});
}

Tensor flux1_unpack_latents(const Tensor& tokens, int64_t h, int64_t w) {
  FLUXRT_CHECK(h > 0 && w > 0 && h % 2 == 0 && w % 2 == 0 && tokens.dim() == 3 &&
                   tokens.size(1) == (h / 2) * (w / 2) && tokens.size(2) % 4 == 0,
               ErrorCode::InvalidArgument,
               "flux1_unpack_latents: expected [B, {}, 4C] for a {}x{} latent, got {}", (h / 2) * (w / 2), h,
               w, tokens.defined() ? tokens.shape().str() : "undefined");
  const int64_t b = tokens.size(0), c = tokens.size(2) / 4;
  return tokens.contiguous()
      .view({b, h / 2, w / 2, c, 2, 2})
      .permute({0, 3, 1, 4, 2, 5})  // [B, C, h/2, 2, w/2, 2]
      .contiguous()
      .view({b, c, h, w});
}

Tensor flux1_image_ids(int64_t h, int64_t w, int64_t first) {
  FLUXRT_CHECK(h > 0 && w > 0 && h % 2 == 0 && w % 2 == 0, ErrorCode::InvalidArgument,
               "flux1_image_ids: latent size {}x{} must be positive and even", h, w);
  const int64_t h2 = h / 2, w2 = w / 2;
  Tensor ids = Tensor::empty({h2 * w2, 3}, DType::I64);
  int64_t* p = ids.data<int64_t>();
  for (int64_t i = 0; i < h2; ++i)
    for (int64_t j = 0; j < w2; ++j, p += 3) {
      p[0] = first;
      p[1] = i;
      p[2] = j;
    }
  return ids;
}

Tensor flux1_text_ids(int64_t length) {
  FLUXRT_CHECK(length > 0, ErrorCode::InvalidArgument, "flux1_text_ids: length {}", length);
  return Tensor::zeros({length, 3}, DType::I64);
}

int flux1_img2img_start_index(int num_steps, float strength) {
  return img2img_start_index(num_steps, strength);
}

Tensor flux1_scale_noise(const Tensor& sample, const Tensor& noise, float sigma) {
  return scale_noise(sample, noise, sigma);
}

Tensor flux1_sample_posterior(const Tensor& moments, TorchGenerator& generator) {
  FLUXRT_CHECK(moments.defined() && moments.dim() == 4 && moments.size(1) % 2 == 0,
               ErrorCode::InvalidArgument, "posterior sample: moments must be [B, 2C, h, w], got {}",
               moments.defined() ? moments.shape().str() : "undefined");
  const DType dt = moments.dtype();
  check_elementwise_dtype(dt, "posterior sample");
  const int64_t b = moments.size(0), c = moments.size(1) / 2, hw = moments.size(2) * moments.size(3);
  const Tensor m = models::to_device(moments, Device::cpu()).to(DType::F32).contiguous();  // on the host
  // randn_tensor(mean.shape, generator, dtype=parameters.dtype)
  const Tensor eps =
      randn_tensor({b, c, moments.size(2), moments.size(3)}, dt, generator).to(DType::F32).contiguous();
  Tensor out = Tensor::empty({b, c, moments.size(2), moments.size(3)}, DType::F32);
  const float* mp = m.data<float>();
  const float* ep = eps.data<float>();
  float* op = out.data<float>();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ci = 0; ci < c; ++ci) {
      const float* mean = mp + (bi * 2 * c + ci) * hw;
      const float* logvar = mp + (bi * 2 * c + c + ci) * hw;
      const float* e = ep + (bi * c + ci) * hw;
      float* o = op + (bi * c + ci) * hw;
      for (int64_t k = 0; k < hw; ++k) {
        const float lv = std::clamp(logvar[k], -30.0f, 20.0f);
        const float stddev = round_to_dtype(std::exp(round_to_dtype(0.5f * lv, dt)), dt);
        o[k] = round_to_dtype(mean[k] + round_to_dtype(stddev * e[k], dt), dt);
      }
    }
  return models::to_device(out.to(dt), moments.device());
}

Tensor flux1_preprocess_init_image(const io::Image& image, int width, int height) {
  return preprocess_init_image(image, width, height, "init image", "init_image");
}

// ------------------------------------------------------------------------------------------------
// Size checks

void Flux1Pipeline::validate_size(int width, int height, int batch, int vae_scale_factor,
                                  const MemoryCheck& memory) {
  check_image_size(width, height, batch, vae_scale_factor);
  const int multiple = 2 * vae_scale_factor;  // pixels per packed token side
  const models::Flux1Config c = models::flux1_preset("flux.1-dev");
  // Widest live activations of a block in f32 (the worst case): the MLP hidden, q/k/v/attention
  // and the residual streams, plus the decoder output and its conversions.
  const double tokens = static_cast<double>(width / multiple) * (height / multiple) + 512;
  const double per_token = (2.0 * c.mlp_hidden + 6.0 * c.hidden) * 4.0;
  const double image = static_cast<double>(width) * height * 3 * 4 * 4;
  check_fits_in_memory(static_cast<size_t>(batch * (tokens * per_token + image)), memory,
                       fmt::format("image size {}x{} x {}", width, height, batch));
}

// ------------------------------------------------------------------------------------------------

Flux1Pipeline::Flux1Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Flux1Pipeline::~Flux1Pipeline() = default;

std::unique_ptr<Flux1Pipeline> Flux1Pipeline::load(const std::filesystem::path& model_root,
                                                   const PipelineOptions& options) {
  auto impl = std::make_unique<Impl>(Impl::from_folder(model_root, options));
  if (!options.components_made_by_requests()) impl->load_resident();
  impl->facts = impl->make_facts();
  return std::unique_ptr<Flux1Pipeline>(new Flux1Pipeline(std::move(impl)));
}

std::unique_ptr<Flux1Pipeline> Flux1Pipeline::synthetic(const std::string& variant,
                                                        const std::filesystem::path& clip_tokenizer_dir,
                                                        const std::filesystem::path& t5_tokenizer_dir,
                                                        const PipelineOptions& options, uint64_t seed) {
  auto impl = std::make_unique<Impl>(
      Impl::from_variant(variant, clip_tokenizer_dir, t5_tokenizer_dir, options, seed));
  if (!options.components_made_by_requests()) impl->load_resident();
  impl->facts = impl->make_facts();
  return std::unique_ptr<Flux1Pipeline>(new Flux1Pipeline(std::move(impl)));
}

const PipelineKind& Flux1Pipeline::kind() const { return *impl_->kind; }
const Flux1ModelDefaults& Flux1Pipeline::defaults() const { return impl_->defaults; }
const ModelFacts& Flux1Pipeline::facts() const { return impl_->facts; }

ModelFacts Flux1Pipeline::Impl::make_facts() const {
  ModelFacts f;
  f.vae_scale_factor = vae_config.spatial_factor();
  f.defaults.steps = defaults.num_steps;
  f.defaults.guidance = defaults.guidance_scale;
  f.defaults.width = defaults.width;
  f.defaults.height = defaults.height;
  f.defaults.max_sequence_length = defaults.max_sequence_length;
  f.defaults.size_multiple = 2 * f.vae_scale_factor;
  f.defaults.img2img_guidance = defaults.img2img_guidance_scale;
  f.defaults.img2img_strength = defaults.img2img_strength;
  f.limits.size_multiple = f.defaults.size_multiple;
  f.limits.max_sequence_length = 512;  // T5's limit in FluxPipeline
  // Kontext edits its one reference image; Fill takes the image only with a mask.
  f.limits.init_image = !fill() && !kontext();
  f.limits.mask = !kontext();  // FluxInpaintPipeline: the init image with a mask; FluxFillPipeline
  f.limits.mask_required = fill();
  f.limits.padding_mask_crop = f.limits.mask && !fill();  // FluxInpaintPipeline's; Fill has none
  f.limits.max_reference_images = f.limits.min_reference_images = kontext() ? 1 : 0;
  f.limits.true_cfg = !fill();  // FluxFillPipeline has no negative prompt
  f.limits.max_area = kontext();
  f.weights = weights;
  f.guidance_embedded = defaults.guidance_distilled;
  // dev runs 28 steps, Fill 50; schnell, distilled to 4, gains nothing from a step cache.
  f.limits.step_cache = defaults.guidance_distilled;
  // diffusers' FLUX_MAG_RATIOS were measured on dev; Fill's and Kontext's must be calibrated.
  if (defaults.guidance_distilled && kind == &flux1_kind()) f.mag_ratios = flux1_dev_mag_ratios();
  return f;
}

ModelFacts Flux1Pipeline::describe(const std::filesystem::path& model_root, const PipelineOptions& options) {
  return Impl::from_folder(model_root, options).make_facts();
}

// FluxPipeline / FluxImg2ImgPipeline.__call__'s defaults and rules: img2img's own guidance and
// strength defaults and the steps its strength trims; true CFG only with true_cfg > 1 and a
// negative prompt given (even an empty one), as diffusers' do_true_cfg.
fluxrt::RequestPlan Flux1Pipeline::plan_for(const fluxrt::GenerateRequest& r, const ModelFacts& facts) {
  const fluxrt::ModelDefaults& d = facts.defaults;
  const bool img2img = r.init_image.has_value();
  fluxrt::RequestPlan plan;
  plan.width = r.width.value_or(d.width);
  plan.height = r.height.value_or(d.height);
  if (r.max_area) {
    const int asked_width = plan.width, asked_height = plan.height;
    kontext_output_size(asked_width, asked_height, *r.max_area, facts.limits.size_multiple, &plan.width,
                        &plan.height);
    if (plan.width != asked_width || plan.height != asked_height)
      plan.notes.push_back(fmt::format("size {}x{} rescaled to {}x{} for max_area {} (as diffusers)",
                                       asked_width, asked_height, plan.width, plan.height, *r.max_area));
  }
  plan.steps = plan.steps_run = r.steps.value_or(d.steps);
  plan.guidance = r.guidance.value_or(img2img && d.img2img_guidance ? *d.img2img_guidance : d.guidance);
  plan.max_sequence_length = r.max_sequence_length.value_or(d.max_sequence_length);
  if (img2img) {
    plan.strength = r.strength.value_or(d.img2img_strength.value_or(0.6f));
    plan.steps_run = plan.steps - flux1_img2img_start_index(plan.steps, *plan.strength);
  }
  const bool true_cfg_asked = r.true_cfg && *r.true_cfg > 1.0f;
  plan.cfg = true_cfg_asked && r.negative_prompt.has_value();
  if (plan.cfg) {
    plan.true_cfg = r.true_cfg;
    plan.negative_prompt = *r.negative_prompt;
  }
  if (true_cfg_asked && !r.negative_prompt)
    plan.notes.push_back(
        fmt::format("true_cfg {} has no effect without a negative prompt (as in diffusers)", *r.true_cfg));
  if (r.negative_prompt && !plan.cfg)
    plan.notes.push_back(
        "the negative prompt has no effect on FLUX.1 without true_cfg > 1 (as in diffusers)");
  if (r.guidance && !facts.guidance_embedded)
    plan.notes.push_back(
        fmt::format("guidance {} has no effect: this FLUX.1 model has no guidance embedding "
                    "(schnell); true_cfg with a negative prompt guides it",
                    *r.guidance));
  return plan;
}

const models::Flux1Config& Flux1Pipeline::transformer_config() const { return impl_->transformer_config; }
const PipelineOptions& Flux1Pipeline::options() const { return impl_->options; }
int Flux1Pipeline::vae_scale_factor() const { return impl_->vae_config.spatial_factor(); }
const ResidentWeights& Flux1Pipeline::resident_weights() const { return impl_->weights; }

GenerateResult Flux1Pipeline::generate(const std::vector<PlannedRequest>& batch_requests,
                                       const CallContext& call) {
  Impl& m = *impl_;
  Profiler* prof = m.options.profiler;

  // 1. check inputs: the plan (plan_request) has resolved and checked every setting; the call's
  // requests share it (Engine::batch_key), so the first one's is the call's.
  const CallBatch calls = call_batch(batch_requests);
  const fluxrt::GenerateRequest& request = *batch_requests.front().request;
  const fluxrt::RequestPlan& plan = batch_requests.front().plan;
  const bool img2img = request.init_image.has_value();
  FLUXRT_CHECK(!m.fill() || (img2img && request.mask_image), ErrorCode::InvalidArgument,
               "generate: FLUX.1 Fill needs the image being edited and its mask");
  FLUXRT_CHECK(!img2img || batch_requests.size() == 1, ErrorCode::InvalidArgument,
               "generate: batched requests are for text to image, not img2img");
  const int steps = plan.steps;
  const float guidance = plan.guidance;
  const bool do_true_cfg = plan.cfg;
  const float cfg_scale = plan.true_cfg.value_or(1.0f);
  const int max_len = plan.max_sequence_length;
  const int64_t batch = calls.images;
  const int height = plan.height;
  const int width = plan.width;
  const int vae_scale = m.vae_config.spatial_factor();  // self.vae_scale_factor
  validate_size(width, height, static_cast<int>(std::min<int64_t>(batch, 1 << 20)), vae_scale,
                m.options.memory_check(m.weights));
  // latent grid: 2 * (H // (vae_scale_factor * 2)), even for the 2x2 packing
  const int64_t lh = 2 * (height / (2 * vae_scale)), lw = 2 * (width / (2 * vae_scale));
  // The latents are what the transformer writes (FluxPipeline reads in_channels // 4, Fill the
  // VAE's latent channels: both out_channels / 4).
  const Shape noise_shape =
      flux1_noise_shape(batch, height, width, m.transformer_config.out_channels / 4, vae_scale);
  if (call.initial_latents) {
    FLUXRT_CHECK(!img2img, ErrorCode::InvalidArgument,
                 "generate: initial_latents and init_image are exclusive");
    FLUXRT_CHECK(call.initial_latents->shape() == noise_shape, ErrorCode::InvalidArgument,
                 "generate: initial_latents has shape {}, expected {}", call.initial_latents->shape().str(),
                 noise_shape.str());
  }
  int t_start = 0;
  Tensor init_pixels;
  // FluxInpaintPipeline (a mask with the init image): img2img whose kept region is put back after
  // every step; its mask per latent pixel, packed as the latents. FluxFillPipeline instead feeds
  // the masked image and the mask to the transformer (flux1_fill.h).
  std::optional<KeptRegion> kept;
  std::optional<Flux1FillCondition> fill;
  std::optional<PreparedMaskCrop> crop;  // padding_mask_crop (FluxInpaintPipeline only)
  if (img2img) {
    FLUXRT_CHECK_FIELD(m.options.load_vae_encoder, ErrorCode::InvalidArgument, "init_image",
                       "generate: img2img needs the VAE encoder (PipelineOptions::load_vae_encoder is off)");
    t_start = flux1_img2img_start_index(steps, *plan.strength);
    io::Image init = image_of_request(*request.init_image, "init image", "init_image");
    io::Image mask = request.mask_image ? image_of_request(*request.mask_image, "mask", "mask") : io::Image{};
    if (request.mask_image && !m.fill()) {
      // The window around the mask, at the run's aspect, stands in for the image and the mask.
      crop = PreparedMaskCrop::prepare(request.padding_mask_crop, init, mask, width, height,
                                       MaskCrop::Fit::Cover);
      if (crop) {
        init = crop->cropped_image;
        mask = crop->cropped_mask;
      }
    }
    init_pixels = flux1_preprocess_init_image(init, width, height);  // [1, 3, H, W] f32
    if (request.mask_image) {
      if (m.fill())
        fill =
            Flux1FillCondition::prepare(init_pixels, mask, init.width, init.height, width, height, vae_scale);
      else
        kept.emplace().mask = prepare_latent_patch_mask(mask, init.width, init.height, width, height, lh, lw);
    }
  }
  // FluxKontextPipeline: the image being edited, at the preferred Kontext resolution of its aspect.
  Tensor kontext_pixels;
  if (m.kontext()) {
    FLUXRT_CHECK_FIELD(request.reference_images.size() == 1 && m.options.load_vae_encoder,
                       ErrorCode::InvalidArgument, "reference_images",
                       "generate: FLUX.1 Kontext edits one image, with the VAE encoder loaded");
    kontext_pixels = kontext_preprocess_image(
        image_of_request(request.reference_images.front(), "the image to edit", "reference_images"),
        2 * vae_scale);
  }
  check_cancel(call, kWho, "before text encoding");

  // 3. encode_prompt: CLIP pooled + T5 embeddings, repeated per image; the negative for true CFG.
  Tensor prompt_embeds, pooled, negative_embeds, negative_pooled;
  std::vector<std::string> text_key_parts = calls.prompts;
  text_key_parts.push_back(do_true_cfg ? plan.negative_prompt : "(no negative)");
  text_key_parts.push_back(std::to_string(max_len));
  for (const int64_t r : calls.repeats) text_key_parts.push_back(std::to_string(r));
  for (const models::LoraSpec& l : request.loras)
    text_key_parts.push_back(fmt::format("{}:{}", l.path, l.strength));
  const std::string text_key = text_encoding_key(text_key_parts);
  if (m.options.text_encoder_apart() && m.kept_text.key == text_key) {
    prompt_embeds = m.kept_text.tensors[0], pooled = m.kept_text.tensors[1];
    negative_embeds = m.kept_text.tensors[2], negative_pooled = m.kept_text.tensors[3];
  } else {
    // The engine's LoRAs, then the request's: a request whose LoRAs adapt a text encoder too gets
    // that encoder with all of them merged. In low-memory mode the encoders are made for the
    // request anyway; with resident encoders it is a copy for this request (CLIP-L 246 MB in
    // bf16, T5-XXL 9.5 GB), and the resident ones never change.
    std::vector<models::LoraSpec> all = m.options.loras;
    all.insert(all.end(), request.loras.begin(), request.loras.end());
    auto encoders = m.text_encoders_lease(all);
    ScopedTimer span(prof, kSpanTextEncoding);
    std::unique_ptr<models::ClipTextModel> clip_with_loras;
    std::unique_ptr<models::T5PromptEmbedder> t5_with_loras;
    if (m.text_encoders && !request.loras.empty()) {
      if (models::loras_adapt(request.loras, models::LoraComponent::ClipText))
        clip_with_loras = m.make_clip(all);
      if (models::loras_adapt(request.loras, models::LoraComponent::T5Text)) t5_with_loras = m.make_t5(all);
    }
    const models::T5PromptEmbedder& t5 = t5_with_loras ? *t5_with_loras : *encoders->t5;
    // The two encoders timed apart (sub-spans of kSpanTextEncoding): T5-XXL costs orders of
    // magnitude more than CLIP-L, and the report should say which one a slow encode is.
    auto encode = [&](const std::vector<std::string>& prompts, Tensor& embeds, Tensor& pool) {
      {
        ScopedTimer clip_span(prof, kSpanTextEncodingClip);
        pool = repeat_rows(encoders->pooled(prompts, clip_with_loras.get()), calls.repeats);  // [B, 768]
        ops::synchronize(m.options.device);  // each span ends when the device has finished
      }
      ScopedTimer t5_span(prof, kSpanTextEncodingT5);
      embeds = repeat_rows(t5.embed(prompts, max_len).embeds, calls.repeats);  // [B, L, 4096]
      ops::synchronize(m.options.device);
    };
    encode(calls.prompts, prompt_embeds, pooled);
    if (do_true_cfg) {
      // diffusers passes the one negative prompt for a batch of prompts only as a list of equal
      // length; a single string is broadcast the same way here.
      encode(std::vector<std::string>(calls.prompts.size(), plan.negative_prompt), negative_embeds,
             negative_pooled);
    }
    if (m.options.text_encoder_apart())
      m.kept_text = {text_key, {prompt_embeds, pooled, negative_embeds, negative_pooled}};
  }
  const Tensor text_ids = flux1_text_ids(prompt_embeds.size(1));
  const DType dtype = prompt_embeds.dtype();

  // 4. timesteps (mu from the packed token count; dev shifts, schnell does not)
  GenerateResult result;
  result.schedule = flux1_schedule(m.scheduler, steps, packed_image_seq_len(height, width, vae_scale));
  result.width = width;
  result.height = height;
  result.num_steps = steps - t_start;
  result.guidance_scale = guidance;
  result.used_cfg = do_true_cfg;

  // 5. latents: one torch CPU generator; img2img draws the posterior sample first, then the noise.
  TorchGenerator generator(request.seed);
  Tensor image_latents;
  if (img2img) {
    auto vae = m.vae_lease(/*with_encoder=*/true);
    ScopedTimer span(prof, kSpanReferenceEncode);
    const Tensor moments =
        vae->core().encode_moments(init_pixels.to(dtype), "img2img encode");         // [1, 32, h, w]
    image_latents = vae->scale_latents(flux1_sample_posterior(moments, generator));  // [1, 16, h, w]
    Shape shape = image_latents.shape();
    shape[0] = batch;
    image_latents = image_latents.expand(shape).contiguous();  // [B, 16, h, w]
  }
  Tensor noise = call.initial_latents ? call.initial_latents->to(dtype).contiguous()
                                      : draw_noise(calls, noise_shape, dtype, generator);
  if (kept) {  // packed as the latents, on the device
    kept->source = models::to_device(flux1_pack_latents(image_latents), m.options.device);
    kept->noise = models::to_device(flux1_pack_latents(noise), m.options.device);
  }
  // prepare_mask_latents: the masked image's posterior sample is drawn after the noise.
  Tensor fill_condition;  // [B, N, 64 + 4 f^2]
  if (fill) {
    auto vae = m.vae_lease(/*with_encoder=*/true);
    ScopedTimer span(prof, kSpanReferenceEncode);
    const Tensor moments = vae->core().encode_moments(fill->masked_pixels.to(dtype), "fill encode");
    fill_condition =
        fill->condition(vae->scale_latents(flux1_sample_posterior(moments, generator)), batch, dtype);
  }
  if (img2img) noise = flux1_scale_noise(image_latents, noise, result.schedule.sigmas[t_start]);
  // Noise is drawn on the host (the torch CPU generator) and the latents live on the device.
  Tensor latents = models::to_device(flux1_pack_latents(noise), m.options.device);  // [B, (h/2)(w/2), 64]
  Tensor latent_ids = flux1_image_ids(lh, lw);
  // Kontext's image tokens (prepare_latents): VAE mode latents, scaled, packed, after the noise
  // tokens with ids (1, i, j).
  Tensor kontext_tokens;  // [B, Nr, 64]
  if (kontext_pixels.defined()) {
    auto vae = m.vae_lease(/*with_encoder=*/true);
    ScopedTimer span(prof, kSpanReferenceEncode);
    const Tensor z = vae->encode_latents(kontext_pixels.to(dtype));  // [1, 16, hr, wr]
    kontext_tokens = broadcast_batch(flux1_pack_latents(models::to_device(z, Device::cpu())), batch);
    kontext_tokens = models::to_device(kontext_tokens, m.options.device);
    latent_ids = ops::concat({latent_ids, flux1_image_ids(z.size(2), z.size(3), 1)}, 0);
    result.reference_tokens = kontext_tokens.size(1);
  }

  // guidance: torch.full([1], guidance_scale, float32).expand(B), dev only
  const Tensor guidance_tensor =
      m.transformer_config.guidance ? Tensor::full({batch}, DType::F32, guidance) : Tensor();
  if (!m.transformer_config.guidance) result.guidance_scale = 0.0f;

  // 6. denoising loop
  check_cancel(call, kWho, "before denoising");
  {
    auto transformer = m.transformer_lease();
    const DType model_dtype = transformer->dtype();
    // Each request's own LoRAs, on its own images when the batch's requests differ in them;
    // detached when the loop ends.
    const RequestLoras loras(batch_requests, transformer->linears(), kind().lora_scheme, model_dtype,
                             m.options.device);
    DenoiseLoop loop;
    loop.schedule = &result.schedule;
    loop.first_step = t_start;
    loop.latent_dtype = dtype;
    loop.batch = batch;
    if (do_true_cfg) loop.guidance_scale = cfg_scale;
    std::optional<StepCache> step_cache;
    if (plan.cache) loop.step_cache = &step_cache.emplace(*plan.cache, do_true_cfg ? 2 : 1, model_dtype);
    loop.device = m.options.device;
    loop.profiler = prof;
    loop.call = &call;
    loop.who = kWho;
    loop.previewer = &m.previewer;
    loop.grid_h = lh / 2;  // a token is a 2x2 latent patch
    loop.grid_w = lw / 2;
    loop.width = width;
    loop.height = height;
    if (kept) loop.after_step = [&](int i, Tensor x) { return kept->after_step(i, x, result.schedule); };
    // A kept graph replays without the request's LoRA branches, and a step cache decides per step
    // on the host: such requests run eagerly.
    if (m.options.cuda_graphs && loras.empty() &&
        !step_cache) {  // the resident transformer's, or this request's own
      auto on_device = [&](const Tensor& t) {
        return t.defined() ? models::to_device(t, m.options.device).to(model_dtype) : Tensor();
      };
      const models::Flux1Transformer::Rope rope = transformer->rope_tables(latent_ids, text_ids);
      const std::vector<Tensor> request_inputs{
          on_device(prompt_embeds),
          on_device(pooled),
          on_device(negative_embeds),
          on_device(negative_pooled),
          guidance_tensor.defined() ? transformer->projection(guidance_tensor) : Tensor(),
          rope.cos,
          rope.sin};
      Shape input_shape = latents.shape();  // Fill: widened by its condition; Kontext: lengthened
      input_shape[2] = transformer->config().in_channels;
      if (kontext_tokens.defined()) input_shape[1] += kontext_tokens.size(1);
      loop.graph = bind_step_graph(m.step_graphs.get(), m.options.device, request_inputs,
                                   {input_shape, Shape{batch, transformer->config().timestep_channels}},
                                   flux1_step(*transformer));
      loop.graph_cache = m.step_graphs.get();
    }
    DenoiseModel model;
    // Fill: torch.cat((latents, masked_image_latents), dim=2); Kontext: torch.cat([latents,
    // image_latents], dim=1), whose extra rows' velocities denoise() drops.
    model.input = [&](const Tensor& x) {
      if (fill_condition.defined()) return ops::concat({x, fill_condition}, 2).to(model_dtype);
      if (kontext_tokens.defined()) return ops::concat({x, kontext_tokens}, 1).to(model_dtype);
      return x.to(model_dtype);
    };
    model.forward = [&](const Tensor& input, const Tensor& timestep) {
      auto hooks = [&](int branch) { return step_cache ? step_cache->hooks(branch) : nullptr; };
      std::vector<Tensor> v{transformer->forward(input, latent_ids, prompt_embeds, text_ids, pooled, timestep,
                                                 guidance_tensor, hooks(0))};
      if (do_true_cfg)
        v.push_back(transformer->forward(input, latent_ids, negative_embeds, text_ids, negative_pooled,
                                         timestep, guidance_tensor, hooks(1)));
      return v;
    };
    model.timestep_projection = [&](const Tensor& timestep) { return transformer->projection(timestep); };
    DenoiseOutcome denoised = denoise(std::move(latents), std::move(loop), model);
    latents = std::move(denoised.latents);
    result.graph_steps = denoised.graph_steps;
    if (step_cache) {
      result.cache_steps = step_cache->decisions();
      result.mag_ratios = step_cache->calibration_ratios();
    }
  }
  check_cancel(call, kWho, "before VAE decode");

  // 7. unpack, z / scaling + shift, decode, 8-bit conversion
  const Tensor final_latents = flux1_unpack_latents(latents, lh, lw);  // [B, 16, h, w] on the device
  result.final_latents = models::to_device(final_latents, Device::cpu());
  {
    auto vae = m.vae_lease(/*with_encoder=*/false);
    ScopedTimer span(prof, kSpanVaeDecode);
    const Tensor image = vae->decode_latents(final_latents);  // [B, 3, H, W] on the device
    const Tensor u8 = models::postprocess_to_uint8(image);    // [B, H, W, 3]
    result.images = to_images(u8);                            // downloads
    m.previewer.observe(latents, u8, lh / 2, lw / 2);         // the next requests' preview colours
  }
  // padding_mask_crop: each image back into its window, blended over the request's image.
  if (crop) crop->overlay_all(result.images);
  return result;
}

}  // namespace fluxrt::pipelines
