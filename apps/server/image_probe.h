#pragma once
// The format and pixel size of an uploaded image read from its first bytes, so that a
// decompression bomb (a small PNG declaring 100000 x 100000 pixels) is refused before any pixel
// is decoded. PNG, JPEG and WebP headers are understood.
#include <cstdint>
#include <optional>
#include <string>

namespace fluxrt::server {

struct ImageHeader {
  std::string format;  // "png", "jpeg" or "webp"
  uint32_t width = 0, height = 0;
};

// Unset when the bytes start like none of the three formats or end before the size is stated.
std::optional<ImageHeader> probe_image(const std::string& bytes);

}  // namespace fluxrt::server
