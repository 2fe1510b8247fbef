// `fluxrt bench transformer`: one transformer forward per denoising step (FLUX.2 klein 4B/9B,
// FLUX.1 dev/schnell) on synthetic bf16 weights of the real shapes (random, never zeros; no files
// needed), timed per step.
// Prints ms per step, achieved GFLOP/s (GEMMs + attention, flux-reference.md section 6), its ratios
// to the GEMM peak and the register peak read before the load, after it and after the steps
// (the best reading; bench_common.h's PeakReadings), and the peak RSS.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_common.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "core/threads.h"
#include "models/flux/flux1_transformer.h"
#include "models/flux/flux2_transformer.h"
#include "models/lora/lora_delta.h"
#include "models/lora/lora_file.h"
#include "models/synthetic_weights.h"
#include "models/weight_binder.h"
#include "ops/dispatch.h"
#include "ops/kernel_timing.h"

namespace fluxrt::cli {

std::string bench_dtype_name(const BenchRequest& request) {
  return request.int8_linears ? "int8" : std::string(dtype_name(request.dtype));
}

std::optional<QuantType> bench_weight_type(const std::string& weights, const char* command) {
  if (weights == "bf16") return std::nullopt;
  QuantType type = QuantType::F8E4M3;
  FLUXRT_CHECK(weights == "fp8" || quant_type_from_name(weights, &type), ErrorCode::InvalidArgument,
               "{}: --weights {}: bf16, fp8 or a GGUF type (q8_0, q6_K, q5_K, q4_K, q4_0, ...)", command,
               weights);
  return type;
}
namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Packed-latent image ids (0, h, w, 0) and text ids (0, 0, 0, l), as Flux2KleinPipeline builds them.
Tensor grid_ids(int64_t h, int64_t w) {
  std::vector<float> v;
  v.reserve(static_cast<size_t>(h * w * 4));
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) v.insert(v.end(), {0.0f, float(i), float(j), 0.0f});
  return Tensor::from_vector(v, {h * w, 4});
}

Tensor text_ids(int64_t n) {
  std::vector<float> v;
  for (int64_t l = 0; l < n; ++l) v.insert(v.end(), {0.0f, 0.0f, 0.0f, float(l)});
  return Tensor::from_vector(v, {n, 4});
}

// FLUX.1 ids as FluxPipeline builds them: image (0, h, w), text all zeros.
Tensor grid_ids3(int64_t h, int64_t w) {
  std::vector<float> v;
  v.reserve(static_cast<size_t>(h * w * 3));
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) v.insert(v.end(), {0.0f, float(i), float(j)});
  return Tensor::from_vector(v, {h * w, 3});
}

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// What the timing loop needs from either family: sizes for the report and one step.
struct BenchModel {
  double params = 0;      // parameters of the timed model
  double flops = 0;       // FLOPs of one timed forward (batch included)
  double full_flops = 0;  // FLOPs of one forward of the full model (batch included)
  size_t weight_bytes = 0;
  std::function<void(float sigma)> step;
  const std::map<std::string, nn::Linear>* linears = nullptr;  // the model's, by canonical name
  std::shared_ptr<void> keep;                                  // the model and its inputs
};

// Block counts of the timed model: the full ones, or 1 + 1 blocks of the real shapes when the
// full weights cannot fit next to everything else running.
void maybe_shrink(int64_t* double_blocks, int64_t* single_blocks, bool extrapolate) {
  if (!extrapolate) return;
  *double_blocks = 1;
  *single_blocks = 1;
}

