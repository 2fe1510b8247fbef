// Flux2KleinPipeline: diffusers 0.42.1 Flux2KleinPipeline.__call__ step for step (the comments
// name the upstream step each block mirrors). Component loading lives in klein_components.cpp.
#include "pipelines/klein/flux2_klein_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"
#include "models/flux/flux2_transformer.h"
#include "models/weight_binder.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "pipelines/batch.h"
#include "pipelines/denoise.h"
#include "pipelines/klein/klein_components.h"
#include "pipelines/klein/klein_inpaint.h"
#include "pipelines/noise.h"
#include "pipelines/reference_image.h"
#include "pipelines/request_loras.h"
#include "pipelines/request_plan.h"
#include "pipelines/spans.h"
#include "pipelines/step_cache.h"
#include "pipelines/step_graph.h"

namespace fluxrt::pipelines {
namespace {

constexpr const char* kWho = "klein pipeline";

// A klein step for StepGraph: request inputs {prompt embeddings, negative embeddings (undefined
// without CFG), RoPE cos, RoPE sin}, step inputs {transformer input, timestep projection};
// outputs the conditional velocity, then the unconditional one under CFG.
StepGraph::Fn klein_step(const models::Flux2Transformer& transformer) {
  return [&transformer](const std::vector<Tensor>& request, const std::vector<Tensor>& step) {
    const models::Flux2Transformer::Rope rope{request[2], request[3]};
    std::vector<Tensor> v{transformer.forward_on_device(step[0], request[0], step[1], rope)};
    if (request[1].defined()) v.push_back(transformer.forward_on_device(step[0], request[1], step[1], rope));
    return v;
  };
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Packing and ids (flux-reference.md 5.2)

Tensor pack_latents(const Tensor& latents) {
  FLUXRT_CHECK(latents.dim() == 4, ErrorCode::InvalidArgument, "pack_latents: expected [B, C, h, w], got {}",
               latents.shape().str());
  const int64_t b = latents.size(0), c = latents.size(1), hw = latents.size(2) * latents.size(3);
  return latents.reshape({b, c, hw}).permute({0, 2, 1}).contiguous();  // [B, h*w, C]
}

Tensor unpack_latents(const Tensor& tokens, int64_t h, int64_t w) {
  FLUXRT_CHECK(tokens.dim() == 3 && tokens.size(1) == h * w, ErrorCode::InvalidArgument,
               "unpack_latents: expected [B, {}, C] for a {}x{} grid, got {}", h * w, h, w,
               tokens.shape().str());
  const int64_t b = tokens.size(0), c = tokens.size(2);
  // diffusers scatters by the ids; with raster-order ids that is the inverse flatten.
  return tokens.permute({0, 2, 1}).contiguous().view({b, c, h, w});  // [B, C, h, w]
}

Tensor klein_image_ids(int64_t h, int64_t w, int64_t t_offset) {
  FLUXRT_CHECK(h > 0 && w > 0, ErrorCode::InvalidArgument, "klein_image_ids: empty grid {}x{}", h, w);
  Tensor ids = Tensor::empty({h * w, 4}, DType::I64);  // [h*w, 4]
  int64_t* p = ids.data<int64_t>();
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j, p += 4) {
      p[0] = t_offset;
      p[1] = i;
      p[2] = j;
      p[3] = 0;
    }
  return ids;
}

Tensor klein_text_ids(int64_t length) {
  FLUXRT_CHECK(length > 0, ErrorCode::InvalidArgument, "klein_text_ids: length {}", length);
  Tensor ids = Tensor::zeros({length, 4}, DType::I64);  // [L, 4]
  int64_t* p = ids.data<int64_t>();
  for (int64_t l = 0; l < length; ++l) p[l * 4 + 3] = l;
  return ids;
}

// ------------------------------------------------------------------------------------------------
// Size checks

size_t estimate_generate_bytes(int width, int height, int batch, const models::Flux2Config& config,
                               int vae_scale_factor) {
  const int multiple = 2 * vae_scale_factor;
  const double tokens =
      static_cast<double>(width / multiple) * (height / multiple) + tokenizers::kQwenDefaultMaxSequenceLength;
  // The widest live activations of a block, in f32 (the worst case): the SwiGLU input
  // (2 * mlp_hidden), its output and q/k/v/attention (4 * hidden), plus the residual streams.
  const double per_token = (2.0 * config.mlp_hidden + config.mlp_hidden + 6.0 * config.hidden) * 4.0;
  const double image = static_cast<double>(width) * height * 3 * 4 * 4;  // decoder output + conversions
  return static_cast<size_t>(batch * (tokens * per_token + image));
}

void Flux2KleinPipeline::validate_size(int width, int height, int batch, int vae_scale_factor,
                                       const MemoryCheck& memory) {
  // Before loading, the transformer is unknown: the 4B widths (the 9B ones only raise the bound).
  validate_size_for(width, height, batch, models::flux2_preset("flux.2-klein-4b"), vae_scale_factor, memory);
}

void validate_size_for(int width, int height, int batch, const models::Flux2Config& config,
                       int vae_scale_factor, const MemoryCheck& memory) {
  check_image_size(width, height, batch, vae_scale_factor);
  check_fits_in_memory(estimate_generate_bytes(width, height, batch, config, vae_scale_factor), memory,
                       fmt::format("image size {}x{} x {}", width, height, batch));
}

// ------------------------------------------------------------------------------------------------

Flux2KleinPipeline::Flux2KleinPipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Flux2KleinPipeline::~Flux2KleinPipeline() = default;

std::unique_ptr<Flux2KleinPipeline> Flux2KleinPipeline::load(const std::filesystem::path& model_root,
                                                             const PipelineOptions& options) {
  auto impl = std::make_unique<Impl>(Impl::from_folder(model_root, options));
  if (!options.components_made_by_requests()) impl->load_resident();
  impl->facts = impl->make_facts();
  return std::unique_ptr<Flux2KleinPipeline>(new Flux2KleinPipeline(std::move(impl)));
}

std::unique_ptr<Flux2KleinPipeline> Flux2KleinPipeline::synthetic(const std::string& variant,
                                                                  const std::filesystem::path& tokenizer_dir,
                                                                  const PipelineOptions& options,
                                                                  uint64_t seed) {
  auto impl = std::make_unique<Impl>(Impl::from_variant(variant, tokenizer_dir, options, seed));
  if (!options.components_made_by_requests()) impl->load_resident();
  impl->facts = impl->make_facts();
  return std::unique_ptr<Flux2KleinPipeline>(new Flux2KleinPipeline(std::move(impl)));
}

const PipelineKind& Flux2KleinPipeline::kind() const { return flux2_klein_kind(); }
const KleinModelDefaults& Flux2KleinPipeline::defaults() const { return impl_->defaults; }
const ModelFacts& Flux2KleinPipeline::facts() const { return impl_->facts; }

ModelFacts Flux2KleinPipeline::Impl::make_facts() const {
  ModelFacts f;
  f.vae_scale_factor = vae_config.spatial_factor();
  f.defaults.steps = defaults.num_steps;
  f.defaults.guidance = defaults.guidance_scale;
  f.defaults.width = defaults.width;
  f.defaults.height = defaults.height;
  f.defaults.max_sequence_length = defaults.max_sequence_length;
  f.defaults.size_multiple = 2 * f.vae_scale_factor;
  f.limits.size_multiple = f.defaults.size_multiple;
  f.limits.max_sequence_length = 4096;  // Qwen3 reads far more; the prompt template is what matters
  f.limits.max_reference_images = 4;    // BFL's limit for klein
  // Flux2KleinInpaintPipeline (klein_inpaint.h); diffusers has no inpainting for klein-9B-KV.
  f.limits.mask = !defaults.reference_kv;
  f.limits.padding_mask_crop = f.limits.mask;  // Flux2KleinInpaintPipeline's padding_mask_crop
  f.weights = weights;
  // Flux2KleinKVPipeline runs without guidance, as the distilled models do.
  f.cfg = !defaults.is_distilled && !defaults.reference_kv;
  f.limits.step_cache = f.cfg;  // the distilled models run 4 steps
  f.notes = defaults.notes;     // a file name and a folder disagreeing on distilled / base
  return f;
}

ModelFacts Flux2KleinPipeline::describe(const std::filesystem::path& model_root,
                                        const PipelineOptions& options) {
  return Impl::from_folder(model_root, options).make_facts();
}

namespace {

// The size a run takes from its first reference image (image_width x image_height) when none is
// given: the image's, shrunk to kReferenceTargetArea when larger and floored to multiples of 2 x
// the VAE factor, as preprocess_reference_image crops it.
void reference_run_size(int image_width, int image_height, int vae_scale_factor, int* width, int* height) {
  const int multiple = 2 * vae_scale_factor;
  int w = image_width, h = image_height;
  if (static_cast<int64_t>(w) * h > kReferenceTargetArea)
    reference_target_size(image_width, image_height, kReferenceTargetArea, &w, &h);
  *width = std::max(w / multiple * multiple, multiple);
  *height = std::max(h / multiple * multiple, multiple);
}

}  // namespace

// Flux2KleinPipeline.__call__'s defaults and rules: the size of the first reference image, CFG
// for the base variants only (guidance > 1), the negative prompt "" when none is given.
fluxrt::RequestPlan Flux2KleinPipeline::plan_for(const fluxrt::GenerateRequest& r, const ModelFacts& facts) {
  const fluxrt::ModelDefaults& d = facts.defaults;
  fluxrt::RequestPlan plan;
  plan.width = d.width;
  plan.height = d.height;
  if (r.mask_image && r.init_image) {  // inpainting: the size of the image being edited
    klein_inpaint_size(r.init_image->width, r.init_image->height, facts.vae_scale_factor, &plan.width,
                       &plan.height);
  } else if (!r.reference_images.empty()) {
    const fluxrt::Image& first = r.reference_images.front();
    reference_run_size(first.width, first.height, facts.vae_scale_factor, &plan.width, &plan.height);
  }
  plan.width = r.width.value_or(plan.width);
  plan.height = r.height.value_or(plan.height);
  plan.steps = plan.steps_run = r.steps.value_or(d.steps);
  plan.guidance = r.guidance.value_or(d.guidance);
  plan.max_sequence_length = r.max_sequence_length.value_or(d.max_sequence_length);
  if (r.mask_image) {  // get_timesteps: the schedule's tail that strength keeps
    plan.strength = r.strength.value_or(kKleinInpaintStrength);
    plan.steps_run = plan.steps - img2img_start_index(plan.steps, *plan.strength);
  }
  plan.cfg = facts.cfg && plan.guidance > 1.0f;  // do_classifier_free_guidance
  if (plan.cfg) plan.negative_prompt = r.negative_prompt.value_or("");
  if (r.guidance && !facts.cfg)
    plan.notes.push_back(
        fmt::format("guidance {} has no effect: distilled klein models run without guidance", *r.guidance));
  if (r.negative_prompt && !plan.cfg)
    plan.notes.push_back(facts.cfg
                             ? "the negative prompt has no effect without CFG (guidance > 1)"
                             : "the negative prompt has no effect: distilled klein models run without CFG");
  return plan;
}

const models::Flux2Config& Flux2KleinPipeline::transformer_config() const {
  return impl_->transformer_config;
}
const PipelineOptions& Flux2KleinPipeline::options() const { return impl_->options; }
int Flux2KleinPipeline::vae_scale_factor() const { return impl_->vae_config.spatial_factor(); }
const ResidentWeights& Flux2KleinPipeline::resident_weights() const { return impl_->weights; }

GenerateResult Flux2KleinPipeline::generate(const std::vector<PlannedRequest>& batch_requests,
                                            const CallContext& call) {
  Impl& m = *impl_;
  Profiler* prof = m.options.profiler;

  // 1. check inputs: the plan (plan_request) has resolved and checked every setting; the call's
  // requests share it (Engine::batch_key), so the first one's is the call's.
  const CallBatch calls = call_batch(batch_requests);
  const fluxrt::GenerateRequest& request = *batch_requests.front().request;
  const fluxrt::RequestPlan& plan = batch_requests.front().plan;
  FLUXRT_CHECK(batch_requests.size() == 1 || request.reference_images.empty(), ErrorCode::Internal,
               "generate: a call of several requests with reference images");
  const int steps = plan.steps;
  const float guidance = plan.guidance;
  const int max_len = plan.max_sequence_length;
  const int64_t batch = calls.images;
  const bool cfg = plan.cfg;                            // do_classifier_free_guidance
  const int vae_scale = m.vae_config.spatial_factor();  // self.vae_scale_factor

  // 4. reference images: preprocessing first, so a bad image fails before any heavy work; the
  // first one gives the default output size.
  std::vector<Tensor> ref_pixels;
  for (size_t r = 0; r < request.reference_images.size(); ++r) {
    const io::Image image = image_of_request(request.reference_images[r],
                                             fmt::format("reference image {}", r + 1), "reference_images");
    ref_pixels.push_back(preprocess_reference_image(image, 2 * vae_scale));
  }
  FLUXRT_CHECK_FIELD(
      ref_pixels.empty() || m.options.load_vae_encoder, ErrorCode::InvalidArgument, "reference_images",
      "generate: reference images need the VAE encoder (PipelineOptions::load_vae_encoder is off)");
  // Inpainting (Flux2KleinInpaintPipeline): the image being edited and its mask, checked here.
  std::optional<KleinInpaint> inpaint;
  if (request.mask_image) {
    FLUXRT_CHECK(batch_requests.size() == 1, ErrorCode::Internal,
                 "generate: a call of several inpaint requests");
    FLUXRT_CHECK_FIELD(
        m.options.load_vae_encoder, ErrorCode::InvalidArgument, "mask",
        "generate: inpainting needs the VAE encoder (PipelineOptions::load_vae_encoder is off)");
    inpaint = KleinInpaint::prepare(request, plan, vae_scale);
  }
  const int height = plan.height, width = plan.width;
  // The plan sized the run from the first image as the preprocessing crops it.
  FLUXRT_CHECK(request.width || inpaint || ref_pixels.empty() ||
                   (ref_pixels[0].size(2) == height && ref_pixels[0].size(3) == width),
               ErrorCode::Internal, "generate: the plan's size {}x{} is not the reference image's {}x{}",
               width, height, ref_pixels.empty() ? 0 : ref_pixels[0].size(3),
               ref_pixels.empty() ? 0 : ref_pixels[0].size(2));
  validate_size_for(width, height, static_cast<int>(std::min<int64_t>(batch, 1 << 20)), m.transformer_config,
                    vae_scale, m.options.memory_check(m.weights));
  const int64_t lh = height / (2 * vae_scale), lw = width / (2 * vae_scale), image_tokens = lh * lw;
  const Shape noise_shape =
      flux2_noise_shape(batch, height, width, m.transformer_config.in_channels, vae_scale);
  if (call.initial_latents) {
    FLUXRT_CHECK(call.initial_latents->shape() == noise_shape, ErrorCode::InvalidArgument,
                 "generate: initial_latents has shape {}, expected {}", call.initial_latents->shape().str(),
                 noise_shape.str());
    FLUXRT_CHECK(!inpaint, ErrorCode::InvalidArgument, "generate: initial_latents and a mask are exclusive");
  }
  check_cancel(call, kWho, "before text encoding");

  // 3. prompt embeddings (encode_prompt), repeated per image; the negative branch for CFG.
  Tensor prompt_embeds, negative_embeds;
  {
    std::vector<std::string> key_parts = calls.prompts;
    key_parts.push_back(cfg ? plan.negative_prompt : "(no negative)");
    key_parts.push_back(std::to_string(max_len));
    const std::string text_key = text_encoding_key(key_parts);
    if (m.options.text_encoder_apart() && m.kept_text.key == text_key) {
      prompt_embeds = m.kept_text.tensors[0];
      negative_embeds = m.kept_text.tensors[1];
    } else {
      ComponentLease<models::KleinPromptEmbedder> embedder = m.embedder_lease();
      ScopedTimer span(prof, kSpanTextEncoding);
      prompt_embeds = embedder->embed(calls.prompts, max_len).embeds;
      if (cfg) negative_embeds = embedder->embed({plan.negative_prompt}, max_len).embeds;
      ops::synchronize(m.options.device);  // the span ends when the device has finished
      if (m.options.text_encoder_apart()) m.kept_text = {text_key, {prompt_embeds, negative_embeds}};
    }
    prompt_embeds = repeat_rows(prompt_embeds, calls.repeats);
    if (cfg) negative_embeds = broadcast_batch(negative_embeds, batch);
  }
  const Tensor text_ids = klein_text_ids(prompt_embeds.size(1));
  const DType dtype = prompt_embeds.dtype();

  // 5. noise: one torch CPU generator for the whole batch (or per noise group), in the
  // prompt-embedding dtype.
  TorchGenerator generator(request.seed);
  const Tensor noise = call.initial_latents ? call.initial_latents->to(dtype).contiguous()
                                            : draw_noise(calls, noise_shape, dtype, generator);
  // Noise is drawn on the host (the torch CPU generator) and the latents live on the device.
  Tensor latents = models::to_device(pack_latents(noise), m.options.device);  // [B, Li, 128]
  Tensor latent_ids = klein_image_ids(lh, lw);
  GenerateResult result;

  // Reference tokens (prepare_image_latents): VAE mode latents, BN-normalised, packed, with ids
  // t = 10 + 10 r; appended after the noise tokens, or, for klein-9B-KV, kept as keys and values
  // (below). Inpainting's source image is the first of them. Encoded latents are kept by content
  // for later requests (reference_latent_cache.h).
  Tensor ref_tokens, ref_ids;  // [1, Lr, 128], [Lr, 4]
  if (!ref_pixels.empty() || inpaint) {
    if (inpaint) ref_pixels.insert(ref_pixels.begin(), inpaint->source_pixels);
    ScopedTimer span(prof, kSpanReferenceEncode);
    std::optional<ComponentLease<models::Flux2Vae>> vae;  // loaded on the first image not kept
    std::vector<Tensor> tokens, ids;
    for (size_t r = 0; r < ref_pixels.size(); ++r) {
      bool kept = false;
      const Tensor z = m.reference_latents->get_or_encode(
          ref_pixels[r],
          [&] {
            if (!vae) vae.emplace(m.vae_lease(/*with_encoder=*/true));
            return (*vae)->encode_latents(ref_pixels[r].to(m.options.dtype));  // [1, 128, hr, wr]
          },
          &kept);
      result.reference_latents += 1;
      result.reference_latents_kept += kept ? 1 : 0;
      tokens.push_back(pack_latents(models::to_device(z, m.options.device)));  // [1, hr*wr, 128]
      ids.push_back(klein_image_ids(z.size(2), z.size(3), 10 + 10 * static_cast<int64_t>(r)));
    }
    if (inpaint) inpaint->kept.source = broadcast_batch(tokens[0], batch);  // [B, Li, 128]
    ref_tokens = tokens.size() == 1 ? tokens[0] : ops::concat(tokens, 1);
    ref_ids = ops::concat(ids, 0);
    result.reference_tokens = ref_tokens.size(1);
  }
  // Flux2KleinKVPipeline: the reference tokens run once, as keys and values; other klein models
  // append them to the noise tokens of every step.
  const bool reference_kv = ref_tokens.defined() && m.defaults.reference_kv;
  if (ref_tokens.defined() && !reference_kv) {
    ref_tokens = broadcast_batch(ref_tokens, batch);     // [B, Lr, 128]
    latent_ids = ops::concat({latent_ids, ref_ids}, 0);  // [Li + Lr, 4]
  }

  // 6. timesteps with the empirical mu of the noise-token count
  result.schedule = flux2_schedule(m.scheduler, steps, image_tokens);
  result.width = width;
  result.height = height;
  result.num_steps = steps;
  result.guidance_scale = guidance;
  result.used_cfg = cfg;
  if (inpaint) {  // prepare_latents: the source noised to the first sigma that runs
    inpaint->kept.noise = latents;
    latents = inpaint->kept.start(result.schedule, inpaint->t_start);
  }

  // 7. denoising loop
  {
    ComponentLease<models::Flux2Transformer> transformer = m.transformer_lease();
    const DType model_dtype = transformer->dtype();
    // Each request's own LoRAs, on its own images when the batch's requests differ in them;
    // detached when the loop ends.
    const RequestLoras loras(batch_requests, transformer->linears(), kind().lora_scheme, model_dtype,
                             m.options.device);
    DenoiseLoop loop;
    loop.schedule = &result.schedule;
    loop.latent_dtype = dtype;
    loop.batch = batch;
    if (cfg) loop.guidance_scale = guidance;
    std::optional<StepCache> step_cache;
    if (plan.cache) loop.step_cache = &step_cache.emplace(*plan.cache, cfg ? 2 : 1, model_dtype);
    loop.device = m.options.device;
    loop.profiler = prof;
    loop.call = &call;
    loop.who = kWho;
    loop.previewer = &m.previewer;
    loop.grid_h = lh;
    loop.grid_w = lw;
    loop.width = width;
    loop.height = height;
    if (inpaint) {
      loop.first_step = inpaint->t_start;
      loop.after_step = [&](int i, Tensor x) { return inpaint->kept.after_step(i, x, result.schedule); };
    }
    // klein-9B-KV: the reference keys and values of every attention module, with the request's
    // LoRAs; freed when the request ends (they are this request's and no other's).
    std::optional<models::Flux2Transformer::ReferenceCache> kv_cache;
    if (reference_kv) {
      ScopedTimer span(prof, kSpanReferenceKv);
      kv_cache = transformer->reference_cache(ref_tokens.to(model_dtype), ref_ids);
      ops::synchronize(m.options.device);
      result.reference_kv_bytes = kv_cache->bytes();
    }
    // A kept graph replays without the request's LoRA branches: such requests run eagerly.
    // A step cache decides per step on the host, and the reference keys are not among a graph's
    // inputs: such requests run eagerly too.
    if (m.options.cuda_graphs && loras.empty() && !step_cache &&
        !kv_cache) {  // from the resident transformer's cache, or this request's own
      const models::Flux2Transformer::Rope rope = transformer->rope_tables(latent_ids, text_ids);
      const std::vector<Tensor> request_inputs{
          models::to_device(prompt_embeds, m.options.device).to(model_dtype),
          cfg ? models::to_device(negative_embeds, m.options.device).to(model_dtype) : Tensor(), rope.cos,
          rope.sin};
      const Shape input_shape{batch, latent_ids.size(0), latents.size(2)};
      loop.graph = bind_step_graph(m.step_graphs.get(), m.options.device, request_inputs,
                                   {input_shape, Shape{batch, transformer->config().timestep_channels}},
                                   klein_step(*transformer));
      loop.graph_cache = m.step_graphs.get();
    }
    DenoiseModel model;
    model.input = [&](const Tensor& x) {
      return (ref_tokens.defined() && !kv_cache ? ops::concat({x, ref_tokens}, 1) : x).to(model_dtype);
    };
    model.forward = [&](const Tensor& input, const Tensor& timestep) {
      if (kv_cache)  // no CFG and no step cache: the KV model is distilled (plan_for)
        return std::vector<Tensor>{
            transformer->forward(input, latent_ids, prompt_embeds, text_ids, timestep, *kv_cache)};
      auto hooks = [&](int branch) { return step_cache ? step_cache->hooks(branch) : nullptr; };
      std::vector<Tensor> v{
          transformer->forward(input, latent_ids, prompt_embeds, text_ids, timestep, hooks(0))};
      if (cfg)
        v.push_back(transformer->forward(input, latent_ids, negative_embeds, text_ids, timestep, hooks(1)));
      return v;
    };
    model.timestep_projection = [&](const Tensor& timestep) {
      return transformer->timestep_projection(timestep);
    };
    DenoiseOutcome denoised = denoise(std::move(latents), std::move(loop), model);
    latents = std::move(denoised.latents);
    result.graph_steps = denoised.graph_steps;
    if (step_cache) {
      result.cache_steps = step_cache->decisions();
      result.mag_ratios = step_cache->calibration_ratios();
    }
  }
  check_cancel(call, kWho, "before VAE decode");

  // unpack, BN-denormalise, unpatchify, decode, 8-bit conversion
  const Tensor final_latents = unpack_latents(latents, lh, lw);  // [B, 128, h, w] on the device
  result.final_latents = models::to_device(final_latents, Device::cpu());
  {
    ComponentLease<models::Flux2Vae> vae = m.vae_lease(/*with_encoder=*/false);
    ScopedTimer span(prof, kSpanVaeDecode);
    const Tensor image = vae->decode_latents(final_latents);  // [B, 3, H, W] on the device
    const Tensor u8 = models::postprocess_to_uint8(image);    // [B, H, W, 3]
    result.images = to_images(u8);                            // downloads
    m.previewer.observe(latents, u8, lh, lw);                 // the next requests' preview colours
  }
  // padding_mask_crop: each image back into its window, blended over the request's image.
  if (inpaint && inpaint->crop) inpaint->crop->overlay_all(result.images);
  return result;
}

}  // namespace fluxrt::pipelines
