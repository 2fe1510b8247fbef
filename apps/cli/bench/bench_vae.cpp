// `fluxrt bench vae`: the FLUX.2 autoencoder (klein 4B and 9B share it) on synthetic weights of the
// real shapes (random, never zeros; no files needed). Times the pipeline-level decode
// (BN de-normalisation, unpatchify, post_quant_conv + decoder) and encode (encoder, mode,
// patchify, BN normalisation) at the requested size, and prints ms, GFLOP/s (convolutions and
// mid-block attention, counting the overlap a tiled pass recomputes), the ratios to the GEMM and
// register peaks (the best of readings before the load, after it and after the passes), whether
// the pass was tiled and its tile grid, and the peak RSS. Two timed runs each (one 1024x1024
// decode is ~10 TFLOP).
//
// --tiling auto (default) runs the plain pass when its estimate fits half of the device's free memory, else
// the lean exact pass when its estimate fits, else tiles, as the pipelines do; on / off / lean force tiles /
// the plain pass / the lean pass. --tile-size sets the tile edge (overlap = a quarter of it).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_common.h"
#include "core/allocator.h"
#include "core/error.h"
#include "models/vae/flux2_vae.h"
#include "models/weight_binder.h"
#include "ops/dispatch.h"

namespace fluxrt::cli {
namespace {

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

Tensor uniform_tensor(const Shape& shape, DType dtype, uint64_t seed, float scale) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = scale * static_cast<float>((s >> 40) * 0x1.0p-24 * 2.0 - 1.0);
  }
  return t.to(dtype);
}

}  // namespace

