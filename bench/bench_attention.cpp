// Attention throughput at the FLUX.2-klein shapes (B = 1, D = 128; 4B: H = 24, 9B: H = 32;
// L = 1536 = 512 text + 1024 image tokens at 512^2, L = 4608 at 1024^2) in bf16 with FLUX.2 RoPE,
// as GFLOP/s (FLOPs = 4 B H Lq Lk D) and the ratios to the GEMM and register peaks (the best of a
// reading before the attentions and one after them).
// Both implementations (the SIMD kernel and the oneDNN matmul primitives, attention_cpu.h) and
// both softmax modes (the fixed Cauchy-Schwarz maximum, the forced exact maximum) are timed; the
// "auto" column marks what attention() picks on this machine.
//
//   bench_attention [--quick] [--skip-peak] [--impl simd|onednn] [--long] [--length L] [--vae]
//   (--quick: L = 1536 only, H = 24; --long: L = 4608 only; --length: that L only, H = 24, e.g.
//   768 = 512 text + 256 image tokens at 256^2; --impl: time only that one; --vae: the VAE mid
//   block's attention instead, one head of D = 512 over every latent pixel without RoPE, L = 4096
//   and 16384 at 512^2 and 1024^2)
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/args/attention.h"
#include "backend/cpu/attention_cpu.h"
#include "cli/bench/bench_common.h"
#include "core/tensor.h"
#include "ops/rope.h"

namespace {

using namespace fluxrt;

struct Shape4 {
  const char* model;
  int64_t H, L;
  int64_t D = 128;
  bool rope = true;  // FLUX.2 RoPE; the VAE's attention has none
};

backend::AttentionArgs make_args(int64_t H, int64_t L, int64_t D, bool with_rope) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(L * 3 * H * D);
  for (auto& e : x) e = normal(rng);
  // A fused [1, L, 3, H, D] projection output, as the transformer produces it.
  const Tensor qkv = Tensor::from_vector(x, {1, L, 3, H, D}, DType::BF16);
  backend::AttentionArgs a;
  a.q = qkv.select(2, 0);
  a.k = qkv.select(2, 1);
  a.v = qkv.select(2, 2);
  a.out = Tensor::empty({1, L, H, D}, DType::BF16);
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  if (!with_rope) return a;
  // FLUX.2 ids: 512 text tokens (0, 0, 0, l) then a square image grid (0, i, j, 0).
  const int64_t text = 512, side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(L - text))));
  std::vector<float> ids(L * 4, 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    if (l < text) {
      ids[l * 4 + 3] = static_cast<float>(l);
    } else {
      ids[l * 4 + 1] = static_cast<float>((l - text) / side);
      ids[l * 4 + 2] = static_cast<float>((l - text) % side);
    }
  }
  const ops::RopeTable rope = ops::rope_flux2(Tensor::from_vector(ids, {L, 4}, DType::I64));
  a.rope = backend::RopeLayout::AdjacentPairs;
  a.rope_cos = rope.cos;
  a.rope_sin = rope.sin;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, skip_peak = false, long_only = false, vae = false;
  std::string only_impl;
  int64_t length = 0;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    skip_peak = skip_peak || std::strcmp(argv[i], "--skip-peak") == 0;
    long_only = long_only || std::strcmp(argv[i], "--long") == 0;
    vae = vae || std::strcmp(argv[i], "--vae") == 0;
    if (std::strcmp(argv[i], "--impl") == 0 && i + 1 < argc) only_impl = argv[++i];
    if (std::strcmp(argv[i], "--length") == 0 && i + 1 < argc) length = std::atoll(argv[++i]);
  }
  if (length < 0 || length > 65536) {
    fmt::print(stderr, "bench_attention: --length takes 1..65536, not {}\n", length);
    return 2;
  }
  if (!only_impl.empty() && only_impl != "simd" && only_impl != "onednn") {
    fmt::print(stderr, "bench_attention: --impl takes simd or onednn, not '{}'\n", only_impl);
    return 2;
  }
  fmt::print("{}\nattention SIMD target: {}\n", bench::machine_line(), backend::cpu::attention_target_name());
  bench::PeakReadings peaks(!skip_peak);
  peaks.take("before the attentions");

  std::vector<Shape4> shapes = {{"klein-4B", 24, 1536}, {"klein-4B", 24, 4608}, {"klein-9B", 32, 1536},
                                {"klein-9B", 32, 4608}};
  if (quick) shapes = {{"klein-4B", 24, 1536}};
  if (long_only) shapes = {{"klein-4B", 24, 4608}, {"klein-9B", 32, 4608}};
  if (length > 0) shapes = {{"klein-4B", 24, length}};
  if (vae) shapes = {{"VAE mid", 1, 4096, 512, false}, {"VAE mid", 1, 16384, 512, false}};
  // Each row's cells and rate: the ratio cells are made once the last peak reading is in.
  std::vector<std::pair<std::vector<std::string>, double>> rows;
  for (const Shape4& s : shapes) {
    const backend::AttentionArgs a = make_args(s.H, s.L, s.D, s.rope);
    const double flops = 4.0 * s.H * static_cast<double>(s.L) * s.L * s.D;
    const backend::cpu::AttentionCpuImpl picked = backend::cpu::attention_impl_for(a, {});
    for (backend::cpu::AttentionCpuImpl impl :
         {backend::cpu::AttentionCpuImpl::Simd, backend::cpu::AttentionCpuImpl::OneDnn})
      for (bool online : {false, true}) {
        const bool is_simd = impl == backend::cpu::AttentionCpuImpl::Simd;
        if (!only_impl.empty() && (only_impl == "simd") != is_simd) continue;
        backend::cpu::AttentionCpuOptions opt;
        opt.impl = impl;
        opt.force_online = online;
        backend::cpu::AttentionCpuStats stats;
        backend::cpu::attention(a, opt, &stats);  // warm-up: primitives, reorders, scratch
        const bench::Timing t =
            bench::time_runs([&] { backend::cpu::attention(a, opt, nullptr); }, 0, 5, 15.0);
        const double gflops = flops / t.min_s * 1e-9;
        rows.push_back({{fmt::format("{} H={} D={} L={} bf16", s.model, s.H, s.D, s.L),
                         backend::cpu::describe_attention(a, opt), impl == picked ? "*" : "",
                         online ? "exact max" : "fixed max", fmt::format("{:.1f}", t.min_s * 1e3),
                         fmt::format("{:.1f}", t.median_s * 1e3), fmt::format("{:.1f}", gflops),
                         fmt::format("{}/{}", stats.fallback_blocks, stats.blocks)},
                        gflops});
      }
  }
  peaks.take("after the attentions");
  auto percent = [](double v, double of) {
    return of > 0 ? fmt::format("{:.0f}%", 100.0 * v / of) : std::string("-");
  };
  bench::Table table({"shape", "implementation", "auto", "softmax", "min ms", "median ms", "GFLOP/s (min)",
                      "of peak", "of regs", "fallback blocks"});
  for (auto& [cells, gflops] : rows) {
    cells.insert(cells.end() - 1,
                 {percent(gflops, peaks.gemm_best()), percent(gflops, peaks.register_best())});
    table.add(std::move(cells));
  }
  if (peaks.count() > 0) fmt::print("{}\n", peaks.gemm_summary());
  if (peaks.register_best() > 0) fmt::print("{}\n", peaks.register_summary());
  table.print();
  return 0;
}
