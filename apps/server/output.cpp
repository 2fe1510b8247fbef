#include "output.h"

#include "fluxrt/image.h"

namespace fluxrt::server {

std::vector<std::string> output_formats() { return {"png", "jpeg", "webp"}; }

Encoded encode_output(const GeneratedImage& image, const std::string& format, int compression) {
  // PNG carries the settings as text chunks, JPEG and WebP as an XMP packet with the same keys.
  const TextChunks text = metadata_text(image.metadata);
  std::vector<uint8_t> bytes;
  std::string type;
  if (format == "png") {
    bytes = encode_png(image.image, text);
    type = "image/png";
  } else if (format == "jpeg") {
    bytes = encode_jpeg(image.image, compression, text);
    type = "image/jpeg";
  } else if (format == "webp") {
    bytes = encode_webp(image.image, compression, text);
    type = "image/webp";
  } else {
    throw Error(ErrorCode::Unsupported, "output_format " + format + " is not built in");
  }
  return {std::string(bytes.begin(), bytes.end()), type};
}

std::string base64(const std::string& bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace fluxrt::server
