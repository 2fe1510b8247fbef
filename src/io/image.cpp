#include "io/image.h"

#include <fcntl.h>
#include <png.h>
#include <zlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "io/utf8.h"

namespace fluxrt::io {
namespace {

// Larger files are not read into memory (a maximal image needs far less, see kMaxImageSide).
constexpr size_t kMaxFileBytes = size_t(2) << 30;
constexpr size_t kCompressTextAbove = 1024;
// Images are written every step in benchmarks, so encoding favours speed: the cheap SUB/UP
// filters with zlib's run-length strategy were about twice as fast as libpng's defaults (all five
// filters, level 6) on a noisy 1024x1024 RGB image, and the file came out smaller.
constexpr int kCompressionLevel = 1;

// ---- libpng error handling
//
// libpng reports errors by calling the error callback, which must not return; we longjmp back
// to a setjmp in one of the small "stage" functions below. Those functions, and the callbacks
// libpng calls, hold only trivially destructible locals, so the longjmp skips no destructor.
// Everything with a destructor (buffers, the libpng structs' guard) lives in the callers, which
// turn a failed stage into a fluxrt::Error.

struct PngStatus {
  char message[192] = {};
};

[[noreturn]] void on_png_error(png_structp png, png_const_charp message) {
  auto* status = static_cast<PngStatus*>(png_get_error_ptr(png));
  std::snprintf(status->message, sizeof(status->message), "%s", message ? message : "error");
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}  // benign problems (bad ancillary CRC, ...)

struct MemoryReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void read_from_memory(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<MemoryReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "file is truncated");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

struct ReadStructs {
  png_structp png = nullptr;
  png_infop info = nullptr;
  png_infop end = nullptr;
  ~ReadStructs() { png_destroy_read_struct(&png, &info, &end); }
};

struct Header {
  uint32_t width, height;
  int channels;
  int passes;  // 7 for Adam7-interlaced images, else 1
  size_t row_bytes;
};

// Reads the chunks up to the image data and sets up conversion to 8-bit gray, RGB or RGBA.
bool stage_read_header(png_structp png, png_infop info, Header* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  const bool has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (has_trns) png_set_tRNS_to_alpha(png);
  if (bit_depth == 16) png_set_scale_16(png);
  if (bit_depth < 8) png_set_packing(png);
  // Gray with alpha has no 2-channel Image form: it becomes RGBA.
  if (color_type == PNG_COLOR_TYPE_GRAY_ALPHA || (color_type == PNG_COLOR_TYPE_GRAY && has_trns))
    png_set_gray_to_rgb(png);
  out->passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  out->channels = png_get_channels(png, info);
  out->row_bytes = png_get_rowbytes(png, info);
  return true;
}

bool stage_read_image(png_structp png, png_infop end, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, end);
  return true;
}

// Decodes and discards the image data one row at a time (reading text after it needs that).
bool stage_skip_image(png_structp png, png_infop end, png_bytep row, uint32_t height,
                      int passes) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int p = 0; p < passes; ++p)
    for (uint32_t y = 0; y < height; ++y) png_read_row(png, row, nullptr);
  png_read_end(png, end);
  return true;
}

std::string describe(std::string_view name) { return escape_for_message(name, 300); }

// Creates the read structs and checks the signature and the size limits.
void open_png(ReadStructs& s, PngStatus& status, MemoryReader& reader, std::string_view name,
              Header* header) {
  if (reader.size < 8 || png_sig_cmp(reader.data, 0, 8) != 0)
    fail(ErrorCode::Format, "{}: not a PNG file", describe(name));
  // IHDR must come first; checking its size here gives a clearer message than libpng's.
  if (reader.size >= 24 && std::memcmp(reader.data + 12, "IHDR", 4) == 0) {
    const auto be32 = [&](size_t at) {
      return uint32_t(reader.data[at]) << 24 | uint32_t(reader.data[at + 1]) << 16 |
             uint32_t(reader.data[at + 2]) << 8 | uint32_t(reader.data[at + 3]);
    };
    const uint32_t w = be32(16), h = be32(20);
    if (w > uint32_t(kMaxImageSide) || h > uint32_t(kMaxImageSide))
      fail(ErrorCode::Format, "{}: {}x{} image exceeds the {}x{} limit", describe(name), w, h,
           kMaxImageSide, kMaxImageSide);
  }
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &status, on_png_error, on_png_warning);
  if (!s.png) fail(ErrorCode::OutOfMemory, "{}: cannot create a PNG decoder", describe(name));
  s.info = png_create_info_struct(s.png);
  s.end = png_create_info_struct(s.png);
  if (!s.info || !s.end) fail(ErrorCode::OutOfMemory, "{}: cannot create a PNG decoder", describe(name));
  png_set_read_fn(s.png, &reader, read_from_memory);
  // Dimensions beyond the limit fail inside png_read_info, before any allocation for them.
  png_set_user_limits(s.png, kMaxImageSide, kMaxImageSide);
  if (!stage_read_header(s.png, s.info, header))
    fail(ErrorCode::Format, "{}: corrupt PNG ({})", describe(name), status.message);
  if (header->channels != 1 && header->channels != 3 && header->channels != 4)
    fail(ErrorCode::Format, "{}: unexpected {} channels after conversion", describe(name),
         header->channels);
  if (header->row_bytes != size_t(header->width) * size_t(header->channels))
    fail(ErrorCode::Format, "{}: unexpected row size after conversion", describe(name));
}

