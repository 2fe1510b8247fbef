#include "core/device.h"

#include <string>

#include "core/error.h"

namespace fluxrt {

std::string Device::str() const {
  if (type == DeviceType::CPU) return index == 0 ? "cpu" : "cpu:" + std::to_string(index);
  return index == 0 ? "cuda" : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu" || text == "cpu:0") return cpu();
  if (text == "cpu:1") return placement_check();
  if (text == "cuda" || text == "gpu") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    int index = 0;
    for (size_t i = 5; i < text.size(); ++i) {
      FLUXRT_CHECK(text[i] >= '0' && text[i] <= '9' && index < 1000, ErrorCode::InvalidArgument,
                   "invalid device '{}' (expected cpu, cuda or cuda:N)", text);
      index = index * 10 + (text[i] - '0');
    }
    return cuda(index);
  }
  fail(ErrorCode::InvalidArgument, "invalid device '{}' (expected cpu, cpu:1, cuda or cuda:N)", text);
}

}  // namespace fluxrt
