// `fluxrt generate`: prompt (+ reference images for FLUX.2 klein, + an init image for FLUX.1
// img2img) to PNG files with a FLUX.2 klein or FLUX.1 pipeline folder. Everything is validated
// before the model is loaded (runtime/generate_job.h, generate_flux1_options.h); progress goes to
// stderr, the written paths and the timing report to stdout. Ctrl-C stops between steps and
// writes nothing (main maps ErrorCode::Cancelled to exit code 130).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "pipelines/flux1_pipeline.h"
#include "runtime/generate_flux1_options.h"
#include "runtime/generate_job.h"
#include "runtime/progress.h"
#include "runtime/run_config.h"
#include "runtime/timing_report.h"

namespace fluxrt::cli {
namespace {

std::atomic<bool> g_cancel_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT handler needs a lock-free flag");

void on_sigint(int) { g_cancel_requested.store(true); }

// SA_RESETHAND: the first Ctrl-C asks for a clean stop, a second one kills at once as usual.
void install_sigint_handler() {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
}

void throw_if_cancelled() {
  if (g_cancel_requested.load()) fail(ErrorCode::Cancelled, "interrupted (Ctrl-C); nothing written");
}

bool given(const GenerateOptions& o, const char* flag) { return o.command->count(flag) > 0; }

runtime::GenerateInputs inputs_from(const GenerateOptions& o) {
  runtime::GenerateInputs in;
  runtime::RunConfig& f = in.flags;
  if (given(o, "--model")) f.model = o.model;
  if (given(o, "--components")) in.components = o.components;
  if (given(o, "--size")) {
    int w = 0, h = 0;
    runtime::parse_size(o.size, "--size", &w, &h);
    f.width = w;
    f.height = h;
  }
  if (given(o, "--steps")) f.steps = o.steps;
  if (given(o, "--guidance")) f.guidance = o.guidance;
  if (given(o, "--seed")) f.seed = o.seed;
  if (given(o, "--max-sequence-length")) f.max_sequence_length = o.max_sequence_length;
  if (given(o, "--dtype")) f.dtype = o.dtype;
  if (given(o, "--device")) f.device = o.device;
  if (given(o, "--threads")) f.threads = o.threads;
  if (given(o, "--low-memory")) f.low_memory = o.low_memory;
  if (given(o, "--batch")) f.batch = o.batch;
  if (given(o, "--out")) f.out_dir = o.out_dir;
  if (given(o, "--filename")) f.filename_pattern = o.filename;
  if (given(o, "--negative-prompt")) f.negative_prompt = o.negative_prompt;
  if (given(o, "--init-image")) f.init_image = o.init_image;
  if (given(o, "--strength")) f.strength = o.strength;
  if (given(o, "--true-cfg")) f.true_cfg = o.true_cfg;
  if (given(o, "--vae-tiling")) f.vae_tiling = o.vae_tiling;
  if (given(o, "--config")) in.preset = o.config;
  if (given(o, "--prompt")) in.prompt = o.prompt;
  if (given(o, "--prompts-file")) in.prompts_file = o.prompts_file;
  in.reference_paths = o.images;
  return in;
}

}  // namespace

CLI::App* add_generate_command(CLI::App& app, GenerateOptions& o) {
  CLI::App* cmd = app.add_subcommand("generate", "generate images from a prompt (and reference images)");
  o.command = cmd;
  // A repeated flag takes its last value, so a wrapper script's defaults can be overridden by
  // appending flags.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--model", o.model,
                  "diffusers Flux2KleinPipeline folder or hub repo id in the local cache (default: the preset's, "
                  "else the bundled demo model)");
  cmd->add_option("--components", o.components,
                  "with --model FILE (a single transformer .safetensors): the diffusers pipeline folder or hub repo "
                  "id giving the text encoder, tokenizer, VAE and scheduler (default: the folder holding the file)");
  cmd->add_option("--prompt,-p", o.prompt, "the prompt (may be empty)");
  cmd->add_option("--negative-prompt", o.negative_prompt,
                  "negative prompt (klein base variants with CFG; FLUX.1 with --true-cfg > 1)");
  cmd->add_option("--prompts-file", o.prompts_file, "one prompt per line; each line is a prompt of the batch");
  cmd->add_option("--image,-i", o.images, "reference image (PNG); repeat for several")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--init-image", o.init_image,
                  "FLUX.1 img2img: start from this PNG (resized to --size, default the model's)");
  cmd->add_option("--strength", o.strength,
                  "FLUX.1 img2img: how far the init image is noised, in (0, 1] (default 0.6); about steps x "
                  "strength steps run");
  cmd->add_option("--true-cfg", o.true_cfg,
                  "FLUX.1 true classifier-free guidance scale; used when > 1 with --negative-prompt (two forwards "
                  "per step)");
  cmd->add_option("--vae-tiling", o.vae_tiling, "VAE decode/encode in tiles: auto (by memory, default), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--steps", o.steps, "denoising steps (default: preset, else the model's)");
  cmd->add_option("--guidance", o.guidance, "guidance scale (base variants; default: preset, else the model's)");
  cmd->add_option("--size", o.size, "WxH, multiples of 2 x the VAE factor: 16 for FLUX, 8 for the demo model (default: preset, else reference image, else the model's)");
  cmd->add_option("--seed", o.seed, "noise seed (default: preset, else random; printed and stored in the PNG)");
  cmd->add_option("--batch,-n", o.batch, "images per prompt");
  cmd->add_option("--max-sequence-length", o.max_sequence_length, "text tokens, e.g. 512 (default) or 256");
  cmd->add_option("--threads", o.threads, "worker threads (0 = all cores)");
  cmd->add_option("--out,-o", o.out_dir, "output folder (default: preset, else outputs)");
  cmd->add_option("--filename", o.filename,
                  "file name pattern: {seed} {index} {prompt_index} {image_index} {width} {height} {steps}");
  cmd->add_option("--config,-c", o.config, "run preset: a name under configs/ (e.g. demo) or a .yaml file");
  cmd->add_option("--dtype", o.dtype, "bf16 or f32")->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--device", o.device, "cpu, cuda or cuda:N where built, or cpu:1 (placement check, docs/cuda.md)");
  cmd->add_flag("--low-memory", o.low_memory, "keep one large component resident at a time (slower, smaller peak)");
  cmd->add_flag("--cuda-graphs", o.cuda_graphs,
                "on cuda:N: record the denoising step once and replay it as a CUDA graph");
  cmd->add_option("--profile", o.profile_path, "also write the timing report as JSON to this file");
  cmd->add_flag("--warmup", o.warmup, "run the request once untimed first (reported separately, not written)");
  cmd->add_flag("--reload", o.reload, "load the model a second time and report the warm load");
  cmd->add_flag("--quiet,-q", o.quiet, "no progress and no timing report (paths are still printed)");
  return cmd;
}

