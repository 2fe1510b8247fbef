// GEMM benchmark: every linear shape of one FLUX.2-klein-4B step (M = 1536 tokens: 1024 image +
// 512 text at 512x512) through the CPU linear kernel, as GFLOP/s and the ratios to the oneDNN GEMM
// peak and the register peak, each the best of a reading before the layers and one after them.
//
//   bench_gemm [--threads N] [--m ROWS] [--runs R] [--impl auto|amx|packed|onednn|w8a8|all] [--only NAME]
//              [--copies C] [--gated 0|1] [--shape KxN]
//
// --copies C prepares C copies of each weight and calls them in turn, so that with C copies
// larger than the last-level cache the weights stream from memory as in a model step (one copy:
// after the first run a layer's weights may sit in a large L3). --gated 1 runs the FLUX gated
// residual epilogue (y += gate * x W^T, y as its own residual), as the proj, mlp-out and linear2
// layers do in a step. --shape KxN times that one shape instead of klein's layers.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/linear_cpu.h"
#include "cli/bench/bench_common.h"
#include "core/threads.h"

using namespace fluxrt;

namespace {

struct LayerShape {
  const char* name;
  int64_t k, n;
};

// klein-4B (D = 3072, SwiGLU hidden 9216), flux-reference.md sections 2.3, 3.4 and 6.
constexpr LayerShape kKleinShapes[] = {
    {"double qkv", 3072, 9216},   {"double proj", 3072, 3072},  {"double mlp in", 3072, 18432},
    {"double mlp out", 9216, 3072}, {"single linear1", 3072, 27648}, {"single linear2", 12288, 3072},
};

Tensor random_tensor(const LayerShape& s, DType dtype, uint32_t seed, bool weight) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, weight ? 0.02f : 1.0f);
  const int64_t rows = weight ? s.n : 1;
  std::vector<float> v(static_cast<size_t>(rows * s.k));
  for (auto& e : v) e = dist(rng);
  return Tensor::from_vector(v, {rows, s.k}, dtype);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, runs = 5;
  int64_t m = 1536;
  std::string impl = "all", only;
  int copies = 1;
  std::string shape;
  bool gated = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--m")) m = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--impl")) impl = argv[i + 1];
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];  // layers whose name contains this
    if (!std::strcmp(argv[i], "--copies")) copies = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--gated")) gated = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--shape")) shape = argv[i + 1];
  }
  set_num_threads(threads);
  std::printf("%s\n", bench::machine_line().c_str());
  bench::PeakReadings peaks(true);
  peaks.take("before the layers");

  std::vector<std::pair<std::string, backend::CpuLinearImpl>> impls;
  if (impl == "all" || impl == "auto") impls.push_back({"auto", backend::CpuLinearImpl::Auto});
  // amx where the CPU has the tile unit (elsewhere the choice falls back to the default).
  if ((impl == "all" && backend::gemm::amx_gemm_supported()) || impl == "amx")
    impls.push_back({"amx", backend::CpuLinearImpl::Amx});
  if (impl == "all" || impl == "packed") impls.push_back({"packed", backend::CpuLinearImpl::Packed});
  if (impl == "all" || impl == "onednn") impls.push_back({"onednn", backend::CpuLinearImpl::OneDnn});
  if (impl == "all" || impl == "w8a8") impls.push_back({"w8a8", backend::CpuLinearImpl::W8A8});

  // Each row's cells up to its GFLOP/s, and its rates: the ratio cells are made once the last peak
  // reading is in.
  struct Row {
    std::vector<std::string> cells;
    double gflops, gflops_per_cpu_s;
  };
  std::vector<Row> rows;
  double total_flops = 0, total_s_auto = 0;
  std::vector<LayerShape> shapes(std::begin(kKleinShapes), std::end(kKleinShapes));
  long long custom_k = 0, custom_n = 0;
  if (!shape.empty()) {
    if (std::sscanf(shape.c_str(), "%lldx%lld", &custom_k, &custom_n) != 2 || custom_k <= 0 ||
        custom_n <= 0) {
      std::fprintf(stderr, "bench_gemm: --shape %s: expected KxN, e.g. 12288x3072\n", shape.c_str());
      return 1;
    }
    shapes = {{"custom", custom_k, custom_n}};
  }
  for (const LayerShape& s : shapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    const Tensor w = random_tensor(s, DType::BF16, 1, true);
    Tensor x = Tensor::empty({m, s.k}, DType::BF16);
    {
      std::mt19937 rng(2);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> v(static_cast<size_t>(m * s.k));
      for (auto& e : v) e = dist(rng);
      x = Tensor::from_vector(v, {m, s.k}, DType::BF16);
    }
    Tensor y = Tensor::zeros({m, s.n}, DType::BF16);
    // A small gate keeps the residual finite over the runs.
    const Tensor gate = Tensor::full({s.n}, DType::BF16, 1e-3);
    const double flops = 2.0 * m * s.k * s.n;
    for (const auto& [iname, ikind] : impls) {
      std::vector<std::shared_ptr<backend::PreparedLinear>> prepared;
      for (int c = 0; c < copies; ++c)
        prepared.push_back(backend::prepare_linear_cpu_with(w, Tensor(), ikind));
      const auto& p = prepared.front();
      backend::LinearArgs args;
      args.x = x;
      args.y = y;
      if (gated) {
        args.residual = y;
        args.gate = gate;
      }
      size_t next = 0;
      const bench::Timing t = bench::time_runs(
          [&] {
            args.w = prepared[next++ % prepared.size()].get();
            backend::linear_cpu(args);
          },
          copies, std::max(runs, copies), 15.0);
      const double gf = flops / t.min_s / 1e9;
      if (iname == "auto") {
        total_flops += flops;
        total_s_auto += t.min_s;
      }
      rows.push_back({{s.name, fmt::format("{}x{}x{}", m, s.k, s.n), iname, backend::describe_linear_cpu(*p),
                       backend::linear_cpu_kernel_for(args), fmt::format("{:.1f}", t.min_s * 1e3),
                       fmt::format("{:.1f}", t.median_s * 1e3)},
                      gf,
                      flops / t.min_cpu_s / 1e9});
    }
  }
  peaks.take("after the layers");
  const double peak = peaks.gemm_best(), peak_per_core = peaks.gemm_best_per_core();
  const double registers = peaks.register_best();
  auto percent = [](double v, double of) {
    return of > 0 ? fmt::format("{:.0f}%", 100.0 * v / of) : std::string("-");
  };
  // "/cpu-s" columns: flops per CPU-second of the process, robust to other jobs on the machine.
  bench::Table table({"layer", "M x K x N", "impl", "weights", "kernel", "min ms", "median ms", "GFLOP/s",
                      "% peak", "GFLOP/cpu-s", "% peak/cpu-s", "% regs"});
  for (Row& row : rows) {
    row.cells.insert(row.cells.end(),
                     {fmt::format("{:.1f}", row.gflops), percent(row.gflops, peak),
                      fmt::format("{:.1f}", row.gflops_per_cpu_s),
                      percent(row.gflops_per_cpu_s, peak_per_core), percent(row.gflops, registers)});
    table.add(std::move(row.cells));
  }
  std::printf("%s\n", peaks.gemm_summary().c_str());
  if (registers > 0) std::printf("%s\n", peaks.register_summary().c_str());
  table.print();
  if (total_s_auto > 0)
    std::printf("one of each layer (auto): %.1f GFLOP/s = %.0f%% of the reference peak\n",
                total_flops / total_s_auto / 1e9, 100.0 * total_flops / total_s_auto / 1e9 / peak);
  return 0;
}
