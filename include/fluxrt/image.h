#pragma once
// Images as the public API passes them: 8-bit RGB, row-major, no alpha. Requests take them as
// reference and init images, results return them; these functions read PNG, JPEG and WebP and
// write PNG, JPEG and WebP so a front end needs no image library of its own.
//
// Reading takes the format from the first bytes, never from a file name, refuses images wider or
// taller than 16384 pixels before decoding any pixel, and applies an EXIF Orientation tag (JPEG,
// WebP) so the pixels come out upright. Alpha is dropped without compositing in every format.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fluxrt {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3 bytes: (y * width + x) * 3 + channel
};

// PNG text chunks (keyword, value), in the order they are written.
using TextChunks = std::vector<std::pair<std::string, std::string>>;

// Reads any PNG (every colour type and bit depth) as RGB: alpha dropped, gray expanded, 16-bit
// samples rounded. Error NotFound / Io / Format naming the file.
Image read_png(const std::string& path);

// Reads a PNG, JPEG (baseline or progressive; gray, YCbCr, CMYK or YCCK) or WebP (still;
// lossy or lossless) file as RGB. Error NotFound / Io / Format naming the file.
Image read_image(const std::string& path);

// Decodes an image file held in memory (a server's upload) as read_image reads a file. `name`
// appears in messages. Error Format when the bytes are not a readable PNG, JPEG or WebP.
Image decode_image(const void* data, size_t size, const std::string& name = "<memory>");

// Decodes an inpainting mask the way OpenAI's images.edit sends one, a PNG whose fully transparent
// pixels mark what to edit: an image with an alpha channel and at least one pixel less than opaque
// becomes white (repaint) where alpha is 0 and black elsewhere. Any other image (opaque, or
// without alpha) is returned as decode_image returns it, and read as diffusers reads a mask: its
// luminance, white (>= 128) repaints, black keeps.
Image decode_mask(const void* data, size_t size, const std::string& name = "<memory>");

// Encodes an RGB image as PNG bytes with the text chunks (UTF-8 values; keywords 1-79 Latin-1
// characters), e.g. for a server's response. InvalidArgument for a malformed image or chunk.
std::vector<uint8_t> encode_png(const Image& image, const TextChunks& text = {});

// JPEG at `quality` 0-100 (libjpeg's scale; full-resolution chroma from 90). The text goes into
// an XMP packet (one fluxrt:<key> element each; left out beyond JPEG's 64 KiB segment).
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90, const TextChunks& text = {});

// WebP: lossy at `quality` 0-99, lossless (exact pixels) at 100. The text goes into an XMP chunk.
std::vector<uint8_t> encode_webp(const Image& image, int quality = 100, const TextChunks& text = {});

// Writes encode_png's bytes to `path` atomically: through a temporary file renamed over it, so
// `path` never holds a partial image. Error Io naming the path.
void write_png(const std::string& path, const Image& image, const TextChunks& text = {});

}  // namespace fluxrt
