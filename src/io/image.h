#pragma once
// Images: reading PNG, JPEG and WebP into 8-bit pixels, writing PNG with text metadata (prompt,
// seed, ...) and JPEG / WebP with the same text as XMP.
//
// The format is taken from the first bytes (decode_image, read_image), never from a file name.
// Every decoder checks the dimensions in the header against kMaxImageSide before it allocates
// pixels, so a small file declaring a huge image is refused. JPEG and WebP are returned upright:
// an EXIF Orientation tag (JPEG APP1, WebP EXIF chunk) is applied and then forgotten.
//
// Reading accepts every PNG colour type and bit depth (gray, gray+alpha, RGB, RGBA, palette; 1-16
// bits; interlaced or not) and converts to 8 bits per channel: 1 channel for gray, 3 for RGB or an
// opaque palette, 4 when there is alpha (gray+alpha becomes RGBA; a tRNS chunk becomes alpha).
// 16-bit samples are scaled with rounding; alpha is not premultiplied; no gamma or colour-profile
// conversion is applied (pixels are the stored values, as PIL and diffusers read them).
//
// Errors are fluxrt::Error with a one-line message naming the file: NotFound (no such file),
// Io (cannot read/write), Format (not a PNG, truncated, corrupt, larger than kMaxImageSide),
// InvalidArgument (an Image or text chunk that cannot be written). libpng's longjmp error
// handling stays inside image.cpp; nothing here aborts on bad input.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fluxrt::io {

// Larger images are rejected on read and write (a 16384^2 RGBA image is already 1 GiB).
inline constexpr int kMaxImageSide = 16384;
// The decoders' default pixel limit; a caller with less memory to give (a fuzzer, a server)
// passes its own, checked against the header before any pixel buffer is allocated.
inline constexpr uint64_t kMaxImagePixels = uint64_t(kMaxImageSide) * uint64_t(kMaxImageSide);

struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;             // 1 (gray), 3 (RGB) or 4 (RGBA)
  std::vector<uint8_t> pixels;  // row-major, channels interleaved: (y * width + x) * channels + c

  size_t row_bytes() const { return static_cast<size_t>(width) * static_cast<size_t>(channels); }
};

using TextChunks = std::vector<std::pair<std::string, std::string>>;

Image read_png(const std::string& path);
// Decodes PNG bytes held in memory (an upload); `name` is used in error messages.
Image decode_png(std::span<const uint8_t> data, std::string_view name = "<memory>",
                 uint64_t max_pixels = kMaxImagePixels);

// All tEXt, zTXt and iTXt chunks (before and after the image data), keyword -> value, both as
// UTF-8 (tEXt/zTXt are Latin-1 in the file and converted). The first chunk wins for a repeated
// keyword.
std::map<std::string, std::string> read_png_text(const std::string& path);
std::map<std::string, std::string> decode_png_text(std::span<const uint8_t> data,
                                                   std::string_view name = "<memory>");

// Encodes with fast compression (SUB/UP filters, zlib level 1, run-length strategy). Text values are UTF-8: a value whose characters
// all fit in Latin-1 is written as tEXt (zTXt beyond 1 KiB), anything else as iTXt (compressed
// beyond 1 KiB). Keywords must be 1-79 printable Latin-1 characters without leading, trailing or
// double spaces; values must be valid UTF-8 without NUL. All chunks go before the image data.
std::vector<uint8_t> encode_png(const Image& image, const TextChunks& text = {});

// Atomic: encodes first, writes a hidden temporary file in the same directory and renames it
// over `path`; on any failure the temporary is removed and Error is thrown, so `path` either
// keeps its old content or holds the complete new image, never a partial file.
void write_png(const std::string& path, const Image& image, const TextChunks& text = {});

// Drops alpha (no compositing) and expands gray: always 3 channels.
Image to_rgb(const Image& image);

enum class ImageFormat { Png, Jpeg, Webp };
// From the magic bytes; unset for anything else.
std::optional<ImageFormat> sniff_image_format(std::span<const uint8_t> data);

// Gray JPEGs give 1 channel, everything else (YCbCr, RGB, CMYK, YCCK; baseline or progressive)
// 3. Truncated data is an error rather than grey fill.
Image decode_jpeg(std::span<const uint8_t> data, std::string_view name = "<memory>",
                  uint64_t max_pixels = kMaxImagePixels);
// 3 channels, or 4 when the file has alpha (as decode_png). Animated WebP is refused.
Image decode_webp(std::span<const uint8_t> data, std::string_view name = "<memory>",
                  uint64_t max_pixels = kMaxImagePixels);
// PNG, JPEG or WebP by magic bytes; Format error naming `name` for anything else.
Image decode_image(std::span<const uint8_t> data, std::string_view name = "<memory>",
                   uint64_t max_pixels = kMaxImagePixels);
// Format error "WxH image is over the limit of N pixels" unless w * h <= max_pixels.
void check_pixel_limit(uint64_t width, uint64_t height, uint64_t max_pixels, std::string_view name);
Image read_image(const std::string& path);

// `quality` 0-100 as libjpeg's (0 is clamped to 1); 4:2:0 chroma below 90, 4:4:4 from 90. Gray
// images are written as gray JPEGs, alpha is dropped. The text goes into an XMP APP1 segment
// (left out when it would not fit the segment's 64 KiB).
std::vector<uint8_t> encode_jpeg(const Image& image, int quality, const TextChunks& text = {});
// `quality` 0-99 is lossy WebP at that quality, 100 is lossless (exact pixels). Alpha is kept.
// The text goes into an XMP chunk.
std::vector<uint8_t> encode_webp(const Image& image, int quality, const TextChunks& text = {});

// EXIF orientation 1-8 from an EXIF payload (a TIFF header and IFD0, optionally preceded by
// "Exif\0\0"); 1 when the tag is absent or the payload is malformed, which is never an error.
int exif_orientation(std::span<const uint8_t> exif);
// Turns pixels stored with EXIF `orientation` upright (5-8 swap width and height).
Image apply_orientation(const Image& image, int orientation);
// The XMP packet encode_jpeg / encode_webp embed: one fluxrt:<key> element per text chunk.
std::string xmp_packet(const TextChunks& text);

}  // namespace fluxrt::io
