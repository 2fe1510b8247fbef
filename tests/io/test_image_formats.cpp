// JPEG and WebP reading and writing: round trips, EXIF orientation on tiny JPEGs and WebPs made
// here (libjpeg / libwebpmux plus a hand-built EXIF block), gray / CMYK / YCCK / progressive
// JPEGs written with libjpeg directly, the XMP settings packet, and bad files of every kind
// (truncated at every length, wrong magic, huge or zero dimensions, empty).
#include <gtest/gtest.h>
#include <unistd.h>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <webp/mux.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/image.h"

namespace fluxrt::io {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

template <typename Fn>
std::string expect_error(ErrorCode code, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "multi-line message";
    return e.what();
  }
  ADD_FAILURE() << "no fluxrt::Error thrown";
  return {};
}

// A smooth image (lossy codecs keep it close), `c` channels.
Image gradient(int w, int h, int c) {
  Image im;
  im.width = w;
  im.height = h;
  im.channels = c;
  im.pixels.resize(size_t(w) * h * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        im.pixels[(size_t(y) * w + x) * c + k] =
            uint8_t(k == 3 ? 128 + x * 100 / w : x * 150 / w + y * 60 / h + k * 20);
  return im;
}

// Four flat quadrants: red top-left, green top-right, blue bottom-left, white bottom-right.
constexpr uint8_t kQuad[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
enum { R, G, B, W };
Image quadrants(int w, int h) {
  Image im;
  im.width = w;
  im.height = h;
  im.channels = 3;
  im.pixels.resize(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      std::memcpy(&im.pixels[(size_t(y) * w + x) * 3], kQuad[(y >= h / 2) * 2 + (x >= w / 2)], 3);
  return im;
}

// The colour (index into kQuad) nearest to the centre of each quadrant: TL, TR, BL, BR.
std::vector<int> quadrant_colours(const Image& im) {
  std::vector<int> out;
  for (int q = 0; q < 4; ++q) {
    const int x = (q % 2) ? im.width * 3 / 4 : im.width / 4, y = (q / 2) ? im.height * 3 / 4 : im.height / 4;
    const uint8_t* p = &im.pixels[(size_t(y) * im.width + x) * im.channels];
    int best = -1, best_d = 1 << 30;
    for (int k = 0; k < 4; ++k) {
      int d = 0;
      for (int c = 0; c < 3; ++c) d += std::abs(int(p[c]) - int(kQuad[k][c]));
      if (d < best_d) best = k, best_d = d;
    }
    out.push_back(best);
  }
  return out;
}

double mean_abs_diff(const Image& a, const Image& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size() && i < b.pixels.size(); ++i)
    sum += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
  return sum / double(a.pixels.size());
}

// A minimal EXIF block ("Exif\0\0", TIFF header, IFD0 with one Orientation entry).
Bytes exif_block(int orientation, bool big_endian) {
  Bytes e = {'E', 'x', 'i', 'f', 0, 0};
  auto u16 = [&](uint32_t v) {
    if (big_endian)
      e.insert(e.end(), {uint8_t(v >> 8), uint8_t(v)});
    else
      e.insert(e.end(), {uint8_t(v), uint8_t(v >> 8)});
  };
  auto u32 = [&](uint32_t v) {
    if (big_endian) {
      u16(v >> 16);
      u16(v & 0xFFFF);
    } else {
      u16(v & 0xFFFF);
      u16(v >> 16);
    }
  };
  e.push_back(big_endian ? 'M' : 'I');
  e.push_back(big_endian ? 'M' : 'I');
  u16(42);
  u32(8);       // IFD0 right after the header
  u16(1);       // one entry
  u16(0x0112);  // Orientation
  u16(3);       // SHORT
  u32(1);
  u16(uint32_t(orientation));
  u16(0);
  u32(0);  // no next IFD
  return e;
}

// `jpeg` with an APP1 segment holding `payload` right after SOI.
Bytes with_app1(const Bytes& jpeg, const Bytes& payload) {
  const size_t len = payload.size() + 2;
  Bytes out;
  out.reserve(jpeg.size() + len + 2);  // (also keeps g++ 12's false -Warray-bounds away)
  out.insert(out.end(), {jpeg[0], jpeg[1], 0xFF, 0xE1, uint8_t(len >> 8), uint8_t(len)});
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

// A WebP with an EXIF chunk, through libwebpmux (which writes the VP8X header saying so).
Bytes webp_with_exif(const Bytes& webp, const Bytes& exif) {
  WebPMux* mux = WebPMuxNew();
  const WebPData image{webp.data(), webp.size()}, chunk{exif.data(), exif.size()};
  WebPData out{};
  EXPECT_EQ(WebPMuxSetImage(mux, &image, 1), WEBP_MUX_OK);
  EXPECT_EQ(WebPMuxSetChunk(mux, "EXIF", &chunk, 1), WEBP_MUX_OK);
  EXPECT_EQ(WebPMuxAssemble(mux, &out), WEBP_MUX_OK);
  Bytes bytes(out.bytes, out.bytes + out.size);
  WebPDataClear(&out);
  WebPMuxDelete(mux);
  return bytes;
}

// libjpeg with the options fluxrt's encoder never uses. Errors here are test bugs: the default
// handler (exit) is fine.
struct RawJpeg {
  J_COLOR_SPACE in_space = JCS_RGB;
  J_COLOR_SPACE file_space = JCS_YCbCr;
  int components = 3;
  bool progressive = false;
};
Bytes make_jpeg(const RawJpeg& r, int w, int h, const Bytes& pixels) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = r.components;
  c.in_color_space = r.in_space;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, r.file_space);
  jpeg_set_quality(&c, 95, TRUE);
  if (r.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + size_t(c.next_scanline) * w * r.components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(buf, buf + size);
  std::free(buf);
  return out;
}

TEST(ImageFormats, SniffsByMagicBytes) {
  const Image im = gradient(8, 8, 3);
  EXPECT_EQ(sniff_image_format(encode_png(im)), ImageFormat::Png);
  EXPECT_EQ(sniff_image_format(encode_jpeg(im, 90)), ImageFormat::Jpeg);
  EXPECT_EQ(sniff_image_format(encode_webp(im, 100)), ImageFormat::Webp);
  const Bytes text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'};
  EXPECT_FALSE(sniff_image_format(text));
  EXPECT_FALSE(sniff_image_format({}));
}

TEST(ImageFormats, RoundTrips) {
  for (const auto& [w, h] : {std::pair{1, 1}, {7, 5}, {64, 48}}) {
    const Image rgb = gradient(w, h, 3), rgba = gradient(w, h, 4);
    // PNG and lossless WebP give the pixels back exactly, alpha included.
    EXPECT_EQ(decode_image(encode_png(rgb)).pixels, rgb.pixels);
    EXPECT_EQ(decode_image(encode_webp(rgb, 100)).pixels, rgb.pixels);
    const Image back = decode_image(encode_webp(rgba, 100));
    EXPECT_EQ(back.channels, 4);
    EXPECT_EQ(back.pixels, rgba.pixels);
    // Lossy: same size, near-same pixels.
    for (const Image& got : {decode_image(encode_jpeg(rgb, 95)), decode_image(encode_webp(rgb, 90))}) {
      ASSERT_EQ(got.width, w);
      ASSERT_EQ(got.height, h);
      ASSERT_EQ(got.channels, 3);
      if (w > 1) {
        EXPECT_LT(mean_abs_diff(got, rgb), 6.0) << w << "x" << h;
      }
    }
  }
  // Gray stays one channel through JPEG; RGBA loses alpha.
  EXPECT_EQ(decode_jpeg(encode_jpeg(gradient(16, 16, 1), 95)).channels, 1);
  EXPECT_EQ(decode_jpeg(encode_jpeg(gradient(16, 16, 4), 95)).channels, 3);
  // Quality 0 (clamped to 1) still writes a readable file.
  EXPECT_EQ(decode_jpeg(encode_jpeg(gradient(16, 16, 3), 0)).width, 16);
  expect_error(ErrorCode::InvalidArgument, [] { encode_jpeg(gradient(4, 4, 3), 101); });
  expect_error(ErrorCode::InvalidArgument, [] { encode_webp(gradient(4, 4, 3), -1); });
  expect_error(ErrorCode::InvalidArgument, [] { encode_webp(Image{}, 90); });
}

TEST(ImageFormats, SettingsTravelAsXmp) {
  const TextChunks text = {{"prompt", "a <red> & \"blue\" fox"}, {"seed", "7"}};
  for (const Bytes& file :
       {encode_jpeg(gradient(8, 8, 3), 90, text), encode_webp(gradient(8, 8, 3), 90, text)}) {
    const std::string s(file.begin(), file.end());
    EXPECT_NE(s.find("<fluxrt:prompt>a &lt;red&gt; &amp; \"blue\" fox</fluxrt:prompt>"), std::string::npos);
    EXPECT_NE(s.find("<fluxrt:seed>7</fluxrt:seed>"), std::string::npos);
    EXPECT_EQ(decode_image(file).width, 8);  // still a readable image
  }
  // Beyond a JPEG segment the packet is left out, not an error.
  const Bytes big = encode_jpeg(gradient(8, 8, 3), 90, {{"prompt", std::string(70000, 'x')}});
  EXPECT_EQ(decode_jpeg(big).width, 8);
}

TEST(ImageFormats, ExifOrientationIsParsedDefensively) {
  for (int o = 1; o <= 8; ++o) {
    EXPECT_EQ(exif_orientation(exif_block(o, false)), o);
    EXPECT_EQ(exif_orientation(exif_block(o, true)), o);
  }
  EXPECT_EQ(exif_orientation(exif_block(9, false)), 1);
  EXPECT_EQ(exif_orientation({}), 1);
  Bytes cut = exif_block(6, false);
  for (size_t n = 0; n < cut.size() - 4; ++n) EXPECT_EQ(exif_orientation({cut.data(), n}), 1) << n;
  Bytes bad_offset = exif_block(6, true);
  bad_offset[6 + 7] = 0xF0;  // IFD0 offset far past the end
  EXPECT_EQ(exif_orientation(bad_offset), 1);
}

// What each orientation shows, as colours of the TL, TR, BL, BR quadrants (EXIF 2.3, 4.6.4 A).
const std::vector<int> kShown[9] = {{},           {R, G, B, W}, {G, R, W, B}, {W, B, G, R}, {B, W, R, G},
                                    {R, B, G, W}, {B, R, W, G}, {W, G, B, R}, {G, W, R, B}};

TEST(ImageFormats, JpegExifOrientationIsApplied) {
  const Bytes plain = encode_jpeg(quadrants(32, 16), 95);
  for (int o = 1; o <= 8; ++o) {
    const Image im = decode_image(with_app1(plain, exif_block(o, o % 2 == 0)));
    EXPECT_EQ(im.width, o >= 5 ? 16 : 32) << o;
    EXPECT_EQ(im.height, o >= 5 ? 32 : 16) << o;
    EXPECT_EQ(quadrant_colours(im), kShown[o]) << "orientation " << o;
  }
  // An APP1 that is not EXIF (XMP) changes nothing.
  const Bytes xmp = {'h', 't', 't', 'p', ':', '/', '/', 0};
  EXPECT_EQ(quadrant_colours(decode_image(with_app1(plain, xmp))), kShown[1]);
}

TEST(ImageFormats, WebpExifOrientationIsApplied) {
  const Bytes plain = encode_webp(quadrants(32, 16), 100);
  for (int o : {3, 6, 8}) {
    const Image im = decode_image(webp_with_exif(plain, exif_block(o, false)));
    EXPECT_EQ(im.width, o >= 5 ? 16 : 32) << o;
    EXPECT_EQ(quadrant_colours(im), kShown[o]) << "orientation " << o;
  }
}

TEST(ImageFormats, ReadsGrayCmykYcckAndProgressiveJpegs) {
  const int w = 24, h = 16;
  Bytes gray(size_t(w) * h, 90);
  Image g = decode_jpeg(make_jpeg({JCS_GRAYSCALE, JCS_GRAYSCALE, 1, false}, w, h, gray));
  EXPECT_EQ(g.channels, 1);
  EXPECT_NEAR(g.pixels[0], 90, 2);

  // Pure red in Adobe's inverted CMYK (libjpeg writes the Adobe marker for CMYK and YCCK).
  Bytes cmyk;
  for (int i = 0; i < w * h; ++i) cmyk.insert(cmyk.end(), {255, 0, 0, 255});
  for (J_COLOR_SPACE space : {JCS_CMYK, JCS_YCCK}) {
    const Image im = decode_jpeg(make_jpeg({JCS_CMYK, space, 4, false}, w, h, cmyk));
    ASSERT_EQ(im.channels, 3);
    EXPECT_NEAR(im.pixels[0], 255, 4) << space;
    EXPECT_NEAR(im.pixels[1], 0, 4) << space;
    EXPECT_NEAR(im.pixels[2], 0, 4) << space;
  }

  const Image rgb = gradient(w, h, 3);
  const Image p = decode_image(make_jpeg({JCS_RGB, JCS_YCbCr, 3, true}, w, h, rgb.pixels));
  EXPECT_EQ(p.width, w);
  EXPECT_LT(mean_abs_diff(p, rgb), 6.0);
}

// ---- the bad-file corpus

TEST(ImageFormats, EveryTruncationIsAFormatError) {
  // Only the last two bytes (a JPEG's EOI marker) may go without losing pixels; anything shorter
  // must fail cleanly, never crash or fill in grey.
  const Image im = gradient(20, 12, 3);
  for (const Bytes& file : {encode_jpeg(im, 90), make_jpeg({JCS_RGB, JCS_YCbCr, 3, true}, 20, 12, im.pixels),
                            encode_webp(im, 80), encode_webp(im, 100)}) {
    for (size_t n = 0; n + 2 < file.size(); ++n) {
      const Bytes cut(file.begin(), file.begin() + long(n));
      expect_error(ErrorCode::Format, [&] { decode_image(cut, "cut"); });
    }
  }
}

TEST(ImageFormats, CorruptBytesNeverCrash) {
  const Image im = gradient(20, 12, 3);
  for (Bytes file : {encode_jpeg(im, 90), encode_webp(im, 80), encode_webp(im, 100)}) {
    // Flip bytes past the magic one at a time: an error or some image, never a crash.
    for (size_t i = 4; i < file.size(); i += 3) {
      Bytes bad = file;
      bad[i] ^= 0x5A;
      try {
        const Image got = decode_image(bad, "bad");
        EXPECT_GT(got.width, 0);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Format) << e.what();
      }
    }
  }
}

TEST(ImageFormats, WrongMagicHugeAndEmptyAreFormatErrors) {
  EXPECT_NE(expect_error(ErrorCode::Format, [] { decode_image({}, "up.jpg"); }).find("empty"),
            std::string::npos);
  const Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0};
  EXPECT_NE(
      expect_error(ErrorCode::Format, [&] { decode_image(gif, "x.jpg"); }).find("not a PNG, JPEG or WebP"),
      std::string::npos);
  expect_error(ErrorCode::Format, [&] { decode_jpeg(encode_webp(gradient(4, 4, 3), 90)); });
  expect_error(ErrorCode::Format, [&] { decode_webp(encode_jpeg(gradient(4, 4, 3), 90)); });

  // A JPEG whose frame header declares 60000 x 50000: refused from the header, before decoding.
  Bytes jpeg = encode_jpeg(gradient(16, 16, 3), 90);
  size_t sof = 2;
  while (!(jpeg[sof] == 0xFF && (jpeg[sof + 1] == 0xC0 || jpeg[sof + 1] == 0xC2)))
    sof += 2 + (size_t(jpeg[sof + 2]) << 8 | jpeg[sof + 3]);
  Bytes huge = jpeg;
  huge[sof + 5] = 50000 >> 8, huge[sof + 6] = 50000 & 0xFF;  // height
  huge[sof + 7] = 60000 >> 8, huge[sof + 8] = 60000 & 0xFF;  // width
  EXPECT_NE(expect_error(ErrorCode::Format, [&] { decode_image(huge, "bomb.jpg"); }).find("60000x50000"),
            std::string::npos);
  Bytes zero = jpeg;
  zero[sof + 5] = zero[sof + 6] = 0;
  expect_error(ErrorCode::Format, [&] { decode_image(zero, "zero.jpg"); });

  // WebP cannot declare more than 16383 a side (the server's pixel limit covers it) nor 0 (the
  // field stores width - 1); a broken header is the corrupt case here.
  Bytes webp = encode_webp(gradient(16, 16, 3), 100);
  webp[12 + 8] = 0;  // break the VP8L signature byte
  expect_error(ErrorCode::Format, [&] { decode_image(webp, "bad.webp"); });
}