BenchModel make_flux2(const BenchRequest& r, bool extrapolate, int64_t gh, int64_t gw) {
  const models::Flux2Config full = models::flux2_preset(r.variant);
  models::Flux2Config config = full;
  maybe_shrink(&config.double_blocks, &config.single_blocks, extrapolate);
  models::Flux2LoadOptions opt;
  opt.dtype = r.dtype;
  opt.device = r.device;
  if (r.int8_linears) opt.linear_format = nn::LinearFormat::Int8;
  opt.release_prepared_sources = true;  // synthetic weights: keep only what the backend prepared
  opt.synthetic_weights = bench_weight_type(r.weights, "bench transformer");
  const int64_t li = gh * gw, lt = r.max_sequence_length, b = r.batch;
  struct State {
    std::unique_ptr<models::Flux2Transformer> model;
    Tensor x, ctx, x_ids, ctx_ids;
  };
  auto st = std::make_shared<State>();
  st->model = models::Flux2Transformer::synthetic(config, 1234, opt);
  // Inputs on the device once (ids and timesteps stay on the host: the model reads them there).
  st->x = models::to_device(
      models::synthetic_tensor({b, li, config.in_channels}, DType::BF16, 11, 1.0f).to(r.dtype), r.device);
  st->ctx = models::to_device(
      models::synthetic_tensor({b, lt, config.context_dim}, DType::BF16, 12, 1.0f).to(r.dtype), r.device);
  st->x_ids = grid_ids(gh, gw);
  st->ctx_ids = text_ids(lt);
  BenchModel m;
  m.params = static_cast<double>(config.parameter_count());
  m.flops = static_cast<double>(b) * config.flops_per_forward(li, lt);
  m.full_flops = static_cast<double>(b) * full.flops_per_forward(li, lt);
  m.weight_bytes = st->model->weight_bytes();
  m.linears = &st->model->linears();
  m.step = [st, b](float sigma) {
    const Tensor t = Tensor::full({b}, DType::F32, sigma);
    (void)st->model->forward(st->x, st->x_ids, st->ctx, st->ctx_ids, t);
  };
  m.keep = st;
  return m;
}

BenchModel make_flux1(const BenchRequest& r, bool extrapolate, int64_t gh, int64_t gw) {
  FLUXRT_CHECK(r.weights == "bf16", ErrorCode::Unsupported,
               "bench transformer: --weights {} is for the FLUX.2 variants for now", r.weights);
  const models::Flux1Config full = models::flux1_preset(r.variant);
  models::Flux1Config config = full;
  maybe_shrink(&config.double_blocks, &config.single_blocks, extrapolate);
  models::Flux1LoadOptions opt;
  opt.dtype = r.dtype;
  opt.device = r.device;
  if (r.int8_linears) opt.linear_format = nn::LinearFormat::Int8;
  opt.release_prepared_sources = true;  // synthetic weights: keep only what the backend prepared
  const int64_t li = gh * gw, lt = r.max_sequence_length, b = r.batch;
  struct State {
    std::unique_ptr<models::Flux1Transformer> model;
    Tensor x, ctx, pooled, x_ids, ctx_ids, guidance;
  };
  auto st = std::make_shared<State>();
  st->model = models::Flux1Transformer::synthetic(config, 1234, opt);
  st->x = models::to_device(
      models::synthetic_tensor({b, li, config.in_channels}, DType::BF16, 11, 1.0f).to(r.dtype), r.device);
  st->ctx = models::to_device(
      models::synthetic_tensor({b, lt, config.context_dim}, DType::BF16, 12, 1.0f).to(r.dtype), r.device);
  st->pooled = models::synthetic_tensor({b, config.pooled_dim}, DType::BF16, 13, 1.0f).to(r.dtype);
  st->x_ids = grid_ids3(gh, gw);
  st->ctx_ids = Tensor::zeros({lt, 3}, DType::F32);
  if (config.guidance) st->guidance = Tensor::full({b}, DType::F32, 3.5);  // dev's default guidance
  BenchModel m;
  m.params = static_cast<double>(config.parameter_count());
  m.flops = static_cast<double>(b) * config.flops_per_forward(li, lt);
  m.full_flops = static_cast<double>(b) * full.flops_per_forward(li, lt);
  m.weight_bytes = st->model->weight_bytes();
  m.linears = &st->model->linears();
  m.step = [st, b](float sigma) {
    const Tensor t = Tensor::full({b}, DType::F32, sigma);
    (void)st->model->forward(st->x, st->x_ids, st->ctx, st->ctx_ids, st->pooled, t, st->guidance);
  };
  m.keep = st;
  return m;
}

// The fastest of `steps` forwards, in seconds, scaled to the full model (`scale`).
double min_step_seconds(const BenchModel& model, const BenchRequest& r, double scale, const char* label) {
  double best = 0;
  for (int s = 0; s < r.steps; ++s) {
    const float sigma = 1.0f - static_cast<float>(s) / static_cast<float>(r.steps);
    const double w0 = wall_seconds();
    model.step(sigma);
    ops::synchronize(r.device);
    const double t = (wall_seconds() - w0) * scale;
    best = s == 0 ? t : std::min(best, t);
    std::printf("  %s step %d: %.1f ms\n", label, s + 1, t * 1e3);
    std::fflush(stdout);
  }
  return best;
}

