#include "runtime/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "io/public_image.h"
#include "io/sha256.h"
#include "pipelines/flux1_pipeline.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/pipeline.h"
#include "runtime/timing_report.h"

namespace fluxrt::runtime {
namespace fs = std::filesystem;

namespace {

models::TilingMode tiling_mode(fluxrt::VaeTiling tiling) {
  switch (tiling) {
    case fluxrt::VaeTiling::On:
      return models::TilingMode::Always;
    case fluxrt::VaeTiling::Off:
      return models::TilingMode::Never;
    case fluxrt::VaeTiling::Auto:
      break;
  }
  return models::TilingMode::Auto;
}

// Low-memory mode unless every component fits in RAM together with one image of the model's
// default size (what an engine opened without a request can know).
bool needs_low_memory(const ResolvedPipeline& pipeline, DType dtype) {
  const int factor = vae_scale_factor_of(pipeline.model);
  const pipelines::ResidentWeights weights = pipelines::pipeline_weight_bytes(
      pipeline.model.path, dtype, pipeline.transformer_file, pipeline.text_encoder_file);
  try {
    check_run_size(pipeline, 128 * factor, 128 * factor, 1, factor,
                   pipelines::MemoryCheck{weights.peak(false), 0, true});
    return false;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::OutOfMemory) throw;
    return true;
  }
}

}  // namespace

Engine::Engine(const std::string& model, const fluxrt::EngineOptions& options)
    : model_(model), options_(options), device_(Device::parse(options.device)) {
  options_.device = device_.str();
  dtype_ = options.precision == fluxrt::Precision::F32 ? DType::F32 : DType::BF16;
  if (options.threads) {
    FLUXRT_CHECK(*options.threads >= 0, ErrorCode::InvalidArgument, "threads {} must be >= 0",
                 *options.threads);
    set_num_threads(*options.threads);
  }
  resolved_ = resolve_pipeline(model, options.components, options.text_encoder);
  variant_ = variant_label(resolved_);
  if (!options_.low_memory) options_.low_memory = needs_low_memory(resolved_, dtype_);

  pipelines::PipelineOptions p;
  p.dtype = dtype_;
  p.device = device_;
  p.low_memory = *options_.low_memory;
  p.cuda_graphs = options.cuda_graphs;
  p.transformer_file = resolved_.transformer_file;
  p.text_encoder_file = resolved_.text_encoder_file;
  p.load_vae_encoder = options.vae_encoder;
  for (const fluxrt::Lora& l : options.loras) p.loras.push_back({l.path, l.strength});
  p.vae_tiling.mode = tiling_mode(options.vae_tiling);
  p.profiler = &profiler_;

  Stopwatch watch;
  pipeline_ = resolved_.kind->load(resolved_.model.path, p);
  // In low-memory mode the components load per request, inside generate's timings.
  if (!p.low_memory) {
    load_ = load_timings_from(profiler_);
    if (load_->total_s == 0) load_->total_s = watch.seconds();
  }
  profiler_.clear();
}

Engine::~Engine() = default;

fluxrt::ModelDefaults Engine::defaults() const {
  const pipelines::RequestDefaults f = pipeline_->request_defaults();
  fluxrt::ModelDefaults d;
  d.steps = f.num_steps;
  d.guidance = f.guidance_scale;
  d.width = f.width;
  d.height = f.height;
  d.max_sequence_length = f.max_sequence_length;
  d.size_multiple = 2 * pipeline_->vae_scale_factor();
  d.img2img_guidance = f.img2img_guidance_scale;
  d.img2img_strength = f.img2img_strength;
  return d;
}

fluxrt::RequestPlan Engine::plan(const fluxrt::GenerateRequest& request) const {
  const fluxrt::ModelDefaults d = defaults();
  const bool img2img = request.init_image.has_value();
  fluxrt::RequestPlan plan;
  plan.width = d.width;
  plan.height = d.height;
  if (pipeline_->kind().reference_images && !request.reference_images.empty()) {
    const fluxrt::Image& first = request.reference_images.front();
    reference_run_size(first.width, first.height, d.size_multiple / 2, &plan.width, &plan.height);
  }
  plan.width = request.width.value_or(plan.width);
  plan.height = request.height.value_or(plan.height);
  plan.steps = request.steps.value_or(d.steps);
  plan.steps_run = plan.steps;
  plan.guidance = request.guidance.value_or(img2img && d.img2img_guidance ? *d.img2img_guidance : d.guidance);
  plan.max_sequence_length = request.max_sequence_length.value_or(d.max_sequence_length);
  plan.images = static_cast<int>(request.prompts.size()) * request.images_per_prompt;
  if (img2img && pipeline_->kind().img2img) {
    plan.strength = request.strength.value_or(*d.img2img_strength);
    plan.steps_run = plan.steps - pipelines::flux1_img2img_start_index(plan.steps, *plan.strength);
  }
  return plan;
}

