#pragma once
// Subcommands of the `fluxrt` executable. Each registers its options on the CLI11 app and runs
// only when parsed; the work itself lives in the libraries, a command only prints.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fluxrt/engine.h"

namespace fluxrt::cli {

// --dtype's choices: every precision's name, as fluxrt::parse_precision reads them.
inline std::vector<std::string> dtype_choices() {
  std::vector<std::string> names;
  for (fluxrt::Precision p : fluxrt::kPrecisions) names.emplace_back(fluxrt::precision_name(p));
  return names;
}

struct InfoOptions {
  std::string model;
  bool json = false;
};
CLI::App* add_info_command(CLI::App& app, InfoOptions& options);
int run_info(const InfoOptions& options);  // throws fluxrt::Error

struct BenchOptions {
  std::string component;  // transformer, text-encoder, vae, pipeline
  std::string variant = "flux.2-klein-4b";
  std::string size = "512x512";
  int steps = 2;
  int batch = 1;
  int max_sequence_length = 0;  // 0: the variant's (512; flux.1-schnell 256)
  std::string device = "cpu";
  std::string dtype = "bf16";
  std::string weights = "bf16";
  bool skip_peak = false;
  std::string json_path;
  bool synthetic = false;  // pipeline: random weights of the real shapes
  bool warmup = false;     // pipeline: one untimed request first
  bool low_memory = false; // pipeline: one component resident at a time
  bool keep_text_encoder = false;  // pipeline: every component made at open and kept
  bool cuda_graphs = false; // pipeline: replay the denoising steps as a CUDA graph
  std::string tiling = "auto";  // vae: auto, on or off
  int tile_size = 0;            // vae: tile edge in pixels (0: default)
  int lora_rank = 0;            // transformer: time a synthetic rank-R LoRA too (0: no)
  int references = 0;           // pipeline (klein): edit with N random reference images
  double mask = 0;              // pipeline: inpaint a random source under a mask of this coverage
  bool op_times = false;        // transformer: one more step with every kernel call timed
  std::string cache;            // pipeline: a step cache, as --cache text
};
CLI::App* add_bench_command(CLI::App& app, BenchOptions& options);
int run_bench(const BenchOptions& options);  // throws fluxrt::Error

// `fluxrt generate`: flags as given; whether each was given is read from the parsed app, so a
// flag overrides the preset only when it is on the command line (docs/cli.md).
struct GenerateOptions {
  CLI::App* command = nullptr;
  std::string model, prompt, prompts_file, dtype, device, out_dir, config, profile_path, filename;
  std::vector<std::string> images;
  std::vector<std::string> loras;  // --lora FILE[:STRENGTH], repeatable
  std::string components;  // with --model FILE: the pipeline folder of the other components
  std::string text_encoder;                  // a .gguf / .safetensors file instead of the folder's Qwen3 / T5
  std::string init_image, mask, vae_tiling;  // img2img / inpainting; VAE tiling auto|on|off
  // The request fields given (--steps, --size, ...: fluxrt/request_fields.h), as (key, text).
  std::vector<std::pair<std::string, std::string>> fields;
  int threads = 0;
  bool low_memory = false, keep_text_encoder = false, quiet = false, warmup = false, reload = false,
       cuda_graphs = false;
};
CLI::App* add_generate_command(CLI::App& app, GenerateOptions& options);
int run_generate(const GenerateOptions& options);  // throws fluxrt::Error (Cancelled on Ctrl-C)

// `fluxrt serve` (apps/server, docs/server.md).
struct ServeOptions {
  CLI::App* command = nullptr;
  std::string model, components, text_encoder, host = "127.0.0.1", api_key, cors_origin,
                                               max_size = "2048x2048", dtype, device, vae_tiling, config,
                                               lora_dir;
  std::vector<std::string> loras;  // --lora FILE[:STRENGTH], merged at load
  // Defaults for the requests' unset fields (--steps, --size, ...), as (key, text).
  std::vector<std::pair<std::string, std::string>> fields;
  int port = 8080, max_queue = 32, max_batch = 1, batch_window_ms = 0, max_images = 4, threads = 0,
      max_body_mb = 64;
  uint64_t max_upload_pixels = 4096ull * 4096ull;
  bool insecure_no_auth = false, low_memory = false, cuda_graphs = false;
};
CLI::App* add_serve_command(CLI::App& app, ServeOptions& options);
int run_serve(const ServeOptions& options);  // throws fluxrt::Error

struct QuantizeOptions {
  std::string model;
  std::string type = "q8_0";
  std::string out;
};
CLI::App* add_quantize_command(CLI::App& app, QuantizeOptions& options);
int run_quantize(const QuantizeOptions& options);  // throws fluxrt::Error

// `fluxrt calibrate-cache`: MagCache's magnitude ratios of a model (diffusers' MagCacheConfig
// calibrate=True run), written as JSON for `--cache mag:mag_ratios=FILE`.
struct CalibrateCacheOptions {
  std::string model, out, prompt = "a photo of a cat sitting on a wooden table, soft light";
  std::string dtype = "bf16", device = "cpu", size;
  int steps = 0;                // 0: the model's
  int max_sequence_length = 0;  // 0: the model's
  uint64_t seed = 0;
};
CLI::App* add_calibrate_cache_command(CLI::App& app, CalibrateCacheOptions& options);
int run_calibrate_cache(const CalibrateCacheOptions& options);  // throws fluxrt::Error

}  // namespace fluxrt::cli