// A caller's pixel limit is checked from the header, for every format.
TEST(ImageFormats, PixelLimitIsCheckedBeforeDecoding) {
  const Image im = gradient(40, 30, 3);
  for (const Bytes& file : {encode_png(im), encode_jpeg(im, 90), encode_webp(im, 90)}) {
    EXPECT_EQ(decode_image(file, "ok", 1200).width, 40);
    const std::string msg = expect_error(ErrorCode::Format, [&] { decode_image(file, "big", 1199); });
    EXPECT_NE(msg.find("40x30 image is over the limit of 1199 pixels"), std::string::npos) << msg;
  }
}

TEST(ImageFormats, ReadImageNamesTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_formats_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Bytes jpeg = encode_jpeg(quadrants(16, 8), 90);
  const std::string good = (dir / "photo.png").string();  // the name lies; the bytes decide
  std::ofstream(good, std::ios::binary).write(reinterpret_cast<const char*>(jpeg.data()), long(jpeg.size()));
  EXPECT_EQ(read_image(good).width, 16);
  const std::string cut = (dir / "cut.jpg").string();
  std::ofstream(cut, std::ios::binary)
      .write(reinterpret_cast<const char*>(jpeg.data()), long(jpeg.size() / 2));
  EXPECT_NE(expect_error(ErrorCode::Format, [&] { read_image(cut); }).find("cut.jpg"), std::string::npos);
  expect_error(ErrorCode::NotFound, [&] { read_image((dir / "none.webp").string()); });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fluxrt::io
