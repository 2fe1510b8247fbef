#pragma once
#include <string>

namespace fluxrt {

enum class DeviceType { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const;
  // "cpu", "cuda", "cuda:1"; throws InvalidArgument otherwise.
  static Device parse(const std::string& text);
};

}  // namespace fluxrt
