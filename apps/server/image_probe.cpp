#include "image_probe.h"

#include <cstring>

namespace fluxrt::server {
namespace {

uint32_t be16(const unsigned char* p) { return (uint32_t(p[0]) << 8) | p[1]; }
uint32_t be32(const unsigned char* p) { return (be16(p) << 16) | be16(p + 2); }
uint32_t le16(const unsigned char* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8); }
uint32_t le24(const unsigned char* p) { return le16(p) | (uint32_t(p[2]) << 16); }

std::optional<ImageHeader> probe_png(const unsigned char* p, size_t n) {
  // Signature, then the IHDR chunk first of all: length, "IHDR", width, height (big-endian).
  if (n < 24 || std::memcmp(p + 12, "IHDR", 4) != 0) return std::nullopt;
  return ImageHeader{"png", be32(p + 16), be32(p + 20)};
}

std::optional<ImageHeader> probe_jpeg(const unsigned char* p, size_t n) {
  // Walk the markers to the first start-of-frame; every marker but SOI/EOI/RSTn has a length.
  size_t i = 2;
  while (i + 4 <= n) {
    if (p[i] != 0xFF) return std::nullopt;
    const unsigned char marker = p[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
      i += 2;
      continue;
    }
    const uint32_t length = be16(p + i + 2);
    if (length < 2) return std::nullopt;
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (i + 9 > n) return std::nullopt;
      return ImageHeader{"jpeg", be16(p + i + 7), be16(p + i + 5)};
    }
    i += 2 + length;
  }
  return std::nullopt;
}

std::optional<ImageHeader> probe_webp(const unsigned char* p, size_t n) {
  if (n < 30) return std::nullopt;
  const unsigned char* c = p + 12;  // the first chunk after "RIFF" size "WEBP"
  if (std::memcmp(c, "VP8 ", 4) == 0) {
    // Lossy: a 3-byte frame tag, the start code 9d 01 2a, then 14-bit width and height.
    if (p[23] != 0x9d || p[24] != 0x01 || p[25] != 0x2a) return std::nullopt;
    return ImageHeader{"webp", le16(p + 26) & 0x3fff, le16(p + 28) & 0x3fff};
  }
  if (std::memcmp(c, "VP8L", 4) == 0) {
    // Lossless: signature 0x2f, then width-1 and height-1 in 14 bits each.
    if (p[20] != 0x2f) return std::nullopt;
    const uint32_t bits =
        uint32_t(p[21]) | (uint32_t(p[22]) << 8) | (uint32_t(p[23]) << 16) | (uint32_t(p[24]) << 24);
    return ImageHeader{"webp", (bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1};
  }
  if (std::memcmp(c, "VP8X", 4) == 0) {
    // Extended: the canvas size, 24 bits each minus one.
    return ImageHeader{"webp", le24(p + 24) + 1, le24(p + 27) + 1};
  }
  return std::nullopt;
}

}  // namespace

std::optional<ImageHeader> probe_image(const std::string& bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 8 && std::memcmp(p, kPng, 8) == 0) return probe_png(p, n);
  if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return probe_jpeg(p, n);
  if (n >= 12 && std::memcmp(p, "RIFF", 4) == 0 && std::memcmp(p + 8, "WEBP", 4) == 0)
    return probe_webp(p, n);
  return std::nullopt;
}

}  // namespace fluxrt::server
