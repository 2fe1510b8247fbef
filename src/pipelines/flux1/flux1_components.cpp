// Component sources and loading for Flux1Pipeline (see flux1_components.h).
#include "pipelines/flux1/flux1_components.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "core/timer.h"
#include "io/model_discovery.h"
#include "io/safetensors.h"
#include "models/flux/flux1_names.h"
#include "models/flux/flux1_transformer.h"
#include "models/t5/t5_file.h"
#include "pipelines/component_loading.h"
#include "pipelines/flux1/flux1_fill.h"
#include "pipelines/spans.h"
#include "pipelines/variant.h"

namespace fluxrt::pipelines {
namespace fs = std::filesystem;

Tensor Flux1TextEncoders::pooled(const std::vector<std::string>& prompts,
                                 const models::ClipTextModel* with_loras) const {
  const int64_t n = static_cast<int64_t>(prompts.size());
  Tensor ids = Tensor::empty({n, tokenizers::kClipMaxLength}, DType::I32);  // [P, 77]
  int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t> row = clip_tokenizer->encode_padded(prompts[i], tokenizers::kClipMaxLength);
    std::copy(row.begin(), row.end(), p + i * tokenizers::kClipMaxLength);
  }
  return (with_loras ? *with_loras : *clip).forward(ids).pooled;  // [P, 768]
}

namespace {

void set_variant_defaults(Flux1ModelDefaults& d, bool dev) {
  d.guidance_distilled = dev;
  d.num_steps = dev ? 28 : 4;
  d.max_sequence_length = dev ? tokenizers::kT5MaxSequenceLengthDev : tokenizers::kT5MaxSequenceLengthSchnell;
}

// FluxFillPipeline.__call__'s defaults: every request is an edit, and the image enters through the
// masked condition, so its strength and guidance are the call's own.
void set_fill_defaults(Flux1ModelDefaults& d) {
  d.num_steps = kFlux1FillSteps;
  d.guidance_scale = kFlux1FillGuidance;
  d.img2img_guidance_scale = kFlux1FillGuidance;
  d.img2img_strength = kFlux1FillStrength;
}

// The config of a single transformer checkpoint: the named preset when its shapes are a released
// variant (headers only), else detected from the tensors themselves (custom sizes; ComfyUI
// all-in-one files: the model.diffusion_model.* tensors, as the loader reads them).
models::Flux1Config flux1_config_of_file(const fs::path& file, const VariantInfo& info) {
  if (info.variant == "flux.1-dev" || info.variant == "flux.1-schnell")
    return models::flux1_preset(info.variant);
  models::TensorStore raw = models::Flux1Transformer::open_checkpoint(file.string());  // safetensors or GGUF
  raw.set_description(file.string());
  return models::flux1_config_detect(models::flux1_to_canonical(raw));
}

// --text-encoder FILE: a T5 whose width is the transformer's text width. Headers only (the
// weights load with the encoder), so a wrong file fails when the pipeline opens, not at its first
// request in low-memory mode.
void check_t5_file_fits(const fs::path& file, const models::Flux1Config& transformer) {
  FLUXRT_CHECK(fs::is_regular_file(file), ErrorCode::NotFound,
               "flux.1 pipeline: text encoder file {} not found", file.string());
  const models::T5Config c = models::t5_config_of_file(file, models::t5_store_of_file(file));
  FLUXRT_CHECK(
      c.d_model == transformer.context_dim, ErrorCode::Unsupported,
      "flux.1 pipeline: text encoder file {} (T5 width {}) does not fit the transformer (T5 width {})",
      file.string(), c.d_model, transformer.context_dim);
}

}  // namespace

