// Memory-bound ops at FLUX shapes (CPU kernels): achieved GB/s and the ratio of each op's time to a memcpy of
// the same number of bytes measured in the same run (target: within 1.5x of memcpy). The memcpy
// runs on the same OpenMP thread count as the kernels, in one contiguous chunk per thread.
// Prints a table; never asserts.
//
//   bench_ops [--threads N] [--runs N] [--filter SUBSTRING] [--peak]
//
// --peak also reads the GEMM and register peaks (bench_common.h) and prints them in the header, for
// reference.
#include <fmt/format.h>
#include <omp.h>

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

// memcpy of `bytes` split over the thread pool (reads bytes, writes bytes).
struct Memcpy {
  std::vector<char> src, dst;
  explicit Memcpy(size_t bytes) : src(bytes, 1), dst(bytes, 0) {}
  void run() {
    const size_t n = src.size();
#pragma omp parallel
    {
      const size_t t = static_cast<size_t>(omp_get_thread_num()), nt = static_cast<size_t>(omp_get_num_threads());
      const size_t b = n * t / nt, e = n * (t + 1) / nt;
      std::memcpy(dst.data() + b, src.data() + b, e - b);
    }
  }
};

struct Case {
  std::string name;
  double bytes;               // bytes read + written by the op (one pass)
  std::function<void()> run;  // inputs captured by value
};

// Kernels are timed through the CPU kernel table with preallocated outputs: the op front ends
// would add a fresh output allocation per call (page faults on first touch), which the runtime's
// arena avoids and which is not the kernel's cost.
std::vector<Case> make_cases() {
  using namespace fluxrt::backend;
  const KernelTable& k = cpu_kernels();
  std::vector<Case> cases;
  const DType bf = DType::BF16;
  auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); };
  for (auto [D, dt] : {std::pair{int64_t{3072}, bf}, std::pair{int64_t{3072}, DType::F32}, std::pair{int64_t{4096}, bf}}) {
    // AdaLN modulate on the hidden states of a 1024px step; shift/scale are chunks of [1, 6D].
    const Tensor x = filled({1, 4608, D}, dt), mod = filled({1, 6 * D}, dt), y = like(x);
    AdaLnArgs a{x, mod.narrow(1, 0, D), mod.narrow(1, D, D), y, 1e-6f};
    cases.push_back({fmt::format("adaln_modulate {} [1,4608,{}]", dtype_name(dt), D), 2.0 * x.nbytes(),
                     [=, &k] { k.adaln_modulate(a); }});
  }
  {  // gated residual in place: read x and y, write x
    const Tensor x = filled({1, 4608, 3072}, bf), y = filled({1, 4608, 3072}, bf), gate = filled({1, 3072}, bf);
    GatedResidualArgs a{x, gate, y, x};
    cases.push_back({"gated_residual (in place) bf16 [1,4608,3072]", 3.0 * x.nbytes(), [=, &k] { k.gated_residual(a); }});
  }
  {  // layer norm (no affine) and RMS norms
    const Tensor x = filled({1, 4608, 3072}, bf);
    LayerNormArgs ln{x, Tensor(), Tensor(), like(x), 1e-6f};
    cases.push_back({"layer_norm bf16 [1,4608,3072]", 2.0 * x.nbytes(), [=, &k] { k.layer_norm(ln); }});
    // QK norm on q as a view of the fused qkv projection: [1, 4608, 24, 128], row stride 3*3072.
    const Tensor qkv = filled({1, 4608, 3 * 3072}, bf), w = filled({128}, bf);
    const Tensor q = qkv.narrow(2, 0, 3072).reshape({1, 4608, 24, 128});
    RmsNormArgs rq{q, w, Tensor::empty(q.shape(), bf), 1e-6f, false};
    cases.push_back({"rms_norm/head bf16 [1,4608,24,128]", 2.0 * q.nbytes(), [=, &k] { k.rms_norm(rq); }});
    const Tensor t5 = filled({1, 512, 4096}, bf), wt = filled({4096}, bf);
    RmsNormArgs rt{t5, wt, like(t5), 1e-6f, true};
    cases.push_back({"t5_rms_norm bf16 [1,512,4096]", 2.0 * t5.nbytes(), [=, &k] { k.rms_norm(rt); }});
  }
  {  // MLP activations
    const Tensor h = filled({1, 4608, 18432}, bf);
    GluArgs sw{GluActivation::Silu, h.narrow(-1, 0, 9216), h.narrow(-1, 9216, 9216),
               Tensor::empty({1, 4608, 9216}, bf)};
    cases.push_back({"swiglu bf16 [1,4608,18432]->9216", 1.5 * h.nbytes(), [=, &k] { k.glu(sw); }});
    const Tensor g = filled({1, 4608, 12288}, bf);
    UnaryArgs ge{UnaryOp::GeluTanh, 1.0f, g, like(g)};
    cases.push_back({"gelu_tanh bf16 [1,4608,12288]", 2.0 * g.nbytes(), [=, &k] { k.unary(ge); }});
    UnaryArgs si{UnaryOp::Silu, 1.0f, g, like(g)};
    cases.push_back({"silu bf16 [1,4608,12288]", 2.0 * g.nbytes(), [=, &k] { k.unary(si); }});
    const Tensor a = filled({1, 4608, 3072}, bf), b = filled({3072}, bf);
    BinaryArgs ad{BinaryOp::Add, a, b.expand(a.shape()), like(a)};
    cases.push_back({"add (bias bcast) bf16 [1,4608,3072]", 2.0 * a.nbytes(), [=, &k] { k.binary(ad); }});
  }
  {  // softmax rows of T5 attention scores
    const Tensor s = filled({64, 512, 512}, DType::F32);
    SoftmaxArgs sm{s, like(s)};
    cases.push_back({"softmax f32 [64,512,512]", 2.0 * s.nbytes(), [=, &k] { k.softmax(sm); }});
  }
  {  // VAE decoder at 1024 px
    const Tensor x = filled({1, 128, 512, 512}, bf), w = filled({128}, bf), b = filled({128}, bf);
    GroupNormArgs g1{x, w, b, like(x), 32, 1e-6f, true};
    cases.push_back({"group_norm+silu bf16 [1,128,512,512]", 2.0 * x.nbytes(), [=, &k] { k.group_norm(g1); }});
    const Tensor x2 = filled({1, 512, 128, 128}, bf), w2 = filled({512}, bf), b2 = filled({512}, bf);
    GroupNormArgs g2{x2, w2, b2, like(x2), 32, 1e-6f, true};
    cases.push_back({"group_norm+silu bf16 [1,512,128,128]", 2.0 * x2.nbytes(), [=, &k] { k.group_norm(g2); }});
    Upsample2xArgs up{x2, Tensor::empty({1, 512, 256, 256}, bf)};
    cases.push_back({"upsample_2x bf16 [1,512,128,128]", 5.0 * x2.nbytes(), [=, &k] { k.upsample_nearest_2x(up); }});
    const Tensor z = filled({1, 128, 64, 64}, bf), m = filled({128}, DType::F32), v = filled({128}, DType::F32, 2.9f);
    ChannelNormArgs cn{z, m, v, like(z), 1e-4f, false};
    cases.push_back({"latent_normalize bf16 [1,128,64,64]", 2.0 * z.nbytes(), [=, &k] { k.channel_norm(cn); }});
  }
  return cases;
}

}  // namespace
}  // namespace fluxrt::bench

