#include "runtime/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "io/public_image.h"
#include "io/sha256.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/pipeline.h"
#include "pipelines/request_plan.h"
#include "pipelines/step_cache.h"
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
bool needs_low_memory(const ResolvedPipeline& pipeline, fluxrt::Precision precision,
                      bool text_encoder_apart) {
  const int factor = vae_scale_factor_of(pipeline.model);
  const pipelines::ResidentWeights weights =
      pipelines::pipeline_weight_bytes(pipeline.model.path, dtype_of(precision), pipeline.transformer_file,
                                       pipeline.text_encoder_file, transformer_linears_of(precision));
  try {
    pipeline.kind->validate_size(128 * factor, 128 * factor, 1, factor,
                                 pipelines::MemoryCheck{weights.peak(false, text_encoder_apart), 0, true});
    return false;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::OutOfMemory) throw;
    return true;
  }
}

}  // namespace

DType dtype_of(fluxrt::Precision precision) {
  return precision == fluxrt::Precision::F32 ? DType::F32 : DType::BF16;
}

nn::LinearFormat transformer_linears_of(fluxrt::Precision precision) {
  return precision == fluxrt::Precision::Int8 ? nn::LinearFormat::Int8 : nn::LinearFormat::Native;
}

Engine::Engine(const std::string& model, const fluxrt::EngineOptions& options)
    : Engine(model, resolve_pipeline(model, options.components, options.text_encoder), options) {}

Engine::Engine(const std::string& model, ResolvedPipeline resolved, const fluxrt::EngineOptions& options)
    : model_(model), options_(options), device_(Device::parse(options.device)) {
  options_.device = device_.str();
  // Said here, before any loading, rather than by the first linear prepared on the device.
  FLUXRT_CHECK(options.precision != fluxrt::Precision::Int8 || device_.is_cpu(), ErrorCode::Unsupported,
               "precision int8 runs on the CPU only ({} has no int8 linears); use bf16 there", device_.str());
  dtype_ = dtype_of(options.precision);
  if (options.threads) {
    FLUXRT_CHECK(*options.threads >= 0, ErrorCode::InvalidArgument, "threads {} must be >= 0",
                 *options.threads);
    set_num_threads(*options.threads);
  }
  resolved_ = std::move(resolved);
  variant_ = variant_label(resolved_);
  if (!options_.low_memory)
    options_.low_memory = needs_low_memory(resolved_, options.precision, options.free_text_encoder);

  pipelines::PipelineOptions p;
  p.dtype = dtype_;
  p.device = device_;
  p.transformer_linears = transformer_linears_of(options.precision);
  p.low_memory = *options_.low_memory;
  p.free_text_encoder = options.free_text_encoder;
  p.cuda_graphs = options.cuda_graphs;
  p.transformer_file = resolved_.transformer_file;
  p.text_encoder_file = resolved_.text_encoder_file;
  p.load_vae_encoder = options.vae_encoder;
  for (const fluxrt::Lora& l : options.loras) p.loras.push_back({l.path, l.strength});
  p.vae_tiling.mode = tiling_mode(options.vae_tiling);
  p.profiler = &profiler_;

  Stopwatch watch;
  pipeline_ = resolved_.kind->load(resolved_.model.path, p);
  // In low-memory mode, and with the text encoder apart, the components load in the requests,
  // inside generate's timings.
  if (!p.components_made_by_requests()) {
    load_ = load_timings_from(profiler_);
    if (load_->total_s == 0) load_->total_s = watch.seconds();
  }
  profiler_.clear();
}

Engine::~Engine() = default;

fluxrt::ModelDefaults Engine::defaults() const { return pipeline_->facts().defaults; }
fluxrt::RequestLimits Engine::limits() const { return pipeline_->facts().limits; }
fluxrt::RequestPlan Engine::plan(const fluxrt::GenerateRequest& request) const {
  return pipeline_->plan(request);
}

fluxrt::ModelInfo Engine::info() const {
  std::lock_guard<std::mutex> lock(info_mutex_);
  if (!info_) info_ = fluxrt::inspect_model(model_);
  return *info_;
}

