#include "ops/kernel_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "core/error.h"
#include "ops/dispatch.h"

namespace fluxrt::ops {
namespace {

using backend::KernelTable;

struct Totals {
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;
  bool matrix = false;
};

// The one active timing scope's state. The wrapper kernels are plain function pointers, so they
// find the real table here; only the thread that opened the scope reaches them (the forced table
// is per thread), but worker threads never do, hence no lock on the hot path beyond `g_mutex`
// around the totals.
std::mutex g_mutex;
bool g_active = false;
const KernelTable* g_inner = nullptr;
Device g_device;
std::map<std::string, Totals, std::less<>> g_totals;
thread_local int t_depth = 0;        // > 0 inside a timed kernel: nested slots count under it
thread_local bool t_timing = false;  // this thread opened the active scope

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void add(const std::string& op, double seconds, double flops, bool matrix) {
  std::lock_guard lock(g_mutex);
  Totals& t = g_totals[op];
  t.calls += 1;
  t.seconds += seconds;
  t.flops += flops;
  t.matrix = matrix;
}

// Label, FLOPs and kind of one call, per argument type.
struct Described {
  std::string op;
  double flops = 0;
  bool matrix = false;
};

Described describe(const backend::LinearArgs& a) {
  const int64_t m = a.x.numel() / std::max<int64_t>(a.x.size(-1), 1);
  const int64_t n = a.w->out_features(), k = a.w->in_features();
  std::string op = fmt::format("linear {}->{} M={}", k, n, m);
  if (a.residual.defined()) op += " +gated residual";
  return {op, 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k), true};
}

Described describe(const backend::AttentionArgs& a) {
  const int64_t b = a.q.size(0), lq = a.q.size(1), h = a.q.size(2), d = a.q.size(3), lk = a.k.size(1);
  std::string op = lq == lk ? fmt::format("attention L={} H={} D={}", lq, h, d)
                            : fmt::format("attention Lq={} Lk={} H={} D={}", lq, lk, h, d);
  return {op, 4.0 * static_cast<double>(b * h) * static_cast<double>(lq) * static_cast<double>(lk) * d, true};
}

Described describe(const backend::Conv2dArgs& a) {
  const auto& w = a.w->weight;  // [Cout, Cin, KH, KW]
  const double per_output = 2.0 * static_cast<double>(w.size(1) * w.size(2) * w.size(3));
  return {fmt::format("conv2d {}->{} {}x{}", w.size(1), w.size(0), w.size(2), w.size(3)),
          per_output * static_cast<double>(a.y.numel()), true};
}

const char* unary_name(backend::UnaryOp op) {
  switch (op) {
    case backend::UnaryOp::Silu:
      return "unary silu";
    case backend::UnaryOp::GeluTanh:
      return "unary gelu_tanh";
    case backend::UnaryOp::QuickGelu:
      return "unary quick_gelu";
    case backend::UnaryOp::Scale:
      return "unary scale";
  }
  return "unary";
}

Described describe(const backend::UnaryArgs& a) { return {unary_name(a.op)}; }
Described describe(const backend::BinaryArgs& a) {
  return {a.op == backend::BinaryOp::Add ? "binary add" : "binary mul"};
}
Described describe(const backend::GluArgs& a) {
  return {a.act == backend::GluActivation::Silu ? "glu silu" : "glu gelu_tanh"};
}
Described describe(const backend::GatedResidualArgs&) { return {"gated_residual"}; }
Described describe(const backend::SoftmaxArgs&) { return {"softmax"}; }
Described describe(const backend::EmbeddingArgs&) { return {"embedding"}; }
Described describe(const backend::AdaLnArgs&) { return {"adaln_modulate"}; }
Described describe(const backend::LayerNormArgs&) { return {"layer_norm"}; }
Described describe(const backend::RmsNormArgs&) { return {"rms_norm"}; }
Described describe(const backend::GroupNormArgs&) { return {"group_norm"}; }
Described describe(const backend::Upsample2xArgs&) { return {"upsample_nearest_2x"}; }
Described describe(const backend::ChannelNormArgs&) { return {"channel_norm"}; }
Described describe(const backend::TileBlendArgs&) { return {"tile_blend"}; }
Described describe(const backend::TileNormalizeArgs&) { return {"tile_normalize"}; }

// The wrapper put in the timed table's slot `Slot`: runs the real kernel and records its time.
template <typename Args, void (*KernelTable::*Slot)(const Args&)>
void timed(const Args& args) {
  const auto kernel = g_inner->*Slot;
  if (t_depth > 0) {  // inside another timed kernel: its time includes this one
    kernel(args);
    return;
  }
  const Described what = describe(args);
  ++t_depth;
  const double t0 = now_seconds();
  try {
    kernel(args);
    synchronize(g_device);
  } catch (...) {
    --t_depth;
    throw;
  }
  const double seconds = now_seconds() - t0;
  --t_depth;
  add(what.op, seconds, what.flops, what.matrix);
}

// Fills `slot` with the wrapper when the real table has the kernel; a null slot stays null so
// the ops layer takes the same composed fallback as without timing.
template <typename Args, void (*KernelTable::*Slot)(const Args&)>
void wrap(KernelTable& table, const KernelTable& inner) {
  table.*Slot = inner.*Slot ? &timed<Args, Slot> : nullptr;
}

KernelTable g_timed;

void build_timed_table(const KernelTable& inner) {
  g_timed = inner;  // names, prepare_* and the planning table pass through unchanged
  using namespace backend;
  wrap<LinearArgs, &KernelTable::linear>(g_timed, inner);
  wrap<Conv2dArgs, &KernelTable::conv2d>(g_timed, inner);
  wrap<AttentionArgs, &KernelTable::attention>(g_timed, inner);
  wrap<UnaryArgs, &KernelTable::unary>(g_timed, inner);
  wrap<BinaryArgs, &KernelTable::binary>(g_timed, inner);
  wrap<GluArgs, &KernelTable::glu>(g_timed, inner);
  wrap<GatedResidualArgs, &KernelTable::gated_residual>(g_timed, inner);
  wrap<SoftmaxArgs, &KernelTable::softmax>(g_timed, inner);
  wrap<EmbeddingArgs, &KernelTable::embedding>(g_timed, inner);
  wrap<AdaLnArgs, &KernelTable::adaln_modulate>(g_timed, inner);
  wrap<LayerNormArgs, &KernelTable::layer_norm>(g_timed, inner);
  wrap<RmsNormArgs, &KernelTable::rms_norm>(g_timed, inner);
  wrap<GroupNormArgs, &KernelTable::group_norm>(g_timed, inner);
  wrap<Upsample2xArgs, &KernelTable::upsample_nearest_2x>(g_timed, inner);
  wrap<ChannelNormArgs, &KernelTable::channel_norm>(g_timed, inner);
  wrap<TileBlendArgs, &KernelTable::tile_blend>(g_timed, inner);
  wrap<TileNormalizeArgs, &KernelTable::tile_normalize>(g_timed, inner);
}

}  // namespace