fluxrt::ModelInfo Engine::info() const {
  std::lock_guard<std::mutex> lock(info_mutex_);
  if (!info_) info_ = fluxrt::inspect_model(model_);
  return *info_;
}

pipelines::GenerateRequest Engine::pipeline_request(const fluxrt::GenerateRequest& request) const {
  pipelines::GenerateRequest r;
  r.prompts = request.prompts;
  r.negative_prompt = request.negative_prompt;
  r.images_per_prompt = request.images_per_prompt;
  r.width = request.width;
  r.height = request.height;
  r.num_steps = request.steps;
  r.guidance_scale = request.guidance;
  r.max_sequence_length =
      request.max_sequence_length.value_or(pipeline_->request_defaults().max_sequence_length);
  r.seed = request.seed;
  // A torn image buffer is the caller's request at fault: say which field.
  auto image_of = [](const fluxrt::Image& image, const std::string& what, const char* field) {
    try {
      return io::from_public(image, what.c_str());
    } catch (const Error& e) {
      throw Error(e.code(), e.what(), field);
    }
  };
  for (size_t i = 0; i < request.reference_images.size(); ++i)
    r.reference_images.push_back(
        image_of(request.reference_images[i], fmt::format("reference image {}", i + 1), "reference_images"));
  if (request.init_image) r.init_image = image_of(*request.init_image, "init image", "init_image");
  r.strength = request.strength;
  r.true_cfg_scale = request.true_cfg;
  for (const fluxrt::Lora& l : request.loras) r.loras.push_back({l.path, l.strength});
  return r;
}

fluxrt::ImageMetadata Engine::image_metadata(const fluxrt::GenerateRequest& request,
                                             const pipelines::GenerateRequest& ran,
                                             const pipelines::GenerateResult& result, int index) const {
  fluxrt::ImageMetadata m;
  m.prompt_index = index / request.images_per_prompt;
  m.image_index = index % request.images_per_prompt;
  m.prompt = request.prompts.at(static_cast<size_t>(m.prompt_index));
  m.negative_prompt = request.negative_prompt;
  m.seed = request.seed;
  m.index = index;
  m.count = static_cast<int>(request.prompts.size()) * request.images_per_prompt;
  m.steps = result.num_steps;
  m.scheduled_steps = result.schedule.num_steps();
  m.guidance = result.guidance_scale;
  m.width = result.width;
  m.height = result.height;
  m.max_sequence_length = ran.max_sequence_length;
  m.model = model_;
  m.variant = variant_;
  m.dtype = std::string(dtype_name(dtype_));
  m.version = FLUXRT_VERSION_STRING;
  m.reference_images = request.reference_image_names;
  m.reference_images.resize(std::max(m.reference_images.size(), request.reference_images.size()));
  // Only the families with img2img and true CFG (FLUX.1) take them; the others refuse both.
  const pipelines::PipelineKind& kind = pipeline_->kind();
  if (kind.img2img && request.init_image) {
    m.img2img = true;
    m.init_image = request.init_image_name;
    m.strength = request.strength ? request.strength : pipeline_->request_defaults().img2img_strength;
  }
  if (kind.true_cfg && result.used_cfg) m.true_cfg = request.true_cfg;
  for (const auto* list : {&options_.loras, &request.loras})
    for (const fluxrt::Lora& l : *list)
      m.loras.push_back({fs::path(l.path).filename().string(), l.strength, lora_hash(l.path)});
  return m;
}

std::string Engine::lora_hash(const std::string& path) const {
  std::lock_guard<std::mutex> lock(hash_mutex_);
  auto it = lora_hashes_.find(path);
  if (it == lora_hashes_.end()) it = lora_hashes_.emplace(path, io::sha256_file_hex(path)).first;
  return it->second;
}

std::string Engine::batch_key(const fluxrt::GenerateRequest& request) const {
  // Reference and init images are per request inputs of the loop (tokens, the start latents).
  if (!request.reference_images.empty() || request.init_image) return "";
  const fluxrt::RequestPlan p = plan(request);
  // The negative prompt last, with its length, so no prompt text can make two keys collide.
  // The LoRA set before it: each path with its length, so no path can make two keys collide.
  std::string loras;
  for (const fluxrt::Lora& l : request.loras)
    loras += fmt::format("{}:{}:{} ", l.path.size(), l.path, l.strength);
  return fmt::format("{}x{} steps {} guidance {} true_cfg {} text {} loras [{}] negative {}:{}", p.width,
                     p.height, p.steps, p.guidance,
                     request.true_cfg ? fmt::format("{}", *request.true_cfg) : "unset", p.max_sequence_length,
                     loras, request.negative_prompt.size(), request.negative_prompt);
}