// A LoKr module on every linear (w1 [4, 4] whole, w2 [out/4, R] @ [R, in/4], as LyCORIS'
// factor 4 writes it) as a request applies it: the layer's merged copy (LoraAttachment: the f32
// merge of W + kron(w1, w2), one rounding, the backend's prepare), one layer at a time on a
// synthetic W, timed whole. A request's steps then run the same dense GEMMs as the base model.
void bench_lokr_per_request(const BenchRequest& r, const BenchModel& model, double params_ratio,
                            const char* tag) {
  uint64_t seed = 9900;
  double make_s = 0;
  size_t bytes = 0, layers = 0;
  for (const auto& [name, layer] : *model.linears) {
    const int64_t out = layer.out_features(), in = layer.in_features();
    if (out % 4 != 0 || in % 4 != 0) continue;
    models::LoraModule m;
    m.kind = models::LoraKind::LoKr;
    m.w1 = models::synthetic_tensor({4, 4}, DType::BF16, seed++, 1.0f);
    m.w2_a = models::synthetic_tensor({out / 4, r.lora_rank}, DType::BF16, seed++, 0.01f);
    m.w2_b =
        models::synthetic_tensor({r.lora_rank, in / 4}, DType::BF16, seed++, 1.0f / std::sqrt(float(in)));
    models::LoraDelta d;
    d.target = name;
    d.module = std::make_shared<const models::LoraModule>(m);
    d.group = {name};
    models::TensorStore one;
    one.add(name, models::synthetic_tensor({out, in}, DType::BF16, seed++, 1.0f / std::sqrt(float(in))));
    const double t0 = wall_seconds();
    const Tensor merged = models::merge_lora_deltas(one, {d}).get(name);
    const nn::Linear copy = nn::Linear::prepare(merged, Tensor(), r.device);
    make_s += wall_seconds() - t0;
    bytes += merged.nbytes();
    ++layers;
  }
  std::printf(
      "LoKr per request%s (a merged copy of each of %zu linears): %.2f s to make at the request's start, "
      "%.0f MB held while it runs; its steps are the base model's dense GEMMs\n",
      tag, layers, make_s * params_ratio, static_cast<double>(bytes) * params_ratio / 1e6);
}

// --lora-rank R: a synthetic rank-R LoRA on every linear of the timed model (A [R, in] and B
// [out, R] random bf16, factor 1). Merged: each layer's W + B A on its own (a synthetic W of the
// layer's shape; one layer at a time, so no second copy of the model), timed in the merge call
// only. Unmerged: the branches attached as a request's would be, and the steps timed again.
// A synthetic rank-R LoRA on every linear of the model, its values drawn from `seed` on.
std::vector<models::LoraDelta> synthetic_lora(const BenchModel& model, int64_t rank, uint64_t seed) {
  std::vector<models::LoraDelta> deltas;
  for (const auto& [name, layer] : *model.linears) {
    const int64_t out = layer.out_features(), in = layer.in_features();
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    deltas.push_back({name, models::synthetic_tensor({rank, in}, DType::BF16, seed++, bound),
                      models::synthetic_tensor({out, rank}, DType::BF16, seed++, 0.01f), 1.0f, "synthetic"});
  }
  return deltas;
}

// With --batch B > 1: B requests, each with its own rank-R LoRA, as one call (each request's
// branches on its own image's rows, pipelines/request_loras.h), against the batch with one LoRA.
// B requests alone are B steps of `--batch 1`: the same command at batch 1 gives that figure.
void bench_lora_per_image(const BenchRequest& r, const BenchModel& model, double scale, double shared_min_s,
                          double base_min_s, const char* tag) {
  std::vector<std::unique_ptr<models::LoraAttachment>> own;
  for (int64_t i = 0; i < r.batch; ++i)
    own.push_back(std::make_unique<models::LoraAttachment>(
        *model.linears, synthetic_lora(model, r.lora_rank, 9100 + 1000 * static_cast<uint64_t>(i)), r.dtype,
        r.device, nn::BranchRows{i, 1}));
  const double own_min_s = min_step_seconds(model, r, scale, "own LoRA per image");
  std::printf(
      "each of the %d images with its own LoRA, one call%s: ms/step min %.1f (%.1f per image) vs %.1f with "
      "one LoRA for the batch and %.1f without LoRA; the same command with --batch 1 gives a request "
      "alone\n",
      r.batch, tag, own_min_s * 1e3, own_min_s * 1e3 / r.batch, shared_min_s * 1e3, base_min_s * 1e3);
}