int main(int argc, char** argv) {
  using namespace fluxrt;
  using namespace fluxrt::bench;
  int runs = 7;
  std::string filter;
  bool peak = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) set_num_threads(std::atoi(argv[++i]));
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--peak") peak = true;
    else {
      std::fprintf(stderr, "usage: bench_ops [--threads N] [--runs N] [--filter SUBSTRING] [--peak]\n");
      return 2;
    }
  }
  std::printf("%s\n", machine_line().c_str());
  // One reading: the ops here are timed against memcpy, the peaks are only for reference.
  PeakReadings peaks(peak);
  peaks.take("before the ops");
  std::printf("times: median of %d runs after 1 warm-up; memcpy: same bytes, same threads\n\n", runs);
  // Wall time on a machine shared with other jobs mostly measures the neighbours; the fastest run
  // (a run the scheduler left alone) and the process CPU time per run (all threads, averaged over
  // the runs: see Timing::mean_cpu_s) are the steadier figures, so all three ratios are printed.
  Table table({"op", "MB moved", "median ms", "GB/s", "memcpy GB/s", "time / memcpy", "min ms", "min / memcpy min",
               "cpu ms (mean)", "cpu / memcpy cpu"});
  for (auto& c : make_cases()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    const Timing t = time_runs(c.run, 1, runs);
    Memcpy mc(static_cast<size_t>(c.bytes / 2));
    const Timing tm = time_runs([&] { mc.run(); }, 1, runs);
    char mb[32], ms[32], gbs[32], mgbs[32], ratio[32], mins[32], mratio[32], cms[32], cratio[32];
    std::snprintf(mins, sizeof mins, "%.3f", t.min_s * 1e3);
    std::snprintf(mratio, sizeof mratio, "%.2fx", t.min_s / tm.min_s);
    std::snprintf(cms, sizeof cms, "%.3f", t.mean_cpu_s * 1e3);
    std::snprintf(cratio, sizeof cratio, "%.2fx", tm.mean_cpu_s > 0 ? t.mean_cpu_s / tm.mean_cpu_s : 0.0);
    std::snprintf(mb, sizeof mb, "%.1f", c.bytes / 1e6);
    std::snprintf(ms, sizeof ms, "%.3f", t.median_s * 1e3);
    std::snprintf(gbs, sizeof gbs, "%.1f", c.bytes / t.median_s / 1e9);
    std::snprintf(mgbs, sizeof mgbs, "%.1f", c.bytes / tm.median_s / 1e9);
    std::snprintf(ratio, sizeof ratio, "%.2fx", t.median_s / tm.median_s);
    table.add({c.name, mb, ms, gbs, mgbs, ratio, mins, mratio, cms, cratio});
  }
  table.print();
  return 0;
}
