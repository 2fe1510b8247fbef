#include "core/device_memory.h"

#include <atomic>

#include "core/error.h"

namespace fluxrt {
namespace {

// Constant-initialised, so a backend's static initialiser may register before anything else runs.
std::atomic<const DeviceMemoryHooks*> g_cuda_hooks{nullptr};

}  // namespace

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
