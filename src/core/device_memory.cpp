#include "core/device_memory.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"

namespace fluxrt {
namespace {

// Constant-initialised, so a backend's static initialiser may register before anything else runs.
std::atomic<const DeviceMemoryHooks*> g_cuda_hooks{nullptr};

// The live reclaimers. Recursive: a reclaimer's frees may end in an allocation that fails again
// (never by contract, but a second reclaim on the same thread must not deadlock). Never destroyed,
// so a reclaimer that outlives main (a pipeline in a static) still unregisters safely.
std::recursive_mutex& reclaimers_mutex() {
  static auto* m = new std::recursive_mutex;
  return *m;
}
std::vector<MemoryReclaimer*>& reclaimers() {
  static auto* list = new std::vector<MemoryReclaimer*>;
  return *list;
}

}  // namespace

MemoryReclaimer::MemoryReclaimer(std::function<bool(Device)> reclaim) : reclaim_(std::move(reclaim)) {
  std::lock_guard lock(reclaimers_mutex());
  reclaimers().push_back(this);
}

MemoryReclaimer::~MemoryReclaimer() {
  std::lock_guard lock(reclaimers_mutex());
  std::erase(reclaimers(), this);
}

bool reclaim_device_memory(Device device) {
  std::lock_guard lock(reclaimers_mutex());
  bool freed = false;
  for (MemoryReclaimer* r : reclaimers()) freed = r->reclaim_(device) || freed;
  return freed;
}

const DeviceMemoryHooks* register_device_memory(DeviceType type, const DeviceMemoryHooks* hooks) {
  FLUXRT_CHECK(type == DeviceType::CUDA, ErrorCode::Internal, "device memory hooks are for non-CPU devices");
  return g_cuda_hooks.exchange(hooks);
}

const DeviceMemoryHooks& device_memory(Device device) {
  const DeviceMemoryHooks* hooks = device.is_cpu() ? nullptr : g_cuda_hooks.load();
  FLUXRT_CHECK(hooks != nullptr, ErrorCode::Unsupported,
               "no memory for {}: fluxrt was built without CUDA (or the CUDA backend is not linked)",
               device.str());
  return *hooks;
}

}  // namespace fluxrt
