#pragma once
#include <string>

namespace fluxrt {

enum class DeviceType { CPU, CUDA };

// Devices by type and index. The CPU has two: cpu (index 0), what users get, and cpu:1, a test
// device for placement checks. cpu:1 uses host memory and the CPU kernels exactly like cpu, so
// results are bitwise the same, but it is a different device for every same-device check of the
// op front ends: a model or pipeline run on cpu:1 fails with "[op] tensors on cpu and cpu:1"
// wherever a tensor was left on cpu instead of being placed, which is what would go wrong on a
// GPU. Copies between cpu and cpu:1 are host copies (what uploads/downloads become). It cannot
// catch host code reading a device tensor's memory (that memory is host memory here).
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  static Device placement_check() { return {DeviceType::CPU, 1}; }  // "cpu:1"
  // Host memory and the CPU kernels (cpu and cpu:1).
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const;
  // "cpu", "cpu:1", "cuda", "cuda:1"; throws InvalidArgument otherwise.
  static Device parse(const std::string& text);
};

}  // namespace fluxrt
