// `fluxrt bench <component>`: synthetic weights of the real shapes, timings and GFLOP/s against
// the GEMM peak measured in the same run. The work lives in apps/cli/bench/bench_*.cpp.
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "commands.h"
#include "core/error.h"

namespace fluxrt::cli {
namespace {

void parse_size(const std::string& text, int* width, int* height) {
  int w = 0, h = 0;
  char x = 0, extra = 0;
  if (std::sscanf(text.c_str(), "%d%c%d%c", &w, &x, &h, &extra) != 3 || (x != 'x' && x != 'X') || w <= 0 ||
      h <= 0) {
    fail(ErrorCode::InvalidArgument, "invalid --size '{}' (expected WxH, e.g. 1024x1024)", text);
  }
  FLUXRT_CHECK(w % 16 == 0 && h % 16 == 0, ErrorCode::InvalidArgument,
               "--size {}x{}: width and height must be multiples of 16", w, h);
  *width = w;
  *height = h;
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchOptions& options) {
  CLI::App* cmd = app.add_subcommand("bench", "time a component on synthetic weights of the real shapes");
  cmd->add_option("component", options.component, "transformer, text-encoder, vae or pipeline")
      ->required()
      ->check(CLI::IsMember({"transformer", "text-encoder", "vae", "pipeline"}));
  cmd->add_option("--variant", options.variant,
                  "flux.2-klein-4b, flux.2-klein-9b, flux.1-dev, flux.1-schnell (pipeline: also flux.1-tiny)")
      ->capture_default_str();
  cmd->add_option("--size", options.size, "image size WxH")->capture_default_str();
  cmd->add_option("--steps", options.steps, "denoising steps to time")->capture_default_str();
  cmd->add_option("--batch", options.batch, "images per call")->capture_default_str();
  cmd->add_option("--max-sequence-length", options.max_sequence_length,
                  "text tokens (default: the variant's, 512; flux.1-schnell 256)");
  cmd->add_option("--device", options.device, "cpu, cuda, cuda:N, or cpu:1 (placement check, docs/cuda.md)")->capture_default_str();
  cmd->add_option("--dtype", options.dtype,
                  "bf16, f32, or int8 (transformer, pipeline: the transformer's linears W8A8, the rest bf16)")
      ->capture_default_str()
      ->check(CLI::IsMember(dtype_choices()));
  cmd->add_option(
         "--weights", options.weights,
         "transformer (FLUX.2), pipeline (klein: transformer and Qwen3): synthetic linear weights as bf16, "
         "fp8 or a GGUF type kept quantized (q8_0, q6_K, q5_K, q4_K, q4_0, ...)")
      ->capture_default_str();
  cmd->add_flag("--skip-peak", options.skip_peak, "don't measure the GEMM peak (no ratios)");
  cmd->add_option("--json", options.json_path, "also write the figures to this JSON file");
  cmd->add_flag("--synthetic", options.synthetic, "pipeline: random weights of the variant's real shapes (no files)");
  cmd->add_flag("--warmup", options.warmup, "pipeline: run the request once untimed first");
  cmd->add_flag("--low-memory", options.low_memory,
                "pipeline: keep one component resident at a time (each made when used, then freed; FLUX.1 always)");
  cmd->add_flag(
      "--keep-text-encoder", options.keep_text_encoder,
      "pipeline: make every component at open and keep the text encoder beside the transformer, as "
      "fluxrt serve does (by default it is freed before the transformer is made, as fluxrt generate "
      "runs)");
  cmd->add_flag("--cuda-graphs", options.cuda_graphs,
                "pipeline (cuda:N): record the denoising step once and replay it as a CUDA graph (klein with --warmup: the timed run replays every step; FLUX.1 runs low-memory, so per request)");
  cmd->add_option("--tiling", options.tiling,
                  "vae: auto (plain pass, else the lean exact pass, else tiles, by half the available memory), on, off or lean")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off", "lean"}));
  cmd->add_option("--tile-size", options.tile_size,
                  "vae: tile edge in pixels, a multiple of 16, at least 64 (default 512; overlap a quarter of it)");
  cmd->add_option(
         "--lora-rank", options.lora_rank,
         "transformer: also time a synthetic rank-R LoRA on every linear, merged into the weights and as "
         "per-request branches, and a rank-R LoKr's per-request merged copies")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--references", options.references,
                  "pipeline (klein): edit with N reference images of random pixels at the request's size "
                  "(flux.2-klein-9b-kv: as cached keys and values)")
      ->check(CLI::Range(0, 4));
  cmd->add_option("--mask", options.mask,
                  "pipeline: inpaint a source of random pixels at the request's size under a centred mask "
                  "covering this fraction of it (klein, FLUX.1; flux.1-fill-dev needs it)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option(
      "--cache", options.cache,
      "pipeline: a step cache, NAME:key=value,... as `fluxrt generate --cache` (docs/requests.md)");
  cmd->add_flag(
      "--op-times", options.op_times,
      "transformer: run one more step with every kernel call timed and print where it went, by op and shape");
  return cmd;
}

int run_bench(const BenchOptions& options) {
  BenchRequest request;
  request.variant = options.variant;
  parse_size(options.size, &request.width, &request.height);
  FLUXRT_CHECK(options.steps >= 1 && options.batch >= 1, ErrorCode::InvalidArgument,
               "--steps and --batch must be at least 1");
  request.steps = options.steps;
  request.batch = options.batch;
  // FLUX.1-schnell's T5 length is 256 (diffusers' FluxPipeline runs it so); the others' 512.
  request.max_sequence_length =
      options.max_sequence_length > 0 ? options.max_sequence_length : (options.variant == "flux.1-schnell" ? 256 : 512);
  request.device = Device::parse(options.device);
  request.dtype = options.dtype == "f32" ? DType::F32 : DType::BF16;
  request.int8_linears = options.dtype == "int8";
  FLUXRT_CHECK(!request.int8_linears || options.component == "transformer" || options.component == "pipeline",
               ErrorCode::InvalidArgument, "bench {}: --dtype int8 is for transformer and pipeline",
               options.component);
  request.skip_peak = options.skip_peak;
  request.weights = options.weights;
  request.json_path = options.json_path;
  request.synthetic = options.synthetic;
  request.warmup = options.warmup;
  request.low_memory = options.low_memory;
  request.keep_text_encoder = options.keep_text_encoder;
  request.cuda_graphs = options.cuda_graphs;
  request.vae_tiling = options.tiling;
  request.vae_tile_pixels = options.tile_size;
  request.lora_rank = options.lora_rank;
  request.references = options.references;
  request.mask = options.mask;
  request.op_times = options.op_times;
  request.cache = options.cache;
  if (options.component == "pipeline") return bench_pipeline(request);
  if (options.component == "transformer") return bench_transformer(request);
  if (options.component == "text-encoder") return bench_text_encoder(request);
  return bench_vae(request);
}

}  // namespace fluxrt::cli