void bench_lora(const BenchRequest& r, const BenchModel& model, double scale, double params_ratio,
                double base_min_s, const char* tag) {
  const int64_t rank = r.lora_rank;
  const std::vector<models::LoraDelta> deltas = synthetic_lora(model, rank, 7700);
  uint64_t seed = 8700;
  double merge_s = 0;
  int64_t lora_params = 0;
  for (const models::LoraDelta& d : deltas) {
    const int64_t out = d.up.size(0), in = d.down.size(1);
    lora_params += rank * (in + out);
    models::TensorStore one;
    one.add(d.target, models::synthetic_tensor({out, in}, DType::BF16, seed++, 1.0f / std::sqrt(float(in))));
    const double t0 = wall_seconds();
    const models::TensorStore merged = models::merge_lora_deltas(one, {d});
    merge_s += wall_seconds() - t0;
  }
  merge_s *= params_ratio;
  std::printf("\nLoRA rank %lld on %zu linears (%.1f M parameters in the timed model)\n",
              static_cast<long long>(rank), deltas.size(), static_cast<double>(lora_params) / 1e6);
  std::printf("merge into the weights%s: %.2f s (W + B A in f32, one rounding to bf16)\n", tag, merge_s);
  double lora_min_s = 0;
  {
    models::LoraAttachment attached(*model.linears, deltas, r.dtype, r.device);
    lora_min_s = min_step_seconds(model, r, scale, "unmerged");
    std::printf("unmerged branches%s: ms/step min %.1f vs %.1f without: +%.1f%% of a step\n", tag,
                lora_min_s * 1e3, base_min_s * 1e3, 100.0 * (lora_min_s - base_min_s) / base_min_s);
  }
  if (r.batch > 1) bench_lora_per_image(r, model, scale, lora_min_s, base_min_s, tag);
  bench_lokr_per_request(r, model, params_ratio, tag);
}

// --op-times: one more step with every kernel call timed, printed by op and shape. The GEMMs and
// attention are the FLOP-counted work; everything else (norms, activations, residuals, the ops
// layer's copies) is what a step spends between them.
void bench_op_times(const BenchModel& model, const BenchRequest& r, double peak) {
  std::vector<ops::KernelTime> times;
  double step_s = 0;
  {
    ops::ScopedKernelTiming timing(r.device);
    const double w0 = wall_seconds();
    model.step(0.5f);
    ops::synchronize(r.device);
    step_s = wall_seconds() - w0;
    times = timing.times();
  }
  double matrix_s = 0, other_s = 0;
  for (const ops::KernelTime& t : times) (t.matrix ? matrix_s : other_s) += t.seconds;
  const double outside_s = std::max(0.0, step_s - matrix_s - other_s);
  std::printf("\nop times: one more step, %.1f ms%s\n", step_s * 1e3,
              model.full_flops != model.flops ? " (of the timed 1+1 blocks, not scaled)" : "");
  std::printf("  %-44s %6s %10s %7s %9s %7s\n", "op", "calls", "ms", "% step", "GFLOP/s", "% peak");
  for (const ops::KernelTime& t : times) {
    std::printf("  %-44s %6lld %10.2f %6.1f%%", t.op.c_str(), static_cast<long long>(t.calls),
                t.seconds * 1e3, 100.0 * t.seconds / step_s);
    if (t.flops > 0 && t.seconds > 0) {
      const double g = t.flops / t.seconds / 1e9;
      std::printf(" %9.1f", g);
      if (peak > 0) std::printf(" %6.1f%%", 100.0 * g / peak);
    }
    std::printf("\n");
  }
  std::printf("  GEMMs and attention: %.1f ms = %.1f%% of the step\n", matrix_s * 1e3,
              100.0 * matrix_s / step_s);
  std::printf("  other kernels and timed copies: %.1f ms = %.1f%%\n", other_s * 1e3,
              100.0 * other_s / step_s);
  std::printf("  outside the kernels (views, allocation, untimed copies): %.1f ms = %.1f%%\n",
              outside_s * 1e3, 100.0 * outside_s / step_s);
  std::printf("  non-GEMM share of the step: %.1f%%\n", 100.0 * (step_s - matrix_s) / step_s);
}

}  // namespace

