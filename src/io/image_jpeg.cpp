// JPEG through libjpeg-turbo. libjpeg's default error handler prints and calls exit(); ours
// formats the message and longjmps back to a setjmp in one of the small "stage" functions below,
// which (like the callbacks) hold only trivially destructible locals, so no destructor is
// skipped. Everything with a destructor lives in the callers, which turn a failed stage into a
// one-line fluxrt::Error naming the file.
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "io/image.h"
#include "io/utf8.h"

namespace fluxrt::io {
namespace {

// A progressive file can hold any number of scans, each a pass over the whole image: a small
// file could keep the decoder busy for minutes. Real encoders write about 10 (libjpeg-turbo's
// own tools refuse more than 500 when asked to be strict).
constexpr int kMaxScans = 500;
constexpr size_t kMaxXmpBytes = 65533 - 29;                  // an APP1 segment's payload, less the XMP name
constexpr char kXmpName[] = "http://ns.adobe.com/xap/1.0/";  // with its NUL: 29 bytes

struct JpegError {
  jpeg_error_mgr mgr;  // first, so the j_common_ptr's err can be cast back
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings are ignored (phones write files with stray bytes before a marker) except premature
// end of data, where libjpeg would fill the rest with grey: a truncated upload is an error.
void on_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) on_error(c);
}

void on_progress(j_common_ptr c) {
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kMaxScans) {
    auto* e = reinterpret_cast<JpegError*>(c->err);
    std::snprintf(e->message, sizeof(e->message), "more than %d scans", kMaxScans);
    std::longjmp(e->jump, 1);
  }
}

void install(JpegError* e) {
  jpeg_std_error(&e->mgr);
  e->mgr.error_exit = on_error;
  e->mgr.emit_message = on_message;
  e->message[0] = '\0';
}

struct Decoder {
  jpeg_decompress_struct d{};
  JpegError err{};
  jpeg_progress_mgr progress{};
  bool created = false;
  ~Decoder() {
    if (created) jpeg_destroy_decompress(&d);
  }
};

struct Encoder {
  jpeg_compress_struct c{};
  JpegError err{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  bool created = false;
  ~Encoder() {
    if (created) jpeg_destroy_compress(&c);
    std::free(buffer);  // jpeg_mem_dest's buffer is malloc'd and left to the caller
  }
};

bool stage_open(Decoder* s, const uint8_t* data, size_t size) {
  if (setjmp(s->err.jump)) return false;
  jpeg_create_decompress(&s->d);
  s->created = true;
  s->progress.progress_monitor = on_progress;
  s->d.progress = &s->progress;
  jpeg_mem_src(&s->d, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&s->d, JPEG_APP0 + 1, 0xFFFF);  // EXIF
  jpeg_read_header(&s->d, TRUE);
  return true;
}

bool stage_decode(Decoder* s, uint8_t* out, size_t row_bytes) {
  if (setjmp(s->err.jump)) return false;
  jpeg_start_decompress(&s->d);
  while (s->d.output_scanline < s->d.output_height) {
    JSAMPROW row = out + size_t(s->d.output_scanline) * row_bytes;
    jpeg_read_scanlines(&s->d, &row, 1);
  }
  jpeg_finish_decompress(&s->d);
  return true;
}

struct EncodeJob {
  const Image* image;
  int quality;
  const std::string* xmp;  // the APP1 payload, empty for none
};

bool stage_encode(Encoder* s, const EncodeJob* job) {
  if (setjmp(s->err.jump)) return false;
  jpeg_create_compress(&s->c);
  s->created = true;
  jpeg_mem_dest(&s->c, &s->buffer, &s->size);
  const Image& im = *job->image;
  s->c.image_width = JDIMENSION(im.width);
  s->c.image_height = JDIMENSION(im.height);
  s->c.input_components = im.channels;
  s->c.in_color_space = im.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&s->c);
  jpeg_set_quality(&s->c, job->quality, TRUE);
  if (im.channels == 3 && job->quality >= 90) {
    // Full-resolution chroma: at high quality 4:2:0 subsampling is the largest error left.
    for (int i = 0; i < 3; ++i) s->c.comp_info[i].h_samp_factor = s->c.comp_info[i].v_samp_factor = 1;
  }
  s->c.optimize_coding = TRUE;
  jpeg_start_compress(&s->c, TRUE);
  if (!job->xmp->empty())
    jpeg_write_marker(&s->c, JPEG_APP0 + 1, reinterpret_cast<const JOCTET*>(job->xmp->data()),
                      static_cast<unsigned>(job->xmp->size()));
  const size_t row_bytes = im.row_bytes();
  while (s->c.next_scanline < s->c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(im.pixels.data() + size_t(s->c.next_scanline) * row_bytes);
    jpeg_write_scanlines(&s->c, &row, 1);
  }
  jpeg_finish_compress(&s->c);
  return true;
}

std::string describe(std::string_view name) { return escape_for_message(name, 300); }

