#include "core/device.h"

#include <string>

#include "core/error.h"

namespace fluxrt {

std::string Device::str() const {
  if (type == DeviceType::CPU) return index == 0 ? "cpu" : "cpu:" + std::to_string(index);
  return index == 0 ? "cuda" : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda" || text == "gpu") return cuda(0);
  const bool cpu_n = text.rfind("cpu:", 0) == 0, cuda_n = text.rfind("cuda:", 0) == 0;
  const size_t digits = cpu_n ? 4 : 5;
  FLUXRT_CHECK((cpu_n || cuda_n) && text.size() > digits, ErrorCode::InvalidArgument,
               "invalid device '{}' (expected cpu, cpu:1, cuda or cuda:N)", text);
  int index = 0;
  for (size_t i = digits; i < text.size(); ++i) {
    FLUXRT_CHECK(text[i] >= '0' && text[i] <= '9' && index < 100, ErrorCode::InvalidArgument,
                 "invalid device '{}' (expected cpu, cpu:1, cuda or cuda:N)", text);
    index = index * 10 + (text[i] - '0');
  }
  return cpu_n ? placement_check(index) : cuda(index);
}

}  // namespace fluxrt
