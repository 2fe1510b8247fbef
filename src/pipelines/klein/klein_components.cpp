// Component sources and loading for Flux2KleinPipeline (see klein_components.h).
#include "pipelines/klein/klein_components.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/timer.h"
#include "io/model_discovery.h"
#include "io/safetensors.h"
#include "models/flux/flux2_names.h"
#include "models/qwen3/qwen3_file.h"
#include "pipelines/spans.h"
#include "pipelines/variant.h"
#include "tokenizers/bpe_tokenizer.h"

namespace fluxrt::pipelines {
namespace fs = std::filesystem;
namespace {

void require_tokenizer(const fs::path& dir, const std::string& what) {
  FLUXRT_CHECK(fs::is_directory(dir), ErrorCode::NotFound, "{}: no tokenizer folder {}", what, dir.string());
  const bool has_json = fs::exists(dir / "tokenizer.json");
  const bool has_vocab = fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt");
  FLUXRT_CHECK(has_json || has_vocab, ErrorCode::NotFound,
               "{}: no Qwen3 tokenizer in {} (need tokenizer.json or vocab.json + merges.txt)", what,
               dir.string());
}

void set_variant_defaults(KleinModelDefaults& d, bool distilled) {
  // diffusers' __call__ defaults are the base model's (50 steps, guidance 4); distilled klein is
  // meant to run at 4 steps, where its guidance is ignored.
  d.is_distilled = distilled;
  d.num_steps = distilled ? 4 : 50;
  d.guidance_scale = distilled ? 1.0f : 4.0f;
}

// Flux2KleinKVPipeline: 4 steps and no guidance argument at all, whatever is_distilled says.
void set_reference_kv(KleinModelDefaults& d) {
  set_variant_defaults(d, true);
  d.reference_kv = true;
}

// "flux.2-klein-9b-kv" runs the 9B shapes with the KV recipe; "...-tiny-kv" the tiny ones.
std::string without_kv_suffix(const std::string& variant, bool* kv) {
  const std::string suffix = "-kv";
  *kv = variant.size() > suffix.size() &&
        variant.compare(variant.size() - suffix.size(), suffix.size(), suffix) == 0;
  return *kv ? variant.substr(0, variant.size() - suffix.size()) : variant;
}

// Any number of VAE levels works (diffusers derives vae_scale_factor from them); the 2x2 patch
// and the packed channel count must match what the transformer reads.
void check_vae_geometry(const models::Flux2VaeConfig& vae, const models::Flux2Config& transformer,
                        const std::string& where) {
  FLUXRT_CHECK(
      vae.patch_size == 2 && vae.packed_channels() == transformer.in_channels, ErrorCode::Unsupported,
      "{}: the VAE gives {} latent channels x patch {}x{} = {} per token, the transformer reads {}", where,
      vae.latent_channels, vae.patch_size, vae.patch_size, vae.packed_channels(), transformer.in_channels);
}

// The config of a single transformer checkpoint: the named preset when its shapes are a released
// variant (headers only), else detected from the tensors themselves (custom sizes).
models::Flux2Config flux2_config_of_file(const fs::path& file, const VariantInfo& info) {
  if (info.variant == "flux.2-klein-4b" || info.variant == "flux.2-klein-9b")
    return models::flux2_preset(info.variant);
  models::TensorStore raw = models::TensorStore::open(file.string());  // safetensors or GGUF
  raw.set_description(file.string());
  return models::flux2_config_detect(models::flux2_to_canonical(raw));
}

// --model FILE with another folder's components: the transformer must read what the folder's
// text encoder and VAE produce.
void check_transformer_file_fits(const models::Flux2Config& file_config, const fs::path& file,
                                 const fs::path& model_root) {
  const fs::path folder_config = model_root / "transformer" / "config.json";
  if (!fs::exists(folder_config)) return;  // nothing to compare with; the load checks shapes
  const models::Flux2Config folder = models::flux2_config_from_json(folder_config.string());
  FLUXRT_CHECK(
      file_config.context_dim == folder.context_dim && file_config.in_channels == folder.in_channels,
      ErrorCode::Unsupported,
      "klein pipeline: transformer file {} (text width {}, {} latent channels) does not fit the components "
      "of {} (made for text width {}, {} latent channels): use components of the same variant",
      file.string(), file_config.context_dim, file_config.in_channels, model_root.string(),
      folder.context_dim, folder.in_channels);
}

// --text-encoder FILE: a Qwen3 whose three stacked hidden states are the transformer's text width.
// Headers only (the weights load with the encoder), so a wrong file fails when the pipeline opens,
// not at its first request in low-memory mode.
void check_text_encoder_file_fits(const fs::path& file, const models::Flux2Config& transformer) {
  FLUXRT_CHECK(fs::is_regular_file(file), ErrorCode::NotFound,
               "klein pipeline: text encoder file {} not found", file.string());
  const models::Qwen3Config c = models::qwen3_config_of_file(file, models::qwen3_store_of_file(file));
  const int64_t width = static_cast<int64_t>(models::kKleinHiddenStateTaps.size()) * c.hidden_size;
  FLUXRT_CHECK(width == transformer.context_dim, ErrorCode::Unsupported,
               "klein pipeline: text encoder file {} (Qwen3 hidden size {}: text width {}) does not fit the "
               "transformer (text width {}): use the Qwen3 of the same klein variant",
               file.string(), c.hidden_size, width, transformer.context_dim);
  FLUXRT_CHECK(
      c.num_layers >= models::kKleinHiddenStateTaps.back(), ErrorCode::Unsupported,
      "klein pipeline: text encoder file {} has {} layers; klein reads the hidden state after layer {}",
      file.string(), c.num_layers, models::kKleinHiddenStateTaps.back());
}

// A single file carries no config: a custom model's RoPE axes, theta and eps cannot be read from
// its shapes. When the components folder's own transformer has exactly the file's shapes (the
// file is that transformer quantized, `fluxrt quantize --model FOLDER`), its config.json says them.
models::Flux2Config folder_config_when_same_shapes(const models::Flux2Config& file,
                                                   const fs::path& model_root) {
  const fs::path json = model_root / "transformer" / "config.json";
  if (file.variant != "custom" || !fs::exists(json)) return file;
  const models::Flux2Config folder = models::flux2_config_from_json(json.string());
  const bool same = folder.hidden == file.hidden && folder.heads == file.heads &&
                    folder.head_dim == file.head_dim && folder.double_blocks == file.double_blocks &&
                    folder.single_blocks == file.single_blocks && folder.in_channels == file.in_channels &&
                    folder.out_channels == file.out_channels && folder.context_dim == file.context_dim &&
                    folder.mlp_hidden == file.mlp_hidden &&
                    folder.timestep_channels == file.timestep_channels;
  return same ? folder : file;
}

}  // namespace

// The shapes of tests/data/models/flux2-klein-tiny (tools/reference/make_tiny_models.py): the
// real structure (head_dim 128, 36 Qwen3 layers with the 9/18/27 taps, 4 VAE levels, 32 latent
// channels) at widths that run in milliseconds, for smoke tests of the synthetic path.
void Flux2KleinPipeline::Impl::set_tiny_configs(Impl& m) {
  models::Flux2Config& t = m.transformer_config;
  t.variant = "custom";
  t.hidden = 128, t.heads = 1, t.head_dim = 128, t.double_blocks = 1, t.single_blocks = 1;
  t.context_dim = 24, t.mlp_hidden = 384;
  models::Qwen3Config& q = m.text_config;
  q.hidden_size = 8, q.intermediate_size = 24, q.num_layers = 36, q.num_heads = 2, q.num_kv_heads = 1;
  q.head_dim = 16;
  m.vae_config.block_out_channels = {8, 16, 16, 16};
  m.vae_config.norm_num_groups = 4;
}

Flux2KleinPipeline::Impl Flux2KleinPipeline::Impl::from_folder(const fs::path& model_root,
                                                               const PipelineOptions& options) {
  const std::string where = model_root.string();
  FLUXRT_CHECK(fs::exists(model_root), ErrorCode::NotFound, "klein pipeline: model folder {} does not exist",
               where);
  FLUXRT_CHECK(fs::exists(model_root / "model_index.json"), ErrorCode::NotFound,
               "klein pipeline: {} is not a diffusers pipeline folder (no model_index.json)", where);
  const io::ResolvedModel model = io::resolve_model(where);
  FLUXRT_CHECK(model.pipeline_class.empty() || flux2_klein_kind().accepts_class(model.pipeline_class),
               ErrorCode::Unsupported, "klein pipeline: {} holds a {}, not a {}", where, model.pipeline_class,
               flux2_klein_kind().pipeline_class);
  const fs::path& transformer_file = options.transformer_file;
  const fs::path& text_encoder_file = options.text_encoder_file;
  for (const char* component : {"transformer", "text_encoder", "tokenizer", "vae", "scheduler"}) {
    if (!transformer_file.empty() && std::string(component) == "transformer") continue;
    if (!text_encoder_file.empty() && std::string(component) == "text_encoder") continue;
    FLUXRT_CHECK(fs::is_directory(model_root / component), ErrorCode::NotFound,
                 "klein pipeline: {} has no {}/ folder", where, component);
  }
  require_tokenizer(model_root / "tokenizer", "klein pipeline");

  Impl m;
  m.root = model_root;
  m.options = options;
  set_variant_defaults(m.defaults, model.is_distilled.value_or(false));  // diffusers' default: not distilled
  if (flux2_klein_kind().detection.reference_kv_from_class(model.pipeline_class))
    set_reference_kv(m.defaults);
  m.scheduler = load_flow_match_scheduler_config(model_root);
  m.scheduler.validate();
  if (!transformer_file.empty()) {
    FLUXRT_CHECK(fs::is_regular_file(transformer_file), ErrorCode::NotFound,
                 "klein pipeline: transformer file {} not found", transformer_file.string());
    const VariantInfo info = detect_variant(io::resolve_model(transformer_file.string()), &model);
    FLUXRT_CHECK(flux2_klein_kind().takes_transformer(info), ErrorCode::Unsupported,
                 "klein pipeline: {} is not a FLUX.2 klein transformer ({})", transformer_file.string(),
                 info.description);
    m.transformer_config = flux2_config_of_file(transformer_file, info);
    check_transformer_file_fits(m.transformer_config, transformer_file, model_root);
    m.transformer_config = folder_config_when_same_shapes(m.transformer_config, model_root);
    // The components folder's model_index.json says distilled or base; a file name (BFL names the
    // base files "...-base-...") is taken only where it says nothing, and a disagreement is a note
    // the run shows, never a silent choice.
    if (info.distilled && info.distilled_from == "file name")
      set_variant_defaults(m.defaults, *info.distilled);
    m.defaults.notes = info.notes;
    if (info.reference_kv && !m.defaults.reference_kv) {
      set_reference_kv(m.defaults);
      m.defaults.notes.push_back(fmt::format(
          "{}: running it as FLUX.2-klein-9B-KV (reference images as cached keys and values), as its {} says",
          transformer_file.filename().string(), info.reference_kv_from));
    }
    for (const std::string& note : m.defaults.notes) FLUXRT_LOG_WARN("{}", note);
  } else if (fs::exists(model_root / "transformer" / "config.json")) {
    m.transformer_config =
        models::flux2_config_from_json((model_root / "transformer" / "config.json").string());
  }
  if (!text_encoder_file.empty()) check_text_encoder_file_fits(text_encoder_file, m.transformer_config);
  if (fs::exists(model_root / "vae" / "config.json"))
    m.vae_config = models::Flux2VaeConfig::from_json_file((model_root / "vae" / "config.json").string());
  check_vae_geometry(m.vae_config, m.transformer_config, where);
  m.weights = pipeline_weight_bytes(model_root, options.dtype, transformer_file, text_encoder_file,
                                    options.transformer_linears);
  // Flux2KleinPipeline: height = width = default_sample_size (128) * vae_scale_factor.
  m.defaults.width = m.defaults.height = 128 * m.vae_config.spatial_factor();
  return m;
}

Flux2KleinPipeline::Impl Flux2KleinPipeline::Impl::from_variant(const std::string& variant,
                                                                const fs::path& tokenizer_dir,
                                                                const PipelineOptions& options,
                                                                uint64_t seed) {
  Impl m;
  bool kv = false;
  const std::string shapes = without_kv_suffix(variant, &kv);
  if (shapes == kKleinTinySyntheticVariant) {
    set_tiny_configs(m);
  } else {
    m.transformer_config = models::flux2_preset(shapes);  // InvalidArgument listing the known names
    const bool nine_b = shapes.find("9b") != std::string::npos;
    m.text_config = nine_b ? models::Qwen3Config::qwen3_8b() : models::Qwen3Config::qwen3_4b();
  }
  require_tokenizer(tokenizer_dir, "synthetic " + variant);
  m.synthetic_variant = variant;
  m.tokenizer_dir = tokenizer_dir;
  m.synthetic_seed = seed;
  m.options = options;
  set_variant_defaults(m.defaults, variant.find("base") == std::string::npos);
  if (kv) set_reference_kv(m.defaults);
  m.scheduler = FlowMatchSchedulerConfig::flux2_klein();
  return m;
}

std::unique_ptr<models::Flux2Transformer> Flux2KleinPipeline::Impl::make_transformer() const {
  ScopedTimer span(options.profiler, kSpanLoadTransformer);
  models::Flux2LoadOptions o;
  o.dtype = options.dtype;
  o.device = options.device;
  o.linear_format = options.transformer_linears;
  o.loras = options.loras;
  if (!synthetic_variant.empty()) {
    o.release_prepared_sources = true;  // nothing else holds the random weights
    o.synthetic_weights = options.synthetic_weights;
    return models::Flux2Transformer::synthetic(transformer_config, synthetic_seed, o);
  }
  if (options.transformer_file.empty()) return models::Flux2Transformer::load(root.string(), o);
  // A single file has no config.json: the pipeline's config, which may be the folder's
  // (folder_config_when_same_shapes), rather than the file's shapes alone.
  models::TensorStore raw = models::TensorStore::open(options.transformer_file.string());
  raw.set_description(options.transformer_file.string());
  return models::Flux2Transformer::from_store(raw, transformer_config, o);
}

std::unique_ptr<models::KleinPromptEmbedder> Flux2KleinPipeline::Impl::make_embedder() const {
  ScopedTimer span(options.profiler, kSpanLoadTextEncoder);
  models::Qwen3EncoderOptions o;
  o.dtype = options.dtype;
  o.device = options.device;
  o.synthetic_weights = options.synthetic_weights;
  if (!synthetic_variant.empty()) {
    return std::make_unique<models::KleinPromptEmbedder>(
        models::Qwen3Encoder::synthetic(text_config, o, synthetic_seed + 1),
        tokenizers::BpeTokenizer::from_directory(tokenizer_dir));
  }
  return models::KleinPromptEmbedder::load(root, o, options.text_encoder_file);
}

std::unique_ptr<models::Flux2Vae> Flux2KleinPipeline::Impl::make_vae(bool with_encoder) const {
  ScopedTimer span(options.profiler, kSpanLoadVae);
  models::Flux2VaeOptions o;
  o.dtype = options.dtype;
  o.device = options.device;
  o.load_encoder = with_encoder;
  o.tiling = options.vae_tiling;
  if (!synthetic_variant.empty()) {
    const DType wdtype = options.dtype == DType::F32 ? DType::F32 : DType::BF16;
    return std::make_unique<models::Flux2Vae>(models::Flux2Vae::from_store(
        models::make_synthetic_flux2_vae(vae_config, wdtype, synthetic_seed + 2), vae_config, o));
  }
  return std::make_unique<models::Flux2Vae>(models::Flux2Vae::load(root.string(), o, vae_config));
}

void Flux2KleinPipeline::Impl::load_resident() {
  Stopwatch total;
  load_components({[this] { embedder = make_embedder(); }, [this] { transformer = make_transformer(); },
                   [this] { vae = make_vae(options.load_vae_encoder); }},
                  options.parallel_load);
  transformer_config = transformer->config();  // the weights' own config when config.json was absent
  if (options.cuda_graphs) step_graphs = std::make_unique<StepGraphCache>(options.device);
  if (options.profiler) options.profiler->add(kSpanLoadTotal, total.seconds());
}

// Resident components are borrowed; with free_text_encoder one missing is loaded here and kept
// (components load in the order the request uses them); in low-memory mode it is made for the
// stage and freed after it.
ComponentLease<models::Flux2Transformer> Flux2KleinPipeline::Impl::transformer_lease() {
  if (!transformer && options.text_encoder_apart()) {
    transformer = make_transformer();
    if (options.cuda_graphs) step_graphs = std::make_unique<StepGraphCache>(options.device);
  }
  if (transformer) return ComponentLease<models::Flux2Transformer>(transformer.get());
  return ComponentLease<models::Flux2Transformer>(make_transformer());
}

ComponentLease<models::KleinPromptEmbedder> Flux2KleinPipeline::Impl::embedder_lease() {
  if (embedder) return ComponentLease<models::KleinPromptEmbedder>(embedder.get());
  if (transformer && options.text_encoder_apart()) {
    // The graphs replay the transformer's weights: they go with it.
    step_graphs.reset();
    transformer.reset();
    release_cached_host_blocks();  // the encoder about to load gets that memory
  }
  return ComponentLease<models::KleinPromptEmbedder>(make_embedder());
}

ComponentLease<models::Flux2Vae> Flux2KleinPipeline::Impl::vae_lease(bool with_encoder) {
  if (!vae && options.text_encoder_apart()) vae = make_vae(with_encoder || options.load_vae_encoder);
  if (vae && (!with_encoder || vae->has_encoder())) return ComponentLease<models::Flux2Vae>(vae.get());
  return ComponentLease<models::Flux2Vae>(make_vae(with_encoder));
}

}  // namespace fluxrt::pipelines
