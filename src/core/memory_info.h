#pragma once
// What the machine's (or a device's) memory looks like now, for the choices that adapt to it (the
// VAE's automatic tiling budget, how many layers a benchmark keeps resident).
#include <cstddef>

#include "core/device.h"

namespace fluxrt {

// MemAvailable from /proc/meminfo in bytes: what the kernel can hand out without swapping. 0 when
// unknown (no /proc, another OS); callers choose their own fallback.
size_t mem_available_bytes();

// Memory that tensors on `device` can still get now, for the choices that adapt to it: the host's
// MemAvailable for cpu and the placement-check cpu:N (host memory), the device's own free memory
// for a GPU (cudaMemGetInfo plus what the caching allocator holds unused, through the backend's
// DeviceMemoryHooks). 0 when unknown. Unsupported when no backend owns the device (CUDA not built).
size_t device_free_bytes(Device device);

}  // namespace fluxrt
