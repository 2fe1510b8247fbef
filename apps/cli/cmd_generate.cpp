// `fluxrt generate`: prompt (+ reference images for FLUX.2 klein, + an init image for FLUX.1
// img2img) to PNG files with a FLUX.2 klein or FLUX.1 pipeline folder. A thin client of the public
// API: fluxrt::resolve_run validates everything before the model is loaded, fluxrt::Engine loads
// and generates, fluxrt::write_run_images writes; this file only turns flags into settings and
// prints. Progress goes to stderr, the written paths and the timing report to stdout. Ctrl-C stops
// between steps and writes nothing (main maps ErrorCode::Cancelled to exit code 130).
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "fluxrt/engine.h"
#include "fluxrt/run.h"
#include "progress.h"
#include "request_flags.h"

namespace fluxrt::cli {
namespace {

// Set before the handler is installed and never replaced, so the handler only stores to its flag.
CancelToken g_cancel;

void on_sigint(int) { g_cancel.cancel(); }

// SA_RESETHAND: the first Ctrl-C asks for a clean stop, a second one kills at once as usual.
void install_sigint_handler() {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
}

void throw_if_cancelled() {
  if (g_cancel.cancelled()) throw Error(ErrorCode::Cancelled, "interrupted (Ctrl-C); nothing written");
}

// Wall time since construction: the report's totals are the command's own (loading, writing).
class Stopwatch {
 public:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

bool given(const GenerateOptions& o, const char* flag) { return o.command->count(flag) > 0; }

// Only the flags given: the rest falls back to the preset, then to the model's defaults.
RunSettings settings_from(const GenerateOptions& o) {
  RunSettings s;
  if (given(o, "--model")) s.model = o.model;
  if (given(o, "--components")) s.components = o.components;
  if (given(o, "--text-encoder")) s.text_encoder = o.text_encoder;
  if (given(o, "--dtype")) s.dtype = o.dtype;
  if (given(o, "--device")) s.device = o.device;
  if (given(o, "--threads")) s.threads = o.threads;
  if (given(o, "--low-memory")) s.low_memory = o.low_memory;
  // One request: the text encoder is freed before the transformer loads, unless asked to keep it
  // or to time the load at open (--reload).
  s.free_text_encoder = !o.keep_text_encoder && !o.reload;
  if (given(o, "--out")) s.out_dir = o.out_dir;
  if (given(o, "--filename")) s.filename_pattern = o.filename;
  if (given(o, "--init-image")) s.init_image = o.init_image;
  if (given(o, "--mask")) s.mask = o.mask;
  if (given(o, "--vae-tiling")) s.vae_tiling = o.vae_tiling;
  if (given(o, "--config")) s.preset = o.config;
  if (given(o, "--prompt")) s.prompt = o.prompt;
  if (given(o, "--prompts-file")) s.prompts_file = o.prompts_file;
  if (!o.profile_path.empty()) s.profile = o.profile_path;
  s.fields = o.fields;
  s.reference_images = o.images;
  if (!o.loras.empty()) {
    s.loras.emplace();
    for (const std::string& text : o.loras) s.loras->push_back(parse_lora_text(text));
  }
  s.cuda_graphs = o.cuda_graphs;
  return s;
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
  cmd->add_option(
      "--text-encoder", o.text_encoder,
      "a single text-encoder file (.gguf in llama.cpp names, e.g. a Qwen3 or T5-XXL GGUF, or .safetensors) "
      "used instead of the folder's klein Qwen3 / FLUX.1 T5; the tokenizer still comes from the folder");
  cmd->add_option("--prompt,-p", o.prompt, "the prompt (may be empty)");
  cmd->add_option("--prompts-file", o.prompts_file, "one prompt per line; each line is a prompt of the batch");
  cmd->add_option("--image,-i", o.images, "reference image (PNG, JPEG or WebP); repeat for several")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option(
      "--init-image", o.init_image,
      "FLUX.1 img2img: start from this PNG, JPEG or WebP (resized to --size, default the model's); with "
      "--mask: the image being edited");
  cmd->add_option("--mask", o.mask,
                  "inpainting (klein, FLUX.1, FLUX.1 Fill, which needs it): the mask (PNG, JPEG or WebP, the "
                  "--init-image's size): white repaints, black keeps (luminance at 0.5)");
  add_request_field_flags(*cmd, o.fields);
  CLI::Option* lora =
      cmd->add_option("--lora", o.loras,
                      "LoRA file merged into the transformer, FILE or FILE:STRENGTH (default 1, negative "
                      "allowed); repeat for several (docs/lora.md)");
  lora->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--vae-tiling", o.vae_tiling,
                  "VAE decode/encode in tiles: auto (by memory, default), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--threads", o.threads, "worker threads (0 = all cores)");
  cmd->add_option("--out,-o", o.out_dir, "output folder (default: preset, else outputs)");
  cmd->add_option("--filename", o.filename,
                  "file name pattern: {seed} {index} {prompt_index} {image_index} {width} {height} {steps}");
  cmd->add_option("--config,-c", o.config, "run preset: a name under configs/ (e.g. demo) or a .yaml file");
  cmd->add_option("--dtype", o.dtype,
                  "bf16, f32, or int8 (the transformer's linears W8A8, the rest bf16; CPU only)")
      ->check(CLI::IsMember(dtype_choices()));
  cmd->add_option("--device", o.device, "cpu, cuda or cuda:N where built, or cpu:1 (placement check, docs/cuda.md)");
  cmd->add_flag("--low-memory", o.low_memory, "keep one large component resident at a time (slower, smaller peak)");
  cmd->add_flag("--cuda-graphs", o.cuda_graphs,
                "on cuda:N: record the denoising step once and replay it as a CUDA graph");
  cmd->add_option("--profile", o.profile_path, "also write the timing report as JSON to this file");
  cmd->add_flag("--warmup", o.warmup, "run the request once untimed first (reported separately, not written)");
  cmd->add_flag("--keep-text-encoder", o.keep_text_encoder,
                "load every component at open and keep the text encoder beside the transformer (as fluxrt "
                "serve does; a larger peak); by default it is freed before the transformer loads");
  cmd->add_flag("--reload", o.reload,
                "load the model a second time and report the warm load (every component then loads at open)");
  cmd->add_flag("--quiet,-q", o.quiet, "no progress and no timing report (paths are still printed)");
  return cmd;
}

namespace {

int generate_and_write(const GenerateOptions& o) {
  Stopwatch command;
  const Run run = resolve_run(settings_from(o));
  if (!run.prompt_given)
    throw Error(ErrorCode::InvalidArgument,
                "no prompt: give --prompt \"...\" (may be empty), --prompts-file or prompts: in a preset",
                "prompts");
  install_sigint_handler();

  ProgressReporter progress(detect_progress_style(stderr, o.quiet), stderr);
  for (const Lora& l : run.engine.loras)
    progress.message(fmt::format("LoRA {} at strength {}", l.path, l.strength));
  progress.message(fmt::format("model {} ({}), seed {}{}, {} image{}", run.model, run.variant,
                               run.request.seed, run.seed_was_random ? " (random)" : "", run.images(),
                               run.images() == 1 ? "" : "s"));
  for (const std::string& note : run.notes) progress.message("note: " + note);
  if (run.request.init_image)
    progress.message(fmt::format("{} {}: strength {}, {} of {} steps run",
                                 run.request.mask_image ? "inpainting" : "img2img from", run.init_image,
                                 run.plan.strength.value_or(0), run.plan.steps_run, run.plan.steps));

  std::optional<Engine> engine(std::in_place, run);
  const std::optional<LoadTimings> cold_load = engine->load_timings();
  throw_if_cancelled();
  std::optional<LoadTimings> warm_load;
  if (o.reload) {
    engine.reset();
    engine.emplace(run);
    warm_load = engine->load_timings();
    throw_if_cancelled();
  }

  Callbacks callbacks;
  callbacks.cancel = g_cancel;
  callbacks.on_progress = [&progress](const Progress& p) { progress.step(p.step, p.total, p.step_seconds); };
  std::optional<RunTimings> warmup;
  if (o.warmup) {
    Stopwatch warm;
    warmup = engine->generate(run.request, callbacks).timing.run;
    warmup->graph_steps.reset();  // the report counts the timed run's replays only
    warmup->total_s = warm.seconds();
  }

  Stopwatch run_watch;
  const GenerateResult result = engine->generate(run.request, callbacks);
  progress.finish();
  throw_if_cancelled();  // Ctrl-C during the decode: still nothing written

  Stopwatch write_watch;
  const std::vector<std::string> paths = write_run_images(run, result);
  TimingReport report = result.timing;
  report.run.image_write_s = write_watch.seconds();
  report.run.total_s = run_watch.seconds();
  for (const std::string& p : paths) std::printf("%s\n", p.c_str());

  report.cold_load = cold_load;
  report.warm_load = warm_load;
  report.warmup = warmup;
  report.total_s = command.seconds();
  if (!o.quiet) std::printf("%s", format_timing_report(report).c_str());
  std::fflush(stdout);
  if (!o.profile_path.empty()) write_text_file(o.profile_path, timing_report_json(report));
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