int bench_vae(const BenchRequest& request) {
  if (request.variant != "flux.2-klein-4b" && request.variant != "flux.2-klein-9b") {
    std::fprintf(stderr, "bench vae: only the FLUX.2 autoencoder is implemented (variant %s)\n",
                 request.variant.c_str());
    return 2;
  }
  if (request.width % 16 != 0 || request.height % 16 != 0 || request.width <= 0 || request.height <= 0) {
    std::fprintf(stderr, "bench vae: width and height must be positive multiples of 16\n");
    return 2;
  }
  // Tiling options first, so a bad flag fails before the GEMM peak is measured.
  models::Flux2VaeOptions options;
  models::TilingOptions& tiling = options.tiling;
  if (request.vae_tiling == "on")
    tiling.mode = models::TilingMode::Always;
  else if (request.vae_tiling == "off")
    tiling.mode = models::TilingMode::Never;
  else if (request.vae_tiling == "auto")
    tiling.mode = models::TilingMode::Auto;
  else if (request.vae_tiling == "lean")
    tiling.mode = models::TilingMode::Lean;
  else
    fail(ErrorCode::InvalidArgument, "bench vae: --tiling {} (auto, on, off or lean)", request.vae_tiling);
  if (request.vae_tile_pixels != 0) {
    FLUXRT_CHECK(request.vae_tile_pixels >= 64 && request.vae_tile_pixels % 16 == 0,
                 ErrorCode::InvalidArgument,
                 "bench vae: --tile-size {} must be a multiple of 16, at least 64", request.vae_tile_pixels);
    tiling.tile_pixels = request.vae_tile_pixels;
    tiling.overlap_pixels = request.vae_tile_pixels / 4 / 16 * 16;
  }
  const int64_t B = request.batch, H = request.height, W = request.width;
  std::printf("%s\n", bench::machine_line().c_str());
  // Peak readings before the load, after it and after the passes; the ratios use the best.
  bench::PeakReadings peaks(!request.skip_peak);
  peaks.take("before load");

  const models::Flux2VaeConfig config;  // the FLUX.2 AE: (128, 256, 512, 512), z 32, GN 32
  options.dtype = request.dtype;
  options.device = request.device;
  const size_t rss_before = process_peak_rss_bytes();
  const models::Flux2Vae vae = models::Flux2Vae::from_store(
      models::make_synthetic_flux2_vae(config, request.dtype, 1), config, options);
  const size_t rss_loaded = process_peak_rss_bytes();
  std::printf(
      "FLUX.2 VAE, synthetic %s weights, %lldx%lld, batch %lld; peak RSS after load %.2f GiB (was %.2f)\n",
      std::string(dtype_name(request.dtype)).c_str(), static_cast<long long>(W), static_cast<long long>(H),
      static_cast<long long>(B), gib(rss_loaded), gib(rss_before));
  peaks.take("after load");

  const Tensor z = uniform_tensor({B, config.packed_channels(), H / 16, W / 16}, request.dtype, 7, 1.7f);
  const Tensor x = uniform_tensor({B, 3, H, W}, request.dtype, 8, 1.0f);
  auto describe = [&](const char* pass, const models::TilePlan& p) {
    const char* forced = tiling.mode == models::TilingMode::Always ? "not used, --tiling on"
                         : tiling.mode == models::TilingMode::Lean ? "not used, --tiling lean"
                                                                   : "not used, --tiling off";
    std::printf(
        "%s: %s (untiled estimate %.2f GiB, lean estimate %.2f GiB, budget %s)\n", pass,
        p.tiled ? fmt::format("tiled, {}x{} tiles of {}x{} px, overlap {} px, {} stages on the whole image, "
                              "tiled estimate {:.2f} GiB",
                              p.rows, p.cols, p.tile_width, p.tile_height, tiling.overlap_pixels,
                              p.whole_image_stages, gib(p.tiled_estimate_bytes))
                      .c_str()
                : (p.lean ? "untiled, lean exact pass (banded convolutions)" : "untiled"),
        gib(p.estimate_bytes), gib(p.lean_estimate_bytes),
        tiling.mode == models::TilingMode::Auto
            ? fmt::format("{:.2f} GiB{}", gib(p.budget_bytes),
                          tiling.memory_budget_bytes ? "" : " = MemAvailable / 2")
                  .c_str()
            : forced);
  };
  const models::TilePlan dplan = vae.decode_tile_plan(B, H, W), eplan = vae.encode_tile_plan(B, H, W);
  describe("decode", dplan);
  describe("encode", eplan);
  // FLOPs actually executed: the whole-image stages once, the tiled ones per tile (overlaps included).
  const double dflops = dplan.executed_flops, eflops = eplan.executed_flops;

  // Each pass's figures, made into the table once the last peak reading is in.
  struct PassResult {
    const char* name;
    models::TilePlan plan;
    double flops;
    bench::Timing t;
    double tensors_gib, rss_gib;
  };
  std::vector<PassResult> passes;
  auto run = [&](const char* name, const models::TilePlan& plan, double flops,
                 const std::function<void()>& fn) {
    reset_host_bytes_peak();
    const size_t held = host_bytes_in_use();  // weights and inputs
    const bench::Timing t = bench::time_runs(fn, 0, 2, 1.0);
    passes.push_back({name, plan, flops, t, gib(host_bytes_peak() - held), gib(process_peak_rss_bytes())});
  };
  // Inputs uploaded once; each run ends when the device has finished (ops::synchronize).
  const Tensor z_dev = models::to_device(z, request.device), x_dev = models::to_device(x, request.device);
  run("decode", dplan, dflops, [&] {
    (void)vae.decode_latents(z_dev);
    ops::synchronize(request.device);
  });
  run("encode", eplan, eflops, [&] {
    (void)vae.encode_latents(x_dev);
    ops::synchronize(request.device);
  });
  peaks.take("after the passes");
  const double peak = peaks.gemm_best();
  bench::Table table({"pass", "tiled", "min ms", "median ms", "runs", "GFLOP", "GFLOP/s", "GFLOP/s/core",
                      "vs peak", "vs registers", "peak tensors GiB", "peak RSS GiB"});
  std::string json = "{\"component\": \"vae\", \"variant\": \"" + request.variant +
                     "\", \"width\": " + std::to_string(W) + ", \"height\": " + std::to_string(H) +
                     ", \"passes\": [";
  for (const PassResult& p : passes) {
    const bench::Timing& t = p.t;
    const std::string grid =
        p.plan.tiled ? fmt::format("{}x{}", p.plan.rows, p.plan.cols) : (p.plan.lean ? "lean" : "no");
    const double gflops = p.flops / t.min_s * 1e-9, per_core = p.flops / t.min_cpu_s * 1e-9;
    auto ratio = [&](double to) { return to > 0 ? fmt::format("{:.2f}", gflops / to) : std::string("-"); };
    table.add({p.name, grid, fmt::format("{:.0f}", t.min_s * 1e3), fmt::format("{:.0f}", t.median_s * 1e3),
               std::to_string(t.runs), fmt::format("{:.0f}", p.flops * 1e-9), fmt::format("{:.1f}", gflops),
               fmt::format("{:.1f}", per_core), ratio(peak), ratio(peaks.register_best()),
               fmt::format("{:.2f}", p.tensors_gib), fmt::format("{:.2f}", p.rss_gib)});
    json += fmt::format(
        "{}{{\"pass\": \"{}\", \"tiled\": {}, \"lean\": {}, \"tile_rows\": {}, \"tile_cols\": {}, \"gflop\": "
        "{:.1f}, \"min_s\": {:.4f}, \"median_s\": {:.4f}, \"gflops\": {:.2f}, "
        "\"peak_ratio\": {:.4f}, \"peak_tensor_gib\": {:.3f}, \"peak_rss_gib\": {:.3f}}}",
        json.back() == '[' ? "" : ", ", p.name, p.plan.tiled ? "true" : "false",
        p.plan.lean ? "true" : "false", p.plan.rows, p.plan.cols, p.flops * 1e-9, t.min_s, t.median_s, gflops,
        peak > 0 ? gflops / peak : 0.0, p.tensors_gib, p.rss_gib);
  }
  if (peaks.count() > 0) std::printf("%s\n", peaks.gemm_summary().c_str());
  if (peaks.register_best() > 0) std::printf("%s\n", peaks.register_summary().c_str());
  table.print();
  std::printf(
      "(min/median of wall time; the machine may be shared, GFLOP/s/core uses the least CPU time of a run;\n"
      " GFLOP counts what was executed, tile overlaps included; peak tensors: the pass's activations "
      "(tensor\n"
      " allocator high-water mark above what was held before it); peak RSS: the process high-water mark so "
      "far)\n");
  if (!request.json_path.empty()) {
    std::ofstream f(request.json_path);
    f << json
      << fmt::format(
             "], \"gemm_peak_gflops\": {:.2f}, \"gemm_peak_readings\": {}, \"gemm_peak_min_gflops\": {:.2f}, "
             "\"register_peak_gflops\": {:.2f}, \"register_peak_unit\": \"{}\"}}\n",
             peak, peaks.count(), peaks.gemm_worst(), peaks.register_best(), peaks.register_unit());
    if (!f) fail(ErrorCode::Io, "bench vae: cannot write {}", request.json_path);
  }
  return 0;
}

}  // namespace fluxrt::cli