ScopedKernelTiming::ScopedKernelTiming(Device device) {
  const KernelTable& inner = kernels_for(device);  // a forced table (ref in a test) is what gets timed
  {
    std::lock_guard lock(g_mutex);
    FLUXRT_CHECK(!g_active, ErrorCode::Unsupported, "kernel timing: one timing scope at a time");
    g_active = true;
    g_inner = &inner;
    g_device = device;
    g_totals.clear();
    build_timed_table(inner);
  }
  t_timing = true;
  forced_ = std::make_unique<ScopedKernelTable>(g_timed);
}

ScopedKernelTiming::~ScopedKernelTiming() {
  forced_.reset();
  t_timing = false;
  std::lock_guard lock(g_mutex);
  g_active = false;
}

std::vector<KernelTime> ScopedKernelTiming::times() const {
  std::lock_guard lock(g_mutex);
  std::vector<KernelTime> out;
  for (const auto& [op, t] : g_totals) out.push_back({op, t.calls, t.seconds, t.flops, t.matrix});
  std::sort(out.begin(), out.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  return out;
}

TimedRegion::TimedRegion(std::string_view op) : op_(op) {
  if (t_timing && t_depth == 0) start_ = now_seconds();
}

TimedRegion::~TimedRegion() {
  if (start_ < 0) return;
  add(std::string(op_), now_seconds() - start_, 0, false);
}

}  // namespace fluxrt::ops
