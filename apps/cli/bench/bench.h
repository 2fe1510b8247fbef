#pragma once
// `fluxrt bench <component>`: synthetic weights of the real shapes (random, never zeros; no files
// needed), per-component timings, achieved GFLOP/s and the ratios to the GEMM and register peaks
// read through the same run (the best of several readings, bench_common.h), peak RSS. Each function
// prints its table to stdout and returns the exit code.
#include <optional>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/quant.h"

namespace fluxrt::cli {

struct BenchRequest {
  std::string variant = "flux.2-klein-4b";  // flux.2-klein-4b, flux.2-klein-9b, flux.1-dev, flux.1-schnell
  int width = 512;
  int height = 512;
  int steps = 2;
  int batch = 1;
  int max_sequence_length = 512;
  Device device = Device::cpu();
  DType dtype = DType::BF16;
  // --dtype int8 (bench transformer, bench pipeline): the transformer's linears W8A8
  // (nn::LinearFormat::Int8), dtype bf16 for everything else, as fluxrt::Precision::Int8 runs.
  bool int8_linears = false;
  // bench transformer (FLUX.2) and bench pipeline (klein: the transformer's and the Qwen3's): the
  // linears' synthetic weights in this type ("bf16": dense; "q8_0", "q4_K", ... GGUF blocks;
  // "fp8": float8_e4m3fn), kept in their bytes as a GGUF file's would be.
  std::string weights = "bf16";
  bool skip_peak = false;   // don't measure the GEMM peak (ratios are then omitted)
  std::string json_path;    // also write the figures as JSON when set
  bool synthetic = false;   // bench pipeline: random weights of the variant's real shapes (required for now)
  bool warmup = false;      // bench pipeline: one untimed request first (reported separately)
  bool low_memory = false;  // bench pipeline (klein): one component resident at a time; 9B needs it in 24 GiB
  // bench pipeline: every component made at open and kept (as `fluxrt serve` does); by default,
  // as `fluxrt generate` runs, the text encoder is freed before the transformer is made
  // (PipelineOptions::free_text_encoder).
  bool keep_text_encoder = false;
  bool cuda_graphs =
      false;  // bench pipeline: replay the denoising steps as a CUDA graph (PipelineOptions::cuda_graphs)
  std::string vae_tiling = "auto";  // bench vae: auto (budget from available memory), on or off
  int vae_tile_pixels = 0;          // bench vae: tile edge in pixels; 0 keeps the model's default (512)
  // bench transformer: > 0 also times a synthetic rank-R LoRA on every linear, merged into the
  // weights (f32 math, one layer at a time) and as unmerged per-request branches (steps rerun).
  int lora_rank = 0;
  // bench pipeline: this many reference images (random pixels, the request's size) edited with
  // (klein; klein-9B-KV keeps them as cached keys and values).
  int references = 0;
  // bench pipeline: > 0 inpaints (klein, FLUX.1, FLUX.1 Fill needs it) a source of random pixels at
  // the request's size under a centred white rectangle covering this fraction of it.
  double mask = 0;
  // bench transformer: one more step after the timed ones with every kernel call timed
  // (ops::ScopedKernelTiming), printed as a table by op and shape.
  bool op_times = false;
  // bench pipeline: a step cache, as `--cache` text (fluxrt/request_fields.h); "" none.
  std::string cache;
};

// "int8" for --dtype int8, else dtype's name: what the reports show.
std::string bench_dtype_name(const BenchRequest& request);

// --weights as a type: nothing for "bf16" (dense), F8E4M3 for "fp8", else the GGUF type named
// (InvalidArgument naming `command` for anything else).
std::optional<QuantType> bench_weight_type(const std::string& weights, const char* command);

int bench_transformer(const BenchRequest& request);
int bench_text_encoder(const BenchRequest& request);
int bench_vae(const BenchRequest& request);
// The whole FLUX.2 klein pipeline (prompt encoding, denoising loop, VAE decode) through
// Flux2KleinPipeline::synthetic, reported with the generate timing table (runtime/timing_report.h)
// plus the loop's GFLOP/s and its ratio to the GEMM peak.
int bench_pipeline(const BenchRequest& request);

}  // namespace fluxrt::cli