fluxrt::GenerateResult Engine::generate(const fluxrt::GenerateRequest& request,
                                        const fluxrt::Callbacks& callbacks) {
  std::vector<fluxrt::GenerateResult> results = run({&request}, callbacks);
  return std::move(results.front());
}

std::vector<fluxrt::GenerateResult> Engine::generate_batch(
    const std::vector<fluxrt::GenerateRequest>& requests, const fluxrt::Callbacks& callbacks) {
  FLUXRT_CHECK(!requests.empty(), ErrorCode::InvalidArgument, "generate_batch: no requests");
  std::vector<const fluxrt::GenerateRequest*> batch;
  const std::string key = requests.size() > 1 ? batch_key(requests.front()) : std::string();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests.size() > 1) {
      FLUXRT_CHECK(
          !key.empty() && batch_key(requests[i]) == key, ErrorCode::InvalidArgument,
          "generate_batch: request {} cannot join the batch (reference or init images, or its size, steps, "
          "guidance, true CFG, text length, LoRAs or negative prompt differ from request 1)",
          i + 1);
    }
    batch.push_back(&requests[i]);
  }
  return run(batch, callbacks);
}

std::vector<fluxrt::GenerateResult> Engine::run(const std::vector<const fluxrt::GenerateRequest*>& requests,
                                                const fluxrt::Callbacks& callbacks) {
  std::lock_guard<std::mutex> lock(generate_mutex_);
  pipelines::GenerateRequest r = pipeline_request(*requests.front());
  if (requests.size() > 1) {
    // One prompt list; each request's images keep their own count and their own generator.
    r.prompts.clear();
    for (const fluxrt::GenerateRequest* q : requests) {
      FLUXRT_CHECK_FIELD(q->images_per_prompt >= 1, ErrorCode::InvalidArgument, "images_per_prompt",
                         "generate: images_per_prompt {} < 1", q->images_per_prompt);
      for (const std::string& prompt : q->prompts) {
        r.prompts.push_back(prompt);
        r.prompt_repeats.push_back(q->images_per_prompt);
      }
      r.noise_groups.push_back({q->seed, static_cast<int64_t>(q->prompts.size()) * q->images_per_prompt});
    }
  }
  r.cancel = callbacks.cancel.flag();
  double elapsed = 0;
  // The pipeline hands a step's previews over just before that step's on_step.
  std::vector<fluxrt::Image> previews;
  if (callbacks.on_progress) {
    if (!callbacks.preview_steps.empty()) {
      r.preview_steps = callbacks.preview_steps;
      r.on_preview = [&](int, std::vector<io::Image> images) {
        previews.clear();
        for (io::Image& image : images) previews.push_back(io::to_public(std::move(image)));
      };
    }
    r.on_step = [&](int step, int total, double seconds, float timestep) {
      elapsed += seconds;
      fluxrt::Progress p;
      p.step = step;
      p.total = total;
      p.step_seconds = seconds;
      p.timestep = timestep;
      p.elapsed_seconds = elapsed;
      p.eta_seconds = step > 0 ? elapsed / step * (total - step) : 0;
      p.previews = std::move(previews);
      previews.clear();
      callbacks.on_progress(p);
    };
  }

  profiler_.clear();
  Stopwatch watch;
  pipelines::GenerateResult out = pipeline_->generate(r);
  RunTimings run = run_timings_from(profiler_);
  run.total_s = watch.seconds();
  if (options_.cuda_graphs) run.graph_steps = out.graph_steps;

  std::vector<fluxrt::GenerateResult> results;
  size_t first_image = 0;  // of this request in the batch's images
  for (const fluxrt::GenerateRequest* q : requests) {
    fluxrt::GenerateResult result;
    result.width = out.width;
    result.height = out.height;
    result.steps = out.num_steps;
    result.guidance = out.guidance_scale;
    result.used_cfg = out.used_cfg;
    result.graph_steps = out.graph_steps;
    const size_t count = q->prompts.size() * static_cast<size_t>(q->images_per_prompt);
    FLUXRT_CHECK(first_image + count <= out.images.size(), ErrorCode::Internal,
                 "generate: the pipeline returned {} images for a batch of more", out.images.size());
    for (size_t i = 0; i < count; ++i) {
      fluxrt::GeneratedImage g;
      g.metadata = image_metadata(*q, r, out, static_cast<int>(i));
      g.image = io::to_public(std::move(out.images[first_image + i]));
      result.images.push_back(std::move(g));
    }
    first_image += count;
    TimingReport& t = result.timing;
    t.model = model_;
    t.variant = variant_;
    t.dtype = std::string(dtype_name(dtype_));
    t.device = device_.str();
    t.width = out.width;
    t.height = out.height;
    t.images = static_cast<int>(result.images.size());
    t.threads = num_threads();
    t.cold_load = load_;
    t.run = run;  // the whole batch's
    t.total_s = run.total_s;
    t.peak_rss_bytes = process_peak_rss_bytes();
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace fluxrt::runtime