Flux1Pipeline::Impl Flux1Pipeline::Impl::from_variant(const std::string& variant,
                                                      const fs::path& clip_tokenizer_dir,
                                                      const fs::path& t5_tokenizer_dir,
                                                      const PipelineOptions& options, uint64_t seed) {
  Impl m;
  if (variant == "flux.1-tiny") {
    // The shapes of tests/data/models/flux1-dev-tiny (tools/reference/dump_flux1_pipeline.py).
    m.transformer_config.variant = "custom";
    m.transformer_config.hidden = 128;
    m.transformer_config.heads = 1;
    m.transformer_config.double_blocks = 1;
    m.transformer_config.single_blocks = 1;
    m.transformer_config.context_dim = 16;
    m.transformer_config.pooled_dim = 8;
    m.transformer_config.mlp_hidden = 512;
    m.clip_config.hidden_size = 8;
    m.clip_config.intermediate_size = 16;
    m.clip_config.num_layers = 2;
    m.clip_config.num_heads = 2;
    m.t5_config.d_model = 16;
    m.t5_config.d_kv = 8;
    m.t5_config.d_ff = 40;
    m.t5_config.num_layers = 3;
    m.t5_config.num_heads = 4;
    m.vae_config.block_out_channels = {8, 16, 16, 16};
    m.vae_config.norm_num_groups = 4;
  } else if (variant.rfind("flux.1-fill-dev", 0) == 0 || variant.rfind("flux.1-kontext-dev", 0) == 0) {
    // FLUX.1-Fill-dev: dev's shapes with the input widened by the masked image's latents and the
    // mask (384 channels in); FLUX.1-Kontext-dev: dev's shapes exactly. Their kinds run them.
    const bool fill = variant.rfind("flux.1-fill-dev", 0) == 0;
    const std::string dev = "flux.1-dev" + variant.substr(fill ? 15 : 18);  // keeps the shared suffix
    m.transformer_config = models::flux1_preset(dev);
    if (fill) m.transformer_config.in_channels = kFlux1FillInChannels;
    m.transformer_config.variant = fill ? "flux.1-fill-dev" : "flux.1-kontext-dev";
    m.kind = fill ? &flux1_fill_kind() : &flux1_kontext_kind();
    m.clip_config = models::ClipTextConfig::clip_l();
    m.t5_config = models::T5Config::t5_v1_1_xxl();
  } else {
    m.transformer_config = models::flux1_preset(variant);  // InvalidArgument listing the known names
    m.clip_config = models::ClipTextConfig::clip_l();
    m.t5_config = models::T5Config::t5_v1_1_xxl();
  }
  for (const fs::path& dir : {clip_tokenizer_dir, t5_tokenizer_dir})
    FLUXRT_CHECK(fs::is_directory(dir), ErrorCode::NotFound, "synthetic {}: no tokenizer folder {}", variant,
                 dir.string());
  m.synthetic_variant = variant;
  m.clip_tokenizer_dir = clip_tokenizer_dir;
  m.t5_tokenizer_dir = t5_tokenizer_dir;
  m.synthetic_seed = seed;
  m.options = options;
  set_variant_defaults(m.defaults, m.transformer_config.guidance);
  if (m.fill()) set_fill_defaults(m.defaults);
  m.scheduler = m.transformer_config.guidance ? FlowMatchSchedulerConfig::flux1_dev()
                                              : FlowMatchSchedulerConfig::flux1_schnell();
  return m;
}