fluxrt::ImageMetadata Engine::image_metadata(const pipelines::PlannedRequest& planned,
                                             const pipelines::GenerateResult& result, int index) const {
  const fluxrt::GenerateRequest& request = *planned.request;
  const fluxrt::RequestPlan& plan = planned.plan;
  fluxrt::ImageMetadata m;
  m.prompt_index = index / request.images_per_prompt;
  m.image_index = index % request.images_per_prompt;
  m.prompt = request.prompts.at(static_cast<size_t>(m.prompt_index));
  m.negative_prompt = request.negative_prompt.value_or("");
  m.seed = request.seed;
  m.index = index;
  m.count = plan.images;
  m.steps = result.num_steps;
  m.scheduled_steps = result.schedule.num_steps();
  m.guidance = result.guidance_scale;
  m.width = result.width;
  m.height = result.height;
  m.max_sequence_length = plan.max_sequence_length;
  m.model = model_;
  m.variant = variant_;
  m.dtype = fluxrt::precision_name(options_.precision);
  m.version = FLUXRT_VERSION_STRING;
  m.reference_images = request.reference_image_names;
  m.reference_images.resize(std::max(m.reference_images.size(), request.reference_images.size()));
  if (request.init_image) {
    m.img2img = true;
    m.init_image = request.init_image_name;
    if (request.mask_image) m.mask = request.mask_image_name;
    m.padding_mask_crop = request.padding_mask_crop;
    m.strength = plan.strength;
  }
  m.true_cfg = plan.true_cfg;
  if (plan.cache) {
    m.cache = pipelines::cache_text(*plan.cache);
    m.cache_steps = result.cache_steps;
  }
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
  return pipelines::batch_key(request, plan(request));
}

fluxrt::GenerateResult Engine::generate(const fluxrt::GenerateRequest& request,
                                        const fluxrt::Callbacks& callbacks) {
  std::vector<fluxrt::GenerateResult> results = run({{&request, plan(request)}}, callbacks);
  return std::move(results.front());
}

std::vector<fluxrt::GenerateResult> Engine::generate_batch(
    const std::vector<fluxrt::GenerateRequest>& requests, const fluxrt::Callbacks& callbacks) {
  FLUXRT_CHECK(!requests.empty(), ErrorCode::InvalidArgument, "generate_batch: no requests");
  std::vector<pipelines::PlannedRequest> batch;
  std::string key;
  for (size_t i = 0; i < requests.size(); ++i) {
    batch.push_back({&requests[i], plan(requests[i])});
    if (requests.size() == 1) break;
    const std::string own = pipelines::batch_key(requests[i], batch.back().plan);
    if (i == 0) key = own;
    FLUXRT_CHECK(
        !own.empty() && own == key, ErrorCode::InvalidArgument,
        "generate_batch: request {} cannot join the batch (reference or init images, or its size, steps, "
        "guidance, CFG, text length, LoRAs, step cache or negative prompt differ from request 1; a "
        "First-Block "
        "Cache request runs alone)",
        i + 1);
  }
  return run(batch, callbacks);
}

std::vector<fluxrt::GenerateResult> Engine::run(const std::vector<pipelines::PlannedRequest>& batch,
                                                const fluxrt::Callbacks& callbacks) {
  std::lock_guard<std::mutex> lock(generate_mutex_);
  pipelines::CallContext call;
  call.cancel = callbacks.cancel.flag();
  double elapsed = 0;
  // The pipeline hands a step's previews over just before that step's on_step.
  std::vector<fluxrt::Image> previews;
  if (callbacks.on_progress) {
    if (!callbacks.preview_steps.empty()) {
      call.preview_steps = callbacks.preview_steps;
      call.on_preview = [&](int, std::vector<io::Image> images) {
        previews.clear();
        for (io::Image& image : images) previews.push_back(io::to_public(std::move(image)));
      };
    }
    call.on_step = [&](int step, int total, double seconds, float timestep) {
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
  pipelines::GenerateResult out = pipeline_->generate(batch, call);
  RunTimings run = run_timings_from(profiler_);
  run.total_s = watch.seconds();
  if (options_.cuda_graphs) run.graph_steps = out.graph_steps;
  run.cache_steps = out.cache_steps;
  run.reference_images = out.reference_latents;
  run.reference_images_cached = out.reference_latents_kept;
  run.reference_kv_bytes = out.reference_kv_bytes;

  std::vector<fluxrt::GenerateResult> results;
  size_t first_image = 0;  // of this request in the batch's images
  for (const pipelines::PlannedRequest& planned : batch) {
    const fluxrt::GenerateRequest* q = planned.request;
    fluxrt::GenerateResult result;
    result.notes = planned.plan.notes;
    result.width = out.width;
    result.height = out.height;
    result.steps = out.num_steps;
    result.guidance = out.guidance_scale;
    result.used_cfg = out.used_cfg;
    result.graph_steps = out.graph_steps;
    result.cache_steps = out.cache_steps;
    result.mag_ratios = out.mag_ratios;
    const size_t count = q->prompts.size() * static_cast<size_t>(q->images_per_prompt);
    FLUXRT_CHECK(first_image + count <= out.images.size(), ErrorCode::Internal,
                 "generate: the pipeline returned {} images for a batch of more", out.images.size());
    for (size_t i = 0; i < count; ++i) {
      fluxrt::GeneratedImage g;
      g.metadata = image_metadata(planned, out, static_cast<int>(i));
      g.image = io::to_public(std::move(out.images[first_image + i]));
      result.images.push_back(std::move(g));
    }
    first_image += count;
    TimingReport& t = result.timing;
    t.model = model_;
    t.variant = variant_;
    t.dtype = fluxrt::precision_name(options_.precision);
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
