#include "ops/dispatch.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "backend/cuda_backend.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strict_kernels.h"

namespace fluxrt {

// Declared in backend/kernel_table.h; lives here because ops is the lowest layer that links every
// backend (the CPU backend must not depend on the CUDA one).
const backend::KernelTable& backend::kernels_for(Device device) {
  if (device.is_cpu()) return cpu_kernels();
  return cuda::cuda_kernels(device.index);  // Unsupported without CUDA, Device when absent
}

namespace ops {
namespace {

thread_local const backend::KernelTable* t_forced = nullptr;

std::mutex g_fallback_mutex;
std::set<std::pair<std::string, std::string>> g_logged;
std::map<std::string, int, std::less<>> g_counts;

}  // namespace

const backend::KernelTable& kernels_for(Device device) {
  if (t_forced) return *t_forced;
  return backend::kernels_for(device);
}

const backend::KernelTable& kernels_for(const Tensor& t) { return kernels_for(t.device()); }

void synchronize(Device device) {
  if (!device.is_cpu()) cuda::synchronize(device.index);
}

ScopedKernelTable::ScopedKernelTable(const backend::KernelTable& table) : previous_(t_forced) {
  t_forced = &table;
}
ScopedKernelTable::~ScopedKernelTable() { t_forced = previous_; }

bool ScopedKernelPlanning::available(Device device) {
  return !t_forced && backend::kernels_for(device).planning != nullptr;
}

ScopedKernelPlanning::ScopedKernelPlanning(Device device) : previous_(t_forced) {
  // A forced table (a test running ref) stays: its kernels are not the ones to plan.
  if (!t_forced) t_forced = backend::kernels_for(device).planning;
}
ScopedKernelPlanning::~ScopedKernelPlanning() { t_forced = previous_; }

bool strict_kernels() { return fluxrt::strict_kernels(); }
void set_strict_kernels(bool strict) { fluxrt::set_strict_kernels(strict); }

void note_fallback(std::string_view op, const backend::KernelTable& table) {
  if (strict_kernels())
    fail(ErrorCode::Unsupported, "[{}] no {} kernel and FLUXRT_STRICT_KERNELS=1 forbids the composed fallback",
         op, table.name);
  std::lock_guard lock(g_fallback_mutex);
  g_counts[std::string(op)] += 1;
  if (g_logged.emplace(std::string(op), table.name).second)
    FLUXRT_LOG_WARN("[{}] no {} kernel: using the composed fallback (slower)", op, table.name);
}

int fallback_count(std::string_view op) {
  std::lock_guard lock(g_fallback_mutex);
  auto it = g_counts.find(op);
  return it == g_counts.end() ? 0 : it->second;
}

void detail::missing_kernel(std::string_view op, const backend::KernelTable& table) {
  fail(ErrorCode::Unsupported, "[{}] not implemented by the {} backend", op, table.name);
}

}  // namespace ops
}  // namespace fluxrt