namespace {

// The pipeline the folder's class names (FluxPipeline: FLUX.1, else FLUX.2-klein); both take the
// same request and report the same profiler spans.
struct LoadedPipeline {
  std::unique_ptr<pipelines::Flux2KleinPipeline> klein;
  std::unique_ptr<pipelines::Flux1Pipeline> flux1;

  static LoadedPipeline load(const runtime::GenerateJob& job, const pipelines::PipelineOptions& options) {
    LoadedPipeline p;
    if (job.model.pipeline_class == "FluxPipeline") {
      p.flux1 = pipelines::Flux1Pipeline::load(job.model.path, options);
    } else {
      p.klein = pipelines::Flux2KleinPipeline::load(job.model.path, options);
    }
    return p;
  }
  void reset() {
    klein.reset();
    flux1.reset();
  }
  pipelines::GenerateResult generate(const pipelines::GenerateRequest& r) const {
    return flux1 ? flux1->generate(r) : klein->generate(r);
  }
  int max_sequence_length() const {
    return flux1 ? flux1->defaults().max_sequence_length : klein->defaults().max_sequence_length;
  }
};

int generate_and_write(const GenerateOptions& o) {
  Stopwatch command;
  const runtime::GenerateInputs inputs = inputs_from(o);
  runtime::GenerateJob job = runtime::resolve_generate_job(inputs);
  const runtime::GenerateFlux1Options extra = runtime::resolve_generate_flux1_options(inputs, job);
  if (!o.profile_path.empty()) {
    const std::filesystem::path profile(o.profile_path);
    runtime::check_output_dir_writable(profile.has_parent_path() ? profile.parent_path() : ".");
    std::error_code ec;
    FLUXRT_CHECK(!std::filesystem::is_directory(profile, ec), ErrorCode::InvalidArgument,
                 "--profile {} is a folder; give a file name", o.profile_path);
  }
  if (job.threads) set_num_threads(*job.threads);
  install_sigint_handler();

  runtime::ProgressReporter progress(runtime::detect_progress_style(stderr, o.quiet), stderr);
  progress.message(fmt::format("model {} ({}), seed {}{}, {} image{}", job.model_label, job.variant, job.seed,
                               job.seed_was_random ? " (random)" : "", job.total_images(),
                               job.total_images() == 1 ? "" : "s"));
  for (const std::string& note : extra.notes) progress.message("note: " + note);
  if (!job.low_memory_note.empty()) progress.message("note: " + job.low_memory_note);

  Profiler profiler;
  pipelines::PipelineOptions options;
  options.dtype = job.dtype;
  options.device = job.device;
  options.low_memory = job.low_memory;
  options.cuda_graphs = o.cuda_graphs;
  if (o.cuda_graphs && job.device == Device::cpu()) progress.message("note: --cuda-graphs has no effect on the CPU");
  options.transformer_file = job.transformer_file;
  options.load_vae_encoder = !job.reference_images.empty();
  options.profiler = &profiler;
  extra.apply_to(options);

  runtime::TimingReport report;
  report.model = job.model_label;
  report.variant = job.variant;
  report.dtype = std::string(dtype_name(job.dtype));
  report.device = job.device.str();
  report.threads = num_threads();

  Stopwatch load_watch;
  LoadedPipeline pipe = LoadedPipeline::load(job, options);
  if (!job.low_memory) {
    report.cold_load = runtime::load_timings_from(profiler);
    if (report.cold_load->total_s == 0) report.cold_load->total_s = load_watch.seconds();
  }
  profiler.clear();
  throw_if_cancelled();
  if (o.reload) {
    pipe.reset();
    load_watch.reset();
    pipe = LoadedPipeline::load(job, options);
    if (!job.low_memory) {
      report.warm_load = runtime::load_timings_from(profiler);
      if (report.warm_load->total_s == 0) report.warm_load->total_s = load_watch.seconds();
    }
    profiler.clear();
    throw_if_cancelled();
  }
  // Recorded in the PNGs as the values used, not as "the default". (The size, default or not, was
  // checked by resolve_generate_job with the model's VAE factor before loading.)
  if (!job.max_sequence_length) job.max_sequence_length = pipe.max_sequence_length();
  if (extra.init_image) {
    // The steps may come from the model: checked now, still before anything runs.
    const int steps = job.steps.value_or(pipe.flux1->defaults().num_steps);
    const float strength = extra.strength.value_or(pipe.flux1->defaults().img2img_strength);
    progress.message(fmt::format("img2img from {}: strength {}, {} of {} steps run", extra.init_image_path, strength,
                                 extra.steps_run(steps, strength), steps));
    job.init_image_path = extra.init_image_path;
    job.strength = strength;
  }
  if (extra.true_cfg_used) job.true_cfg = extra.true_cfg;

  pipelines::GenerateRequest request = runtime::make_generate_request(job);
  extra.apply_to(request);
  request.cancel = &g_cancel_requested;
  request.on_step = [&progress](int step, int total, double seconds) { progress.step(step, total, seconds); };
  if (o.warmup) {
    Stopwatch warm;
    pipe.generate(request);
    report.warmup = runtime::run_timings_from(profiler);
    report.warmup->total_s = warm.seconds();
    profiler.clear();
  }

  Stopwatch run_watch;
  const pipelines::GenerateResult result = pipe.generate(request);
  progress.finish();
  report.run = runtime::run_timings_from(profiler);
  throw_if_cancelled();  // Ctrl-C during the decode: still nothing written

  Stopwatch write_watch;
  const std::vector<std::filesystem::path> paths = runtime::write_generated_images(job, result);
  report.run.image_write_s = write_watch.seconds();
  report.run.total_s = run_watch.seconds();
  for (const auto& p : paths) std::printf("%s\n", p.string().c_str());

  if (o.cuda_graphs) report.run.graph_steps = result.graph_steps;
  report.width = result.width;
  report.height = result.height;
  report.images = static_cast<int>(result.images.size());
  report.peak_rss_bytes = process_peak_rss_bytes();
  report.total_s = command.seconds();
  if (!o.quiet) std::printf("%s", runtime::format_timing_report(report).c_str());
  std::fflush(stdout);
  if (!o.profile_path.empty()) runtime::write_file_atomically(o.profile_path, runtime::timing_report_json(report));
  return 0;
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  try {
    return generate_and_write(o);
  } catch (const Error& e) {
    // The pipeline's own wording varies with where it stopped; the user sees one message.
    if (e.code() == ErrorCode::Cancelled) throw_if_cancelled();
    throw;
  }
}

}  // namespace fluxrt::cli
