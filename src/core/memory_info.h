#pragma once
// What the machine's memory looks like now, for the choices that adapt to it (the VAE's automatic
// tiling budget, how many layers a benchmark keeps resident).
#include <cstddef>

namespace fluxrt {

// MemAvailable from /proc/meminfo in bytes: what the kernel can hand out without swapping. 0 when
// unknown (no /proc, another OS); callers choose their own fallback.
size_t mem_available_bytes();

}  // namespace fluxrt
