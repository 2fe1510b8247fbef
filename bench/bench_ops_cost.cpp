// Per-element cost of the memory-bound CPU kernels, measured so that it stays readable on a busy
// machine: each op runs on a small slice of its FLUX shape (same row length and layout, few rows,
// cache-resident), many times, and the fastest call is kept; a call lasts tens of microseconds, so
// most calls finish inside one scheduler slice. Next to it: what a streaming memcpy of the op's
// bytes costs per element (16 MiB chunks, fastest of many, same thread count). Their ratio is the
// op's time / memcpy time bench_ops would show when the op is compute-bound and the machine idle;
// bench_ops measures the real shapes, whose wall times on a loaded machine mostly measure the
// neighbours. One thread by default: the slices are below the kernels' parallel threshold, and
// a second thread on a busy machine adds waits, not speed. Prints a table; never asserts.
//
//   bench_ops_cost [--threads N] [--reps N] [--filter SUBSTRING]
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "bench_inputs.h"
#include "cli/bench/bench_common.h"
#include "core/tensor.h"
#include "core/threads.h"

namespace fluxrt::bench {
namespace {

double fastest_ns(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: first touch, thread pool start
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Case {
  std::string name;
  double elements;        // output elements per call
  double bytes_per_elem;  // bytes read + written per output element (as bench_ops counts them)
  std::function<void()> run;
};

// The ops of bench_ops on slices of the same shapes (norms with per-column vectors get enough rows
// to amortise their once-per-call preparation, as the 4608-row originals do).
std::vector<Case> make_cases() {
  using namespace fluxrt::backend;
  const KernelTable& k = cpu_kernels();
  std::vector<Case> cases;
  const DType bf = DType::BF16;
  auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); };
  for (auto [D, dt] :
       {std::pair{int64_t{3072}, bf}, std::pair{int64_t{3072}, DType::F32}, std::pair{int64_t{4096}, bf}}) {
    const Tensor x = filled({1, 48, D}, dt), mod = filled({1, 6 * D}, dt), y = like(x);
    AdaLnArgs a{x, mod.narrow(1, 0, D), mod.narrow(1, D, D), y, 1e-6f};
    cases.push_back({fmt::format("adaln_modulate {} [1,48,{}]", dtype_name(dt), D), double(x.numel()),
                     2.0 * x.element_size(), [=, &k] { k.adaln_modulate(a); }});
  }
  {
    const Tensor x = filled({1, 16, 3072}, bf), y = filled({1, 16, 3072}, bf), gate = filled({1, 3072}, bf);
    GatedResidualArgs a{x, gate, y, x};
    cases.push_back({"gated_residual (in place) bf16 [1,16,3072]", double(x.numel()), 6.0,
                     [=, &k] { k.gated_residual(a); }});
  }
  {
    const Tensor x = filled({1, 48, 3072}, bf);
    LayerNormArgs ln{x, Tensor(), Tensor(), like(x), 1e-6f};
    cases.push_back({"layer_norm bf16 [1,48,3072]", double(x.numel()), 4.0, [=, &k] { k.layer_norm(ln); }});
    const Tensor qkv = filled({1, 16, 3 * 3072}, bf), w = filled({128}, bf);
    const Tensor q = qkv.narrow(2, 0, 3072).reshape({1, 16, 24, 128});
    RmsNormArgs rq{q, w, Tensor::empty(q.shape(), bf), 1e-6f, false};
    cases.push_back(
        {"rms_norm/head bf16 [1,16,24,128]", double(q.numel()), 4.0, [=, &k] { k.rms_norm(rq); }});
    const Tensor t5 = filled({1, 16, 4096}, bf), wt = filled({4096}, bf);
    RmsNormArgs rt{t5, wt, like(t5), 1e-6f, true};
    cases.push_back({"t5_rms_norm bf16 [1,16,4096]", double(t5.numel()), 4.0, [=, &k] { k.rms_norm(rt); }});
  }
  {
    const Tensor h = filled({1, 4, 18432}, bf);
    GluArgs sw{GluActivation::Silu, h.narrow(-1, 0, 9216), h.narrow(-1, 9216, 9216),
               Tensor::empty({1, 4, 9216}, bf)};
    cases.push_back({"swiglu bf16 [1,4,18432]->9216", 4.0 * 9216, 6.0, [=, &k] { k.glu(sw); }});
    const Tensor g = filled({1, 4, 12288}, bf);
    UnaryArgs ge{UnaryOp::GeluTanh, 1.0f, g, like(g)};
    cases.push_back({"gelu_tanh bf16 [1,4,12288]", double(g.numel()), 4.0, [=, &k] { k.unary(ge); }});
    UnaryArgs si{UnaryOp::Silu, 1.0f, g, like(g)};
    cases.push_back({"silu bf16 [1,4,12288]", double(g.numel()), 4.0, [=, &k] { k.unary(si); }});
    const Tensor a = filled({1, 16, 3072}, bf), b = filled({3072}, bf);
    BinaryArgs ad{BinaryOp::Add, a, b.expand(a.shape()), like(a)};
    cases.push_back({"add (bias bcast) bf16 [1,16,3072]", double(a.numel()), 4.0, [=, &k] { k.binary(ad); }});
  }
  {
    const Tensor s = filled({1, 64, 512}, DType::F32);
    SoftmaxArgs sm{s, like(s)};
    cases.push_back({"softmax f32 [1,64,512]", double(s.numel()), 8.0, [=, &k] { k.softmax(sm); }});
  }
  {  // group norm: 32 groups of 4 channels of 32x32 (the real groups are 4 x 512^2 / 16 x 128^2)
    const Tensor x = filled({1, 128, 32, 32}, bf), w = filled({128}, bf), b = filled({128}, bf);
    GroupNormArgs g1{x, w, b, like(x), 32, 1e-6f, true};
    cases.push_back(
        {"group_norm+silu bf16 [1,128,32,32]", double(x.numel()), 4.0, [=, &k] { k.group_norm(g1); }});
  }
  return cases;
}

// Streaming memcpy of 16 MiB split over the threads: ns per byte copied.
double memcpy_ns_per_byte(int reps) {
  const size_t n = size_t{16} << 20;
  std::vector<char> src(n, 1), dst(n, 0);
  const double ns = fastest_ns(
      [&] {
#pragma omp parallel
        {
          const size_t t = static_cast<size_t>(omp_get_thread_num()),
                       nt = static_cast<size_t>(omp_get_num_threads());
          std::memcpy(dst.data() + n * t / nt, src.data() + n * t / nt, n * (t + 1) / nt - n * t / nt);
        }
      },
      reps);
  return ns / static_cast<double>(n);
}

}  // namespace
}  // namespace fluxrt::bench

int main(int argc, char** argv) {
  using namespace fluxrt;
  using namespace fluxrt::bench;
  int reps = 300;
  std::string filter;
  set_num_threads(1);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      set_num_threads(std::atoi(argv[++i]));
    else if (a == "--reps" && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_ops_cost [--threads N] [--reps N] [--filter SUBSTRING]\n");
      return 2;
    }
  }
  std::printf("%s\n", machine_line().c_str());
  const double mc = memcpy_ns_per_byte(std::max(10, reps / 10));
  std::printf("fastest of %d calls per op; streaming memcpy (16 MiB): %.1f GB/s\n\n", reps, 1.0 / mc);
  Table table({"op (cache-resident slice)", "ns/elem", "memcpy ns/elem", "cost / memcpy"});
  for (auto& c : make_cases()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    const double ns = fastest_ns(c.run, reps) / c.elements, copy = mc * c.bytes_per_elem / 2.0;
    // memcpy moves each byte twice (read + write) in the bytes bench_ops counts, hence the / 2.
    table.add(
        {c.name, fmt::format("{:.3f}", ns), fmt::format("{:.3f}", copy), fmt::format("{:.2f}x", ns / copy)});
  }
  table.print();
  return 0;
}
