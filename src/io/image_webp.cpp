// WebP through libwebp (decode, encode), libwebpdemux (the EXIF chunk) and libwebpmux (the XMP
// chunk). libwebp reports errors by return value, so nothing here needs setjmp.
#include <webp/decode.h>
#include <webp/demux.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include <cstring>

#include "core/error.h"
#include "io/image.h"
#include "io/utf8.h"

namespace fluxrt::io {
namespace {

std::string describe(std::string_view name) { return escape_for_message(name, 300); }

const char* status_text(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "file is truncated";
    default:
      return "error";
  }
}

int webp_orientation(std::span<const uint8_t> data) {
  const WebPData whole{data.data(), data.size()};
  WebPDemuxer* demux = WebPDemux(&whole);
  if (!demux) return 1;
  int orientation = 1;
  WebPChunkIterator chunk;
  if ((WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS) & EXIF_FLAG) &&
      WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {
    orientation = exif_orientation({chunk.chunk.bytes, chunk.chunk.size});
    WebPDemuxReleaseChunkIterator(&chunk);
  }
  WebPDemuxDelete(demux);
  return orientation;
}

struct WebPBytes {
  uint8_t* data = nullptr;
  ~WebPBytes() { WebPFree(data); }
};

struct Mux {
  WebPMux* mux = WebPMuxNew();
  WebPData out{};
  ~Mux() {
    WebPDataClear(&out);
    WebPMuxDelete(mux);
  }
};

}  // namespace

Image decode_webp(std::span<const uint8_t> data, std::string_view name, uint64_t max_pixels) {
  if (sniff_image_format(data) != ImageFormat::Webp)
    fail(ErrorCode::Format, "{}: not a WebP file", describe(name));
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(data.data(), data.size(), &f);
  if (st != VP8_STATUS_OK) fail(ErrorCode::Format, "{}: corrupt WebP ({})", describe(name), status_text(st));
  if (f.has_animation) fail(ErrorCode::Format, "{}: animated WebP is not supported", describe(name));
  if (f.width <= 0 || f.height <= 0)
    fail(ErrorCode::Format, "{}: WebP declares an empty {}x{} image", describe(name), f.width, f.height);
  if (f.width > kMaxImageSide || f.height > kMaxImageSide)
    fail(ErrorCode::Format, "{}: {}x{} image exceeds the {}x{} limit", describe(name), f.width, f.height,
         kMaxImageSide, kMaxImageSide);
  check_pixel_limit(uint64_t(f.width), uint64_t(f.height), max_pixels, name);
  Image image;
  image.width = f.width;
  image.height = f.height;
  image.channels = f.has_alpha ? 4 : 3;
  try {
    image.pixels.resize(image.row_bytes() * size_t(image.height));
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, "{}: no memory for a {}x{} image", describe(name), f.width, f.height);
  }
  // The config API, unlike WebPDecodeRGBInto, says why a decode failed.
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config))
    fail(ErrorCode::Internal, "{}: libwebp version mismatch", describe(name));
  config.output.colorspace = f.has_alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = image.pixels.data();
  config.output.u.RGBA.stride = int(image.row_bytes());
  config.output.u.RGBA.size = image.pixels.size();
  const VP8StatusCode decoded = WebPDecode(data.data(), data.size(), &config);
  WebPFreeDecBuffer(&config.output);  // external memory: releases nothing of ours
  if (decoded != VP8_STATUS_OK)
    fail(ErrorCode::Format, "{}: corrupt WebP ({})", describe(name), status_text(decoded));
  const int orientation = webp_orientation(data);
  return orientation == 1 ? image : apply_orientation(image, orientation);
}

std::vector<uint8_t> encode_webp(const Image& image, int quality, const TextChunks& text) {
  // WebP's own limit is 16383 per side.
  if (image.width < 1 || image.height < 1 || image.width > WEBP_MAX_DIMENSION ||
      image.height > WEBP_MAX_DIMENSION)
    fail(ErrorCode::InvalidArgument, "encode_webp: size {}x{} outside 1..{}", image.width, image.height,
         WEBP_MAX_DIMENSION);
  if (quality < 0 || quality > 100)
    fail(ErrorCode::InvalidArgument, "encode_webp: quality {} outside 0..100", quality);
  if (image.pixels.size() != image.row_bytes() * size_t(image.height) ||
      (image.channels != 1 && image.channels != 3 && image.channels != 4))
    fail(ErrorCode::InvalidArgument, "encode_webp: {} pixel bytes for a {}x{}x{} image", image.pixels.size(),
         image.width, image.height, image.channels);
  const Image rgb = image.channels == 1 ? to_rgb(image) : Image{};
  const Image& im = image.channels == 1 ? rgb : image;
  const int stride = int(im.row_bytes());
  const float q = float(quality);
  WebPBytes encoded;
  size_t size = 0;
  if (im.channels == 4)
    size = quality == 100
               ? WebPEncodeLosslessRGBA(im.pixels.data(), im.width, im.height, stride, &encoded.data)
               : WebPEncodeRGBA(im.pixels.data(), im.width, im.height, stride, q, &encoded.data);
  else
    size = quality == 100
               ? WebPEncodeLosslessRGB(im.pixels.data(), im.width, im.height, stride, &encoded.data)
               : WebPEncodeRGB(im.pixels.data(), im.width, im.height, stride, q, &encoded.data);
  if (size == 0)
    fail(ErrorCode::Internal, "encode_webp: libwebp failed on a {}x{} image", im.width, im.height);
  if (text.empty()) return std::vector<uint8_t>(encoded.data, encoded.data + size);

  // The XMP chunk needs the extended (VP8X) container, which the mux library assembles.
  const std::string xmp = xmp_packet(text);
  Mux m;
  const WebPData bitstream{encoded.data, size};
  const WebPData xmp_data{reinterpret_cast<const uint8_t*>(xmp.data()), xmp.size()};
  if (!m.mux || WebPMuxSetImage(m.mux, &bitstream, 0) != WEBP_MUX_OK ||
      WebPMuxSetChunk(m.mux, "XMP ", &xmp_data, 0) != WEBP_MUX_OK ||
      WebPMuxAssemble(m.mux, &m.out) != WEBP_MUX_OK)
    fail(ErrorCode::Internal, "encode_webp: libwebpmux could not add the XMP chunk");
  return std::vector<uint8_t>(m.out.bytes, m.out.bytes + m.out.size);
}

}  // namespace fluxrt::io