// Adobe CMYK as Photoshop writes it (the Adobe marker present) stores inverted values; without
// the marker they are plain. Converted without a colour profile, as browsers do for untagged
// files.
void cmyk_to_rgb(const uint8_t* cmyk, size_t n, bool inverted, uint8_t* rgb) {
  for (size_t i = 0; i < n; ++i, cmyk += 4, rgb += 3) {
    const int k = inverted ? cmyk[3] : 255 - cmyk[3];
    for (int ch = 0; ch < 3; ++ch) {
      const int v = inverted ? cmyk[ch] : 255 - cmyk[ch];
      rgb[ch] = static_cast<uint8_t>((v * k + 127) / 255);
    }
  }
}

}  // namespace

Image decode_jpeg(std::span<const uint8_t> data, std::string_view name, uint64_t max_pixels) {
  if (data.size() < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF)
    fail(ErrorCode::Format, "{}: not a JPEG file", describe(name));
  Decoder s;
  install(&s.err);
  s.d.err = &s.err.mgr;
  if (!stage_open(&s, data.data(), data.size()))
    fail(ErrorCode::Format, "{}: corrupt JPEG ({})", describe(name), s.err.message);
  const uint32_t w = s.d.image_width, h = s.d.image_height;
  if (w == 0 || h == 0)
    fail(ErrorCode::Format, "{}: JPEG declares an empty {}x{} image", describe(name), w, h);
  if (w > uint32_t(kMaxImageSide) || h > uint32_t(kMaxImageSide))
    fail(ErrorCode::Format, "{}: {}x{} image exceeds the {}x{} limit", describe(name), w, h, kMaxImageSide,
         kMaxImageSide);
  check_pixel_limit(w, h, max_pixels, name);

  const J_COLOR_SPACE space = s.d.jpeg_color_space;
  const bool cmyk = space == JCS_CMYK || space == JCS_YCCK;
  int channels = 3;
  if (space == JCS_GRAYSCALE) {
    s.d.out_color_space = JCS_GRAYSCALE;
    channels = 1;
  } else if (cmyk) {
    s.d.out_color_space = JCS_CMYK;  // libjpeg turns YCCK into CMYK; RGB is done below
    channels = 4;
  } else {
    s.d.out_color_space = JCS_RGB;
  }

  int orientation = 1;
  for (jpeg_saved_marker_ptr m = s.d.marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      orientation = exif_orientation({m->data, m->data_length});
      break;
    }

  const size_t row_bytes = size_t(w) * size_t(channels);
  std::vector<uint8_t> pixels;
  try {
    pixels.resize(row_bytes * h);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, "{}: no memory for a {}x{} image", describe(name), w, h);
  }
  if (!stage_decode(&s, pixels.data(), row_bytes))
    fail(ErrorCode::Format, "{}: corrupt JPEG ({})", describe(name), s.err.message);

  Image image;
  image.width = int(w);
  image.height = int(h);
  image.channels = cmyk ? 3 : channels;
  if (cmyk) {
    image.pixels.resize(size_t(w) * h * 3);
    cmyk_to_rgb(pixels.data(), size_t(w) * h, s.d.saw_Adobe_marker != 0, image.pixels.data());
  } else {
    image.pixels = std::move(pixels);
  }
  return orientation == 1 ? image : apply_orientation(image, orientation);
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality, const TextChunks& text) {
  if (image.width < 1 || image.height < 1 || image.width > kMaxImageSide || image.height > kMaxImageSide)
    fail(ErrorCode::InvalidArgument, "encode_jpeg: size {}x{} outside 1..{}", image.width, image.height,
         kMaxImageSide);
  if (quality < 0 || quality > 100)
    fail(ErrorCode::InvalidArgument, "encode_jpeg: quality {} outside 0..100", quality);
  if (image.pixels.size() != image.row_bytes() * size_t(image.height) || image.channels < 1 ||
      image.channels > 4 || image.channels == 2)
    fail(ErrorCode::InvalidArgument, "encode_jpeg: {} pixel bytes for a {}x{}x{} image", image.pixels.size(),
         image.width, image.height, image.channels);
  const Image rgb = image.channels == 4 ? to_rgb(image) : Image{};
  std::string xmp;
  if (!text.empty()) {
    const std::string packet = xmp_packet(text);
    if (packet.size() <= kMaxXmpBytes) xmp = std::string(kXmpName, sizeof(kXmpName)) + packet;
  }
  Encoder s;
  install(&s.err);
  s.c.err = &s.err.mgr;
  const EncodeJob job{image.channels == 4 ? &rgb : &image, std::max(quality, 1), &xmp};
  if (!stage_encode(&s, &job)) fail(ErrorCode::Internal, "encode_jpeg: libjpeg failed: {}", s.err.message);
  return std::vector<uint8_t>(s.buffer, s.buffer + s.size);
}

}  // namespace fluxrt::io
