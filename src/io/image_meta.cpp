// What the JPEG and WebP paths share: format sniffing, the EXIF Orientation tag and the XMP
// packet that carries the settings text (PNG keeps them in text chunks instead).
#include <cstring>

#include "core/error.h"
#include "io/image.h"

namespace fluxrt::io {
namespace {

constexpr uint16_t kOrientationTag = 0x0112;
constexpr uint16_t kTypeShort = 3;

// An XML NCName from a PNG keyword: the keywords fluxrt writes already are ones ("prompt",
// "scheduled_steps"); anything else is mapped, not refused, since it is only metadata.
std::string xml_name(std::string_view key) {
  std::string out;
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    out.push_back(ok ? ch : '_');
  }
  if (out.empty() || !((out[0] >= 'a' && out[0] <= 'z') || (out[0] >= 'A' && out[0] <= 'Z') || out[0] == '_'))
    out.insert(out.begin(), '_');
  return out;
}

std::string xml_text(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        // XML 1.0 forbids most control characters even escaped; tab and newlines stay.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
          out += ' ';
        else
          out += c;
    }
  }
  return out;
}

}  // namespace

std::optional<ImageFormat> sniff_image_format(std::span<const uint8_t> d) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (d.size() >= 8 && std::memcmp(d.data(), kPng, 8) == 0) return ImageFormat::Png;
  if (d.size() >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::Jpeg;
  if (d.size() >= 12 && std::memcmp(d.data(), "RIFF", 4) == 0 && std::memcmp(d.data() + 8, "WEBP", 4) == 0)
    return ImageFormat::Webp;
  return std::nullopt;
}

int exif_orientation(std::span<const uint8_t> exif) {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif = exif.subspan(6);
  const size_t n = exif.size();
  if (n < 8) return 1;
  const uint8_t* p = exif.data();
  bool little;
  if (p[0] == 'I' && p[1] == 'I')
    little = true;
  else if (p[0] == 'M' && p[1] == 'M')
    little = false;
  else
    return 1;
  const auto u16 = [&](size_t at) -> uint32_t {
    return little ? uint32_t(p[at]) | uint32_t(p[at + 1]) << 8 : uint32_t(p[at]) << 8 | uint32_t(p[at + 1]);
  };
  const auto u32 = [&](size_t at) -> uint32_t {
    return little ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const uint32_t ifd = u32(4);
  if (ifd > n - 2) return 1;
  const uint32_t count = u16(ifd);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t entry = size_t(ifd) + 2 + size_t(i) * 12;
    if (entry + 12 > n) return 1;
    if (u16(entry) != kOrientationTag) continue;
    if (u16(entry + 2) != kTypeShort || u32(entry + 4) != 1) return 1;
    const uint32_t v = u16(entry + 8);  // a single SHORT sits at the start of the value field
    return v >= 1 && v <= 8 ? int(v) : 1;
  }
  return 1;
}

Image apply_orientation(const Image& in, int orientation) {
  if (orientation <= 1 || orientation > 8) return in;
  const bool swap = orientation >= 5;
  const size_t w = size_t(in.width), h = size_t(in.height), c = size_t(in.channels);
  Image out;
  out.width = swap ? in.height : in.width;
  out.height = swap ? in.width : in.height;
  out.channels = in.channels;
  out.pixels.resize(in.pixels.size());
  const size_t ow = size_t(out.width), oh = size_t(out.height);
  for (size_t y = 0; y < oh; ++y) {
    for (size_t x = 0; x < ow; ++x) {
      // The stored pixel shown at (x, y), per the EXIF definitions of the eight orientations.
      size_t sx = x, sy = y;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;  // mirrored left-right
        case 3:
          sx = w - 1 - x, sy = h - 1 - y;
          break;  // rotated 180
        case 4:
          sy = h - 1 - y;
          break;  // mirrored top-bottom
        case 5:
          sx = y, sy = x;
          break;  // transposed
        case 6:
          sx = y, sy = h - 1 - x;
          break;  // shown rotated 90 clockwise
        case 7:
          sx = w - 1 - y, sy = h - 1 - x;
          break;  // transversed
        case 8:
          sx = w - 1 - y, sy = x;
          break;  // shown rotated 90 counter-clockwise
      }
      std::memcpy(&out.pixels[(y * ow + x) * c], &in.pixels[(sy * w + sx) * c], c);
    }
  }
  return out;
}

std::string xmp_packet(const TextChunks& text) {
  std::string x =
      "<?xpacket begin=\"\xEF\xBB\xBF\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>"
      "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\">"
      "<rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">"
      "<rdf:Description rdf:about=\"\" xmlns:fluxrt=\"urn:fluxrt:settings:1\">";
  for (const auto& [key, value] : text) {
    const std::string name = "fluxrt:" + xml_name(key);
    x += "<" + name + ">" + xml_text(value) + "</" + name + ">";
  }
  x += "</rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end=\"r\"?>";
  return x;
}

}  // namespace fluxrt::io