Flux1Pipeline::Impl Flux1Pipeline::Impl::from_folder(const fs::path& model_root,
                                                     const PipelineOptions& options) {
  const std::string where = model_root.string();
  FLUXRT_CHECK(fs::exists(model_root), ErrorCode::NotFound, "flux.1 pipeline: model folder {} does not exist",
               where);
  FLUXRT_CHECK(fs::exists(model_root / "model_index.json"), ErrorCode::NotFound,
               "flux.1 pipeline: {} is not a diffusers pipeline folder (no model_index.json)", where);
  const io::ResolvedModel model = io::resolve_model(where);
  const PipelineKind* kind =
      model.pipeline_class.empty() ? &flux1_kind() : find_pipeline_kind(model.pipeline_class);
  FLUXRT_CHECK(kind == &flux1_kind() || kind == &flux1_fill_kind() || kind == &flux1_kontext_kind(),
               ErrorCode::Unsupported,
               "flux.1 pipeline: {} holds a {}, not a FluxPipeline, FluxFillPipeline or FluxKontextPipeline",
               where, model.pipeline_class);
  const fs::path& transformer_file = options.transformer_file;
  const fs::path& text_encoder_file = options.text_encoder_file;
  for (const char* component :
       {"transformer", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler"}) {
    if (!transformer_file.empty() && std::string(component) == "transformer") continue;
    if (!text_encoder_file.empty() && std::string(component) == "text_encoder_2") continue;
    FLUXRT_CHECK(fs::is_directory(model_root / component), ErrorCode::NotFound,
                 "flux.1 pipeline: {} has no {}/ folder", where, component);
  }
  if (!transformer_file.empty())
    FLUXRT_CHECK(fs::is_regular_file(transformer_file), ErrorCode::NotFound,
                 "flux.1 pipeline: transformer file {} not found", transformer_file.string());
  const VariantInfo info =
      detect_variant(transformer_file.empty() ? model : io::resolve_model(transformer_file.string()));
  FLUXRT_CHECK(kind->takes_transformer(info), ErrorCode::Unsupported,
               "flux.1 pipeline: {} holds a {} transformer, not {}",
               transformer_file.empty() ? where : transformer_file.string(), info.description, kind->name);

  Impl m;
  m.root = model_root;
  m.kind = kind;
  m.options = options;
  m.scheduler = load_flow_match_scheduler_config(model_root);
  m.scheduler.validate();
  const fs::path transformer_config = model_root / "transformer" / "config.json";
  if (!transformer_file.empty()) {
    m.transformer_config = flux1_config_of_file(transformer_file, info);
    if (fs::exists(transformer_config)) {
      // The file must read what the folder's CLIP / T5 / VAE produce.
      const models::Flux1Config folder = models::flux1_config_from_json(transformer_config.string());
      const models::Flux1Config& file = m.transformer_config;
      FLUXRT_CHECK(file.context_dim == folder.context_dim && file.pooled_dim == folder.pooled_dim &&
                       file.in_channels == folder.in_channels,
                   ErrorCode::Unsupported,
                   "flux.1 pipeline: transformer file {} (T5 width {}, CLIP width {}, {} latent channels) "
                   "does not fit "
                   "the components of {} (made for {}, {}, {})",
                   transformer_file.string(), file.context_dim, file.pooled_dim, file.in_channels, where,
                   folder.context_dim, folder.pooled_dim, folder.in_channels);
      // dev and schnell share the text encoders and the VAE but not the schedule: a dev file with
      // schnell components (or the reverse) runs with its own variant's scheduler.
      if (file.guidance != folder.guidance)
        m.scheduler =
            file.guidance ? FlowMatchSchedulerConfig::flux1_dev() : FlowMatchSchedulerConfig::flux1_schnell();
      // A single file carries no config: a custom model's RoPE axes, theta and eps cannot be read
      // from its shapes. When the folder's own transformer has exactly the file's shapes (the file
      // is that transformer quantized, `fluxrt quantize --model FOLDER`), its config.json says them.
      const bool same =
          file.variant == "custom" && folder.hidden == file.hidden && folder.heads == file.heads &&
          folder.head_dim == file.head_dim && folder.double_blocks == file.double_blocks &&
          folder.single_blocks == file.single_blocks && folder.out_channels == file.out_channels &&
          folder.mlp_hidden == file.mlp_hidden && folder.guidance == file.guidance &&
          folder.timestep_channels == file.timestep_channels;
      if (same) m.transformer_config = folder;
    }
  } else if (fs::exists(transformer_config)) {
    m.transformer_config = models::flux1_config_from_json(transformer_config.string());
  } else {
    m.transformer_config = models::flux1_preset(info.shape.guidance_embed ? "flux.1-dev" : "flux.1-schnell");
  }
  set_variant_defaults(m.defaults, m.transformer_config.guidance);
  if (m.fill()) set_fill_defaults(m.defaults);
  if (!text_encoder_file.empty()) check_t5_file_fits(text_encoder_file, m.transformer_config);
  if (fs::exists(model_root / "vae" / "config.json"))
    m.vae_config = models::Flux1VaeConfig::from_json_file((model_root / "vae" / "config.json").string());
  // Any number of VAE levels works (diffusers derives vae_scale_factor from them); the 2x2-packed
  // latent channels must be what the transformer reads and writes (Fill reads the masked image's
  // too, and the mask's f x f pixels per latent pixel).
  const int64_t packed = 4 * m.vae_config.latent_channels, f = m.vae_config.spatial_factor();
  const int64_t reads = m.fill() ? 2 * packed + 4 * f * f : packed;
  FLUXRT_CHECK(m.transformer_config.in_channels == reads && m.transformer_config.out_channels == packed,
               ErrorCode::Unsupported,
               "flux.1 pipeline: {}: the VAE ({} latent channels, factor {}) does not fit the {} transformer "
               "({} input and {} output channels; {} and {} expected)",
               where, m.vae_config.latent_channels, f, kind->name, m.transformer_config.in_channels,
               m.transformer_config.out_channels, reads, packed);
  m.weights = pipeline_weight_bytes(model_root, options.dtype, transformer_file, text_encoder_file,
                                    options.transformer_linears);
  // FluxPipeline: height = width = default_sample_size (128) * vae_scale_factor.
  m.defaults.width = m.defaults.height = 128 * m.vae_config.spatial_factor();
  return m;
}

std::unique_ptr<models::Flux1Transformer> Flux1Pipeline::Impl::make_transformer() const {
  ScopedTimer span(options.profiler, kSpanLoadTransformer);
  models::Flux1LoadOptions o;
  o.dtype = options.dtype;
  o.device = options.device;
  o.linear_format = options.transformer_linears;
  o.loras = options.loras;
  if (!synthetic_variant.empty()) {
    o.release_prepared_sources = true;  // nothing else holds the random weights
    return models::Flux1Transformer::synthetic(transformer_config, synthetic_seed, o);
  }
  if (options.transformer_file.empty()) return models::Flux1Transformer::load(root.string(), o);
  // A single file has no config.json: the pipeline's config, which may be the folder's (when it
  // has the file's shapes), rather than the file's shapes alone.
  models::TensorStore raw = models::Flux1Transformer::open_checkpoint(options.transformer_file.string());
  raw.set_description(options.transformer_file.string());
  return models::Flux1Transformer::from_store(raw, transformer_config, o);
}

std::unique_ptr<Flux1TextEncoders> Flux1Pipeline::Impl::make_text_encoders(
    const std::vector<models::LoraSpec>& loras) const {
  ScopedTimer span(options.profiler, kSpanLoadTextEncoder);
  auto enc = std::make_unique<Flux1TextEncoders>();
  const bool synthetic = !synthetic_variant.empty();
  auto load_clip = [&] {
    enc->clip = make_clip(loras);
    enc->clip_tokenizer = std::make_unique<tokenizers::ClipTokenizer>(
        tokenizers::ClipTokenizer::from_directory(synthetic ? clip_tokenizer_dir : root / "tokenizer"));
  };
  // CLIP (small) on its own thread next to T5-XXL (9.5 GB), so neither waits for the other.
  load_components({load_clip, [&] { enc->t5 = make_t5(loras); }}, options.parallel_load);
  return enc;
}

std::unique_ptr<models::ClipTextModel> Flux1Pipeline::Impl::make_clip(
    const std::vector<models::LoraSpec>& loras) const {
  models::ClipTextOptions o;
  o.dtype = options.dtype;
  o.device = options.device;
  o.loras = loras;
  if (!synthetic_variant.empty())
    return std::make_unique<models::ClipTextModel>(
        models::ClipTextModel::synthetic(clip_config, o, synthetic_seed + 1));
  return std::make_unique<models::ClipTextModel>(models::ClipTextModel::load(root / "text_encoder", o));
}

std::unique_ptr<models::T5PromptEmbedder> Flux1Pipeline::Impl::make_t5(
    const std::vector<models::LoraSpec>& loras) const {
  models::T5EncoderOptions o;
  o.dtype = options.dtype;
  o.device = options.device;
  o.loras = loras;
  if (synthetic_variant.empty()) return models::T5PromptEmbedder::load(root, o, options.text_encoder_file);
  return std::make_unique<models::T5PromptEmbedder>(
      models::T5Encoder::synthetic(t5_config, o, synthetic_seed + 2),
      tokenizers::T5Tokenizer::from_directory(t5_tokenizer_dir));
}

std::unique_ptr<models::Flux1Vae> Flux1Pipeline::Impl::make_vae(bool with_encoder) const {
  ScopedTimer span(options.profiler, kSpanLoadVae);
  models::Flux1VaeOptions o;
  o.dtype = options.dtype;
  o.device = options.device;
  o.load_encoder = with_encoder;
  o.tiling = options.vae_tiling;
  if (!synthetic_variant.empty()) {
    const DType wdtype = options.dtype == DType::F32 ? DType::F32 : DType::BF16;
    return std::make_unique<models::Flux1Vae>(models::Flux1Vae::from_store(
        models::make_synthetic_flux1_vae(vae_config, wdtype, synthetic_seed + 3), vae_config, o));
  }
  return std::make_unique<models::Flux1Vae>(models::Flux1Vae::load((root / "vae").string(), o, vae_config));
}

void Flux1Pipeline::Impl::load_resident() {
  Stopwatch total;
  load_components(
      {[this] { text_encoders = make_text_encoders(options.loras); },
       [this] { transformer = make_transformer(); }, [this] { vae = make_vae(options.load_vae_encoder); }},
      options.parallel_load);
  transformer_config = transformer->config();
  if (options.cuda_graphs) step_graphs = std::make_unique<StepGraphCache>(options.device);
  if (options.profiler) options.profiler->add(kSpanLoadTotal, total.seconds());
}

// Resident components are borrowed; with free_text_encoder one missing is loaded here and kept
// (components load in the order the request uses them); in low-memory mode it is made for the
// stage and freed after it.
ComponentLease<models::Flux1Transformer> Flux1Pipeline::Impl::transformer_lease() {
  if (!transformer && options.text_encoder_apart()) {
    transformer = make_transformer();
    if (options.cuda_graphs) step_graphs = std::make_unique<StepGraphCache>(options.device);
  }
  if (transformer) return ComponentLease<models::Flux1Transformer>(transformer.get());
  return ComponentLease<models::Flux1Transformer>(make_transformer());
}

ComponentLease<Flux1TextEncoders> Flux1Pipeline::Impl::text_encoders_lease(
    const std::vector<models::LoraSpec>& loras) {
  if (text_encoders) return ComponentLease<Flux1TextEncoders>(text_encoders.get());
  if (transformer && options.text_encoder_apart()) {
    // The graphs replay the transformer's weights: they go with it.
    step_graphs.reset();
    transformer.reset();
    release_cached_host_blocks();  // the encoders about to load get that memory
  }
  return ComponentLease<Flux1TextEncoders>(make_text_encoders(loras));
}

ComponentLease<models::Flux1Vae> Flux1Pipeline::Impl::vae_lease(bool with_encoder) {
  if (!vae && options.text_encoder_apart()) vae = make_vae(with_encoder || options.load_vae_encoder);
  if (vae && (!with_encoder || vae->has_encoder())) return ComponentLease<models::Flux1Vae>(vae.get());
  return ComponentLease<models::Flux1Vae>(make_vae(with_encoder));
}

}  // namespace fluxrt::pipelines
