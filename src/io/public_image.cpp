#include "io/public_image.h"

#include <algorithm>

#include "core/error.h"

namespace fluxrt {

io::Image io::from_public(const fluxrt::Image& image, const char* what) {
  const size_t expected =
      static_cast<size_t>(std::max(image.width, 0)) * static_cast<size_t>(std::max(image.height, 0)) * 3;
  FLUXRT_CHECK(image.width > 0 && image.height > 0 && image.rgb.size() == expected,
               ErrorCode::InvalidArgument, "{}: {}x{} RGB needs {} bytes, has {}", what, image.width,
               image.height, expected, image.rgb.size());
  io::Image out;
  out.width = image.width;
  out.height = image.height;
  out.channels = 3;
  out.pixels = image.rgb;
  return out;
}

fluxrt::Image io::to_public(io::Image image) {
  if (image.channels != 3) image = io::to_rgb(image);
  fluxrt::Image out;
  out.width = image.width;
  out.height = image.height;
  out.rgb = std::move(image.pixels);
  return out;
}

Image read_png(const std::string& path) { return io::to_public(io::read_png(path)); }

Image decode_image(const void* data, size_t size, const std::string& name) {
  return io::to_public(
      io::decode_image(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size), name));
}

Image decode_mask(const void* data, size_t size, const std::string& name) {
  io::Image decoded =
      io::decode_image(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size), name);
  if (decoded.channels != 4) return io::to_public(std::move(decoded));
  const size_t pixels = static_cast<size_t>(decoded.width) * decoded.height;
  bool translucent = false;
  for (size_t i = 0; i < pixels && !translucent; ++i) translucent = decoded.pixels[i * 4 + 3] != 255;
  if (!translucent) return io::to_public(std::move(decoded));
  Image mask;
  mask.width = decoded.width;
  mask.height = decoded.height;
  mask.rgb.resize(pixels * 3);
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t v = decoded.pixels[i * 4 + 3] == 0 ? 255 : 0;  // transparent: edit
    mask.rgb[i * 3] = mask.rgb[i * 3 + 1] = mask.rgb[i * 3 + 2] = v;
  }
  return mask;
}

std::vector<uint8_t> encode_png(const Image& image, const TextChunks& text) {
  return io::encode_png(io::from_public(image), text);
}

Image read_image(const std::string& path) { return io::to_public(io::read_image(path)); }

std::vector<uint8_t> encode_jpeg(const Image& image, int quality, const TextChunks& text) {
  return io::encode_jpeg(io::from_public(image), quality, text);
}

std::vector<uint8_t> encode_webp(const Image& image, int quality, const TextChunks& text) {
  return io::encode_webp(io::from_public(image), quality, text);
}

void write_png(const std::string& path, const Image& image, const TextChunks& text) {
  io::write_png(path, io::from_public(image, path.c_str()), text);
}

}  // namespace fluxrt
