#pragma once
// Memory of non-CPU devices for Tensor. core cannot depend on a backend (DESIGN.md section 1), so
// the backend that owns a device type registers these hooks when its library is linked in (the
// CUDA backend does it from a static initialiser next to cuda::device_count()). Without them,
// Tensor::empty on that device throws Unsupported.
#include <cstddef>
#include <functional>

#include "core/device.h"

namespace fluxrt {

class Tensor;

struct DeviceMemoryHooks {
  // Returns `bytes` of device memory (a valid pointer even for 0 bytes); throws Error(OutOfMemory)
  // naming the bytes asked and free.
  void* (*allocate)(Device device, size_t bytes) = nullptr;
  // Returns memory from allocate(); never throws (called from destructors).
  void (*release)(Device device, void* ptr) = nullptr;
  // dst = src (same shape, any strides, dtype converted with PyTorch rounding) where at least one
  // of them lives on this device type. Returns when dst may be read on its side: host destinations
  // are complete, device destinations are ordered before later work on the device.
  void (*copy)(const Tensor& dst, const Tensor& src) = nullptr;
  // Bytes that allocate() could still hand out on `device` now (what the driver reports free plus
  // what the backend's cache holds unused); 0 when unknown. Never throws for a present device.
  size_t (*free_bytes)(Device device) = nullptr;
  // Every element of dst (any strides) set to `value` converted to dst's dtype with PyTorch rounding,
  // on the device, ordered before later work there. Optional: without it Tensor::fill fills a host
  // tensor and copies it over.
  void (*fill)(const Tensor& dst, double value) = nullptr;
};

// Called once by a backend; `hooks` must outlive the process (a static object). Returns the hooks
// registered before (nullptr if none), so a test can put a fake in and restore the real ones.
const DeviceMemoryHooks* register_device_memory(DeviceType type, const DeviceMemoryHooks* hooks);

// The hooks of `device`'s type; throws Unsupported when no backend registered them.
const DeviceMemoryHooks& device_memory(Device device);

// Holders of device memory they can give up on demand (the kept CUDA graphs of StepGraphCache). A
// backend that runs out of memory calls reclaim_device_memory(device) and retries once before
// failing with OutOfMemory. A reclaimer frees what it holds on `device` and says whether it freed
// anything; it must not allocate, and may run on any thread, inside any allocation.
class MemoryReclaimer {
 public:
  explicit MemoryReclaimer(std::function<bool(Device)> reclaim);
  ~MemoryReclaimer();
  MemoryReclaimer(const MemoryReclaimer&) = delete;
  MemoryReclaimer& operator=(const MemoryReclaimer&) = delete;

 private:
  friend bool reclaim_device_memory(Device device);
  std::function<bool(Device)> reclaim_;
};
// Asks every live MemoryReclaimer; true when one of them freed something.
bool reclaim_device_memory(Device device);

}  // namespace fluxrt