std::vector<uint8_t> read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    const int err = errno;
    fail(err == ENOENT || err == ENOTDIR ? ErrorCode::NotFound : ErrorCode::Io, "{}: cannot open: {}",
         describe(path), std::strerror(err));
  }
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    if (bytes.size() + n > kMaxFileBytes) {
      std::fclose(f);
      fail(ErrorCode::Format, "{}: larger than {} bytes, not read as an image", describe(path),
           kMaxFileBytes);
    }
    bytes.insert(bytes.end(), buf, buf + n);
  }
  const bool error = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (error) fail(ErrorCode::Io, "{}: read failed: {}", describe(path), std::strerror(err));
  return bytes;
}

// ---- text chunks

std::string latin1_to_utf8(const char* text, size_t n) {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

// Latin-1 bytes of valid UTF-8 `text`, or false when a character is above U+00FF.
bool utf8_to_latin1(std::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < text.size()) {
      out->push_back(static_cast<char>(((c & 0x1F) << 6) | (text[++i] & 0x3F)));
    } else {
      return false;
    }
  }
  return true;
}

void collect_text(png_structp png, png_infop info, std::map<std::string, std::string>* out) {
  png_textp text = nullptr;
  const int n = png_get_text(png, info, &text, nullptr);
  for (int i = 0; i < n; ++i) {
    const png_text& t = text[i];
    const std::string key = latin1_to_utf8(t.key, std::strlen(t.key));
    const bool itxt = t.compression == PNG_ITXT_COMPRESSION_NONE || t.compression == PNG_ITXT_COMPRESSION_zTXt;
    std::string value = itxt ? std::string(t.text ? t.text : "", t.text ? t.itxt_length : 0)
                             : latin1_to_utf8(t.text ? t.text : "", t.text ? t.text_length : 0);
    out->emplace(key, std::move(value));
  }
}

bool valid_keyword(std::string_view key) {
  if (key.empty() || key.size() > 79 || key.front() == ' ' || key.back() == ' ') return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (!((c >= 32 && c <= 126) || c >= 161)) return false;
    if (c == ' ' && key[i + 1] == ' ') return false;
  }
  return true;
}

// ---- writing

struct WriteStructs {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~WriteStructs() { png_destroy_write_struct(&png, &info); }
};

struct MemoryWriter {
  std::vector<uint8_t>* out;
};

void write_to_memory(png_structp png, png_bytep data, size_t n) {
  auto* w = static_cast<MemoryWriter*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    w->out->insert(w->out->end(), data, data + n);
  } catch (...) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory");
}

void flush_nothing(png_structp) {}

struct EncodeJob {
  uint32_t width, height;
  int color_type;
  png_textp text;
  int num_text;
  png_bytepp rows;
};

bool stage_encode(png_structp png, png_infop info, const EncodeJob* job) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, job->width, job->height, 8, job->color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB | PNG_FILTER_UP);
  png_set_compression_level(png, kCompressionLevel);
  png_set_compression_strategy(png, Z_RLE);
  png_set_text_compression_level(png, 6);
  if (job->num_text > 0) png_set_text(png, info, job->text, job->num_text);
  png_write_info(png, info);
  png_write_image(png, job->rows);
  png_write_end(png, info);
  return true;
}

std::atomic<unsigned> g_temp_counter{0};

