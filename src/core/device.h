#pragma once
#include <string>

namespace fluxrt {

enum class DeviceType { CPU, CUDA };

// Devices by type and index. The CPU has cpu (index 0), what users get, and the test devices
// cpu:N (N >= 1, usually cpu:1) for placement checks. cpu:N uses host memory and the CPU kernels
// exactly like cpu, so results are bitwise the same, but it is a different device for every
// same-device check of the op front ends: a model or pipeline run on cpu:1 fails with "[op] tensors
// on cpu and cpu:1" wherever a tensor was left on cpu instead of being placed, which is what would
// go wrong on a GPU. cpu:2 stands in for cuda:1: code that loses the index (falls back to index 0
// or 1) fails there. Copies between cpu:N are host copies (what uploads/downloads become). It
// cannot catch host code reading a device tensor's memory (that memory is host memory here).
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  static Device placement_check(int index = 1) { return {DeviceType::CPU, index}; }  // "cpu:1"
  // Host memory and the CPU kernels (cpu and every cpu:N).
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const;
  // "cpu", "cpu:N", "cuda", "cuda:N" (N < 1000); throws InvalidArgument otherwise.
  static Device parse(const std::string& text);
};

}  // namespace fluxrt
