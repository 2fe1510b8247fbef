#include "core/memory_info.h"

#include <fstream>
#include <string>

#include "core/device_memory.h"

namespace fluxrt {

size_t mem_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (meminfo >> key >> kb) {  // "MemAvailable:   123456 kB"
    if (key == "MemAvailable:") return kb * 1024;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

size_t device_free_bytes(Device device) {
  if (device.is_cpu()) return mem_available_bytes();
  const DeviceMemoryHooks& mem = device_memory(device);
  return mem.free_bytes ? mem.free_bytes(device) : 0;
}

}  // namespace fluxrt