// The temporary file of an atomic write: removed unless commit() renamed it into place.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    const size_t slash = target.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : target.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
    path_ = fmt::format("{}.{}.tmp-{}-{}", dir, base, static_cast<long>(::getpid()),
                        g_temp_counter.fetch_add(1));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      const int err = errno;
      fail(err == ENOENT || err == ENOTDIR ? ErrorCode::NotFound : ErrorCode::Io,
           "{}: cannot create a file next to it: {}", describe(target_), std::strerror(err));
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  void write_all(const uint8_t* data, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        fail(ErrorCode::Io, "{}: write failed: {}", describe(target_),
             w < 0 ? std::strerror(errno) : "no progress");
      data += w;
      n -= static_cast<size_t>(w);
    }
  }

  void commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      fail(ErrorCode::Io, "{}: write failed on close: {}", describe(target_), std::strerror(errno));
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      fail(ErrorCode::Io, "{}: cannot move the new image into place: {}", describe(target_),
           std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string target_;
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

Image decode_png(std::span<const uint8_t> data, std::string_view name, uint64_t max_pixels) {
  ReadStructs s;
  PngStatus status;
  MemoryReader reader{data.data(), data.size(), 0};
  Header h{};
  open_png(s, status, reader, name, &h);
  check_pixel_limit(h.width, h.height, max_pixels, name);
  Image image;
  image.width = static_cast<int>(h.width);
  image.height = static_cast<int>(h.height);
  image.channels = h.channels;
  try {
    image.pixels.resize(h.row_bytes * h.height);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, "{}: no memory for a {}x{} image", describe(name), h.width, h.height);
  }
  std::vector<png_bytep> rows(h.height);
  for (uint32_t y = 0; y < h.height; ++y) rows[y] = image.pixels.data() + y * h.row_bytes;
  if (!stage_read_image(s.png, s.end, rows.data()))
    fail(ErrorCode::Format, "{}: corrupt PNG ({})", describe(name), status.message);
  return image;
}

Image read_png(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  return decode_png(bytes, path);
}

void check_pixel_limit(uint64_t width, uint64_t height, uint64_t max_pixels, std::string_view name) {
  if (width * height > max_pixels)
    fail(ErrorCode::Format, "{}: {}x{} image is over the limit of {} pixels", describe(name), width, height,
         max_pixels);
}

Image decode_image(std::span<const uint8_t> data, std::string_view name, uint64_t max_pixels) {
  const std::optional<ImageFormat> format = sniff_image_format(data);
  if (!format) {
    if (data.empty()) fail(ErrorCode::Format, "{}: empty file, not an image", describe(name));
    fail(ErrorCode::Format, "{}: not a PNG, JPEG or WebP image", describe(name));
  }
  switch (*format) {
    case ImageFormat::Png:
      return decode_png(data, name, max_pixels);
    case ImageFormat::Jpeg:
      return decode_jpeg(data, name, max_pixels);
    case ImageFormat::Webp:
      return decode_webp(data, name, max_pixels);
  }
  fail(ErrorCode::Internal, "{}: unhandled image format", describe(name));
}

Image read_image(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  return decode_image(bytes, path);
}

std::map<std::string, std::string> decode_png_text(std::span<const uint8_t> data,
                                                   std::string_view name) {
  ReadStructs s;
  PngStatus status;
  MemoryReader reader{data.data(), data.size(), 0};
  Header h{};
  open_png(s, status, reader, name, &h);
  // Text may follow the image data, so the image is decoded (one row at a time) to reach it.
  std::vector<uint8_t> row(h.row_bytes);
  if (!stage_skip_image(s.png, s.end, row.data(), h.height, h.passes))
    fail(ErrorCode::Format, "{}: corrupt PNG ({})", describe(name), status.message);
  std::map<std::string, std::string> text;
  collect_text(s.png, s.info, &text);
  collect_text(s.png, s.end, &text);
  return text;
}

std::map<std::string, std::string> read_png_text(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  return decode_png_text(bytes, path);
}