int bench_transformer(const BenchRequest& r) {
  const bool flux1 = r.variant.rfind("flux.1-", 0) == 0;
  if (!flux1 && r.variant.rfind("flux.2-", 0) != 0)
    fail(ErrorCode::Unsupported,
         "bench transformer: unknown variant '{}' (flux.2-klein-4b, flux.2-klein-9b, flux.1-dev, "
         "flux.1-schnell)",
         r.variant);
  FLUXRT_CHECK(r.width % 16 == 0 && r.height % 16 == 0 && r.width > 0 && r.height > 0,
               ErrorCode::InvalidArgument, "bench transformer: --size {}x{} must be positive multiples of 16",
               r.width, r.height);
  FLUXRT_CHECK(r.steps >= 1 && r.batch >= 1 && r.max_sequence_length >= 1, ErrorCode::InvalidArgument,
               "bench transformer: steps, batch and text length must be >= 1");
  // Parameter count of the full model (the presets also reject unknown variant names).
  const double full_params = flux1 ? static_cast<double>(models::flux1_preset(r.variant).parameter_count())
                                   : static_cast<double>(models::flux2_preset(r.variant).parameter_count());
  // When the weights of the real model cannot fit next to everything else running (klein-9B is
  // 18.2 GB of bf16, FLUX.1 23.8 GB), time one double and one single block of the real shapes and
  // scale the step time by the FLOP ratio; every figure derived that way is labelled EXTRAPOLATED.
  const size_t full_bytes = static_cast<size_t>(full_params) * 2;
  const size_t available = device_free_bytes(r.device);  // where the weights will live
  const bool extrapolate =
      available > 0 && static_cast<double>(full_bytes) > 0.85 * static_cast<double>(available);
  if (extrapolate) {
    std::printf(
        "%s needs %.2f GB of weights, %.2f GB available: timing 1 double + 1 single block of the real "
        "shapes and scaling by the FLOP ratio (EXTRAPOLATED)\n",
        r.variant.c_str(), full_bytes / 1e9, available / 1e9);
  }
  const int64_t gh = r.height / 16, gw = r.width / 16, li = gh * gw, lt = r.max_sequence_length, b = r.batch;

  std::printf("%s\n", bench::machine_line().c_str());
  // Peak readings before the load, after it and after the steps; the ratios use the best.
  bench::PeakReadings peaks(!r.skip_peak);
  peaks.take("before load");

  const double t0 = wall_seconds();
  const BenchModel model = flux1 ? make_flux1(r, extrapolate, gh, gw) : make_flux2(r, extrapolate, gh, gw);
  const double load_s = wall_seconds() - t0;
  std::printf("%s: %.3f G parameters, %.2f GB %s weights generated and prepared in %.1f s (RSS %.2f GiB)\n",
              r.variant.c_str(), model.params / 1e9, model.weight_bytes / 1e9, r.weights.c_str(), load_s,
              gib(process_current_rss_bytes()));
  const double flops = model.flops, full_flops = model.full_flops;
  const double scale = full_flops / flops;  // 1 unless extrapolating

  // The kernels' one-time work for these shapes (primitives, reorders, scratch), as the denoising
  // loop does it before its first step: a forward that computes nothing.
  if (ops::ScopedKernelPlanning::available(r.device)) {
    const double p0 = wall_seconds();
    {
      ops::ScopedKernelPlanning planning(r.device);
      model.step(1.0f);
    }
    std::printf("kernel planning (one-time, before the steps): %.1f ms\n", (wall_seconds() - p0) * 1e3);
  }
  peaks.take("after load");
  std::vector<double> wall, cpu;
  for (int s = 0; s < r.steps; ++s) {
    const float sigma = 1.0f - static_cast<float>(s) / static_cast<float>(r.steps);
    const double w0 = wall_seconds(), c0 = cpu_seconds();
    model.step(sigma);
    ops::synchronize(r.device);  // the clock stops when the device has finished the forward
    wall.push_back((wall_seconds() - w0) * scale);
    cpu.push_back((cpu_seconds() - c0) * scale);
    std::printf("  step %d: %.1f ms (cpu %.1f s)\n", s + 1, wall.back() * 1e3, cpu.back());
    std::fflush(stdout);
  }
  const double peak_rss = gib(process_peak_rss_bytes());  // the model's, before the last reading
  peaks.take("after the steps");
  const double peak = peaks.gemm_best(), peak_per_core = peaks.gemm_best_per_core();
  const double register_peak = peaks.register_best(), register_per_core = peaks.register_best_per_core();
  std::vector<double> sorted = wall;
  std::sort(sorted.begin(), sorted.end());
  const double min_s = sorted.front(), median_s = sorted[sorted.size() / 2];
  const double min_cpu = *std::min_element(cpu.begin(), cpu.end());
  const double gflops = full_flops / min_s / 1e9;
  const char* tag = extrapolate ? " (EXTRAPOLATED)" : "";
  const int threads = num_threads();

  std::printf(
      "\nvariant %s  size %dx%d  batch %lld  image tokens %lld  text tokens %lld  dtype %s  weights %s  "
      "threads %d\n",
      r.variant.c_str(), r.width, r.height, static_cast<long long>(b), static_cast<long long>(li),
      static_cast<long long>(lt), bench_dtype_name(r).c_str(), r.weights.c_str(), threads);
  std::printf("FLOP per step (GEMMs + attention): %.3f TFLOP\n", full_flops / 1e12);
  std::printf("ms/step%s: min %.1f  median %.1f  (%d steps)\n", tag, min_s * 1e3, median_s * 1e3, r.steps);
  std::printf("achieved%s: %.1f GFLOP/s wall (min), %.1f GFLOP/s per CPU-second\n", tag, gflops,
              full_flops / min_cpu / 1e9);
  if (peaks.count() > 0) std::printf("%s\n", peaks.gemm_summary().c_str());
  if (peak > 0) std::printf("ratio to GEMM peak%s: %.1f%% wall", tag, 100.0 * gflops / peak);
  if (peak_per_core > 0)
    std::printf(", %.1f%% per CPU-second (robust on a shared machine)",
                100.0 * full_flops / min_cpu / 1e9 / peak_per_core);
  if (peak > 0) std::printf("\n");
  if (register_peak > 0) {
    std::printf("%s\n", peaks.register_summary().c_str());
    std::printf("ratio to register peak%s: %.1f%% wall, %.1f%% per CPU-second\n", tag,
                100.0 * gflops / register_peak, 100.0 * full_flops / min_cpu / 1e9 / register_per_core);
  }
  if (extrapolate)
    std::printf(
        "peak RSS: %.2f GiB measured with 1+1 blocks; the full model needs %.2f GiB of weights more\n",
        peak_rss, gib(full_bytes - model.weight_bytes));
  else
    std::printf("peak RSS: %.2f GiB\n", peak_rss);

  if (r.op_times) bench_op_times(model, r, peak);
  if (r.lora_rank > 0) bench_lora(r, model, scale, full_params / model.params, min_s, tag);

  if (!r.json_path.empty()) {
    std::ofstream out(r.json_path);
    FLUXRT_CHECK(out.good(), ErrorCode::Io, "bench transformer: cannot write {}", r.json_path);
    out << fmt::format(
        "{{\"component\": \"transformer\", \"variant\": \"{}\", \"dtype\": \"{}\", \"weights\": \"{}\", "
        "\"weight_bytes\": {}, "
        "\"width\": {}, \"height\": {}, \"batch\": {}, "
        "\"steps\": {}, \"tflop_per_step\": {:.4f}, \"ms_per_step_min\": {:.2f}, \"ms_per_step_median\": "
        "{:.2f}, "
        "\"gflops\": {:.2f}, \"gemm_peak_gflops\": {:.2f}, \"peak_ratio\": {:.4f}, "
        "\"gemm_peak_readings\": {}, \"gemm_peak_min_gflops\": {:.2f}, "
        "\"register_peak_gflops\": {:.2f}, \"register_peak_ratio\": {:.4f}, \"register_peak_unit\": \"{}\", "
        "\"peak_rss_gib\": {:.3f}, \"load_s\": {:.2f}, \"extrapolated\": {}}}\n",
        r.variant, bench_dtype_name(r), r.weights, model.weight_bytes, r.width, r.height, b, r.steps,
        flops / 1e12, min_s * 1e3, median_s * 1e3, gflops, peak, peak > 0 ? gflops / peak : 0.0,
        peaks.count(), peaks.gemm_worst(), register_peak, register_peak > 0 ? gflops / register_peak : 0.0,
        peaks.register_unit(), peak_rss, load_s, extrapolate ? "true" : "false");
  }
  return 0;
}

}  // namespace fluxrt::cli