std::vector<uint8_t> encode_png(const Image& image, const TextChunks& text) {
  if (image.width < 1 || image.height < 1 || image.width > kMaxImageSide ||
      image.height > kMaxImageSide)
    fail(ErrorCode::InvalidArgument, "encode_png: size {}x{} outside 1..{}", image.width,
         image.height, kMaxImageSide);
  if (image.channels != 1 && image.channels != 3 && image.channels != 4)
    fail(ErrorCode::InvalidArgument, "encode_png: {} channels (1, 3 or 4 are supported)", image.channels);
  if (image.pixels.size() != image.row_bytes() * static_cast<size_t>(image.height))
    fail(ErrorCode::InvalidArgument, "encode_png: {} pixel bytes for a {}x{}x{} image",
         image.pixels.size(), image.width, image.height, image.channels);

  // Text entries point into these strings, which outlive the encoding.
  std::vector<std::string> keys, values;
  keys.reserve(text.size());
  values.reserve(text.size());
  std::vector<png_text> entries(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& [key, value] = text[i];
    if (!valid_keyword(key))
      fail(ErrorCode::InvalidArgument, "encode_png: invalid PNG text keyword \"{}\"", describe(key));
    if (!is_valid_utf8(value) || value.find('\0') != std::string::npos)
      fail(ErrorCode::InvalidArgument, "encode_png: text \"{}\" is not UTF-8 without NUL", describe(key));
    std::string latin1;
    const bool plain = utf8_to_latin1(value, &latin1);
    const bool big = value.size() > kCompressTextAbove;
    keys.push_back(key);
    values.push_back(plain ? std::move(latin1) : value);
    png_text& e = entries[i];
    std::memset(&e, 0, sizeof(e));
    e.key = keys.back().data();
    e.text = values.back().data();
    if (plain) {
      e.compression = big ? PNG_TEXT_COMPRESSION_zTXt : PNG_TEXT_COMPRESSION_NONE;
      e.text_length = values.back().size();
    } else {
      e.compression = big ? PNG_ITXT_COMPRESSION_zTXt : PNG_ITXT_COMPRESSION_NONE;
      e.itxt_length = values.back().size();
      e.lang = const_cast<char*>("");
      e.lang_key = const_cast<char*>("");
    }
  }

  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  for (size_t y = 0; y < rows.size(); ++y)
    rows[y] = const_cast<png_bytep>(image.pixels.data() + y * image.row_bytes());

  std::vector<uint8_t> out;
  out.reserve(image.pixels.size() / 2 + 1024);
  PngStatus status;
  WriteStructs s;
  s.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &status, on_png_error, on_png_warning);
  if (!s.png) fail(ErrorCode::OutOfMemory, "encode_png: cannot create a PNG encoder");
  s.info = png_create_info_struct(s.png);
  if (!s.info) fail(ErrorCode::OutOfMemory, "encode_png: cannot create a PNG encoder");
  MemoryWriter writer{&out};
  png_set_write_fn(s.png, &writer, write_to_memory, flush_nothing);
  const int color_type = image.channels == 1   ? PNG_COLOR_TYPE_GRAY
                         : image.channels == 3 ? PNG_COLOR_TYPE_RGB
                                               : PNG_COLOR_TYPE_RGBA;
  const EncodeJob job{static_cast<uint32_t>(image.width), static_cast<uint32_t>(image.height),
                      color_type, entries.data(), static_cast<int>(entries.size()), rows.data()};
  if (!stage_encode(s.png, s.info, &job))
    fail(ErrorCode::Internal, "encode_png: libpng failed: {}", status.message);
  return out;
}

void write_png(const std::string& path, const Image& image, const TextChunks& text) {
  std::vector<uint8_t> bytes;
  try {
    bytes = encode_png(image, text);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", describe(path), e.what()));
  }
  TempFile tmp(path);
  tmp.write_all(bytes.data(), bytes.size());
  tmp.commit();
}

Image to_rgb(const Image& image) {
  if (image.channels == 3) return image;
  if (image.channels != 1 && image.channels != 4)
    fail(ErrorCode::InvalidArgument, "to_rgb: {} channels (1, 3 or 4 are supported)", image.channels);
  Image out;
  out.width = image.width;
  out.height = image.height;
  out.channels = 3;
  const size_t n = static_cast<size_t>(image.width) * static_cast<size_t>(image.height);
  if (image.pixels.size() != n * static_cast<size_t>(image.channels))
    fail(ErrorCode::InvalidArgument, "to_rgb: {} pixel bytes for a {}x{}x{} image",
         image.pixels.size(), image.width, image.height, image.channels);
  out.pixels.resize(n * 3);
  const uint8_t* s = image.pixels.data();
  uint8_t* d = out.pixels.data();
  for (size_t i = 0; i < n; ++i, d += 3) {
    if (image.channels == 1) {
      d[0] = d[1] = d[2] = s[i];
    } else {
      d[0] = s[4 * i];
      d[1] = s[4 * i + 1];
      d[2] = s[4 * i + 2];
    }
  }
  return out;
}

}  // namespace fluxrt::io
