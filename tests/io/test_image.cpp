// PNG reading and writing: round trips, text chunks, every colour type and bit depth (the
// unusual files are made here with libpng directly), and bad input of every kind.
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/image.h"

namespace fluxrt::io {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("fluxrt_image_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

Image random_image(int w, int h, int c, uint32_t seed) {
  std::mt19937 rng(seed);
  Image im;
  im.width = w;
  im.height = h;
  im.channels = c;
  im.pixels.resize(static_cast<size_t>(w) * h * c);
  for (auto& p : im.pixels) p = static_cast<uint8_t>(rng());
  return im;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Runs `fn`, expecting fluxrt::Error with `code`; returns the message.
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

// ---- a minimal libpng writer for the files fluxrt never writes (16-bit, palette, interlaced...)

struct RawPng {
  uint32_t width = 0, height = 0;
  int bit_depth = 8;
  int color_type = PNG_COLOR_TYPE_RGB;
  int interlace = PNG_INTERLACE_NONE;
  std::vector<std::vector<uint8_t>> rows;  // packed as PNG stores them (16-bit big endian)
  std::vector<png_color> palette;
  std::vector<uint8_t> trns_alpha;  // palette alpha
  bool trns_gray = false;
  uint16_t trns_gray_value = 0;
  std::vector<std::pair<std::string, std::string>> late_text;  // tEXt after the image data
};

void append_bytes(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

// libpng reports errors by longjmp; this frame holds only trivially destructible locals.
bool stage_make_png(png_structp png, png_infop info, const RawPng* r, png_bytepp rows,
                    png_textp text, int num_text, png_color_16* trans_gray) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, r->width, r->height, r->bit_depth, r->color_type, r->interlace,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!r->palette.empty())
    png_set_PLTE(png, info, r->palette.data(), static_cast<int>(r->palette.size()));
  if (!r->trns_alpha.empty())
    png_set_tRNS(png, info, r->trns_alpha.data(), static_cast<int>(r->trns_alpha.size()), nullptr);
  if (r->trns_gray) png_set_tRNS(png, info, nullptr, 0, trans_gray);
  png_write_info(png, info);
  if (r->interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
  png_write_image(png, rows);
  if (num_text > 0) png_set_text(png, info, text, num_text);  // written after the image data
  png_write_end(png, info);
  return true;
}

std::vector<uint8_t> make_png(const RawPng& r) {
  std::vector<uint8_t> out;
  std::vector<png_bytep> rows;
  for (const auto& row : r.rows) rows.push_back(const_cast<png_bytep>(row.data()));
  std::vector<png_text> text(r.late_text.size());
  for (size_t i = 0; i < r.late_text.size(); ++i) {
    text[i].compression = PNG_TEXT_COMPRESSION_NONE;
    text[i].key = const_cast<char*>(r.late_text[i].first.c_str());
    text[i].text = const_cast<char*>(r.late_text[i].second.c_str());
  }
  png_color_16 trans_gray{};
  trans_gray.gray = r.trns_gray_value;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, append_bytes, nullptr);
  const bool ok = stage_make_png(png, info, &r, rows.data(), text.data(),
                                 static_cast<int>(text.size()), &trans_gray);
  png_destroy_write_struct(&png, &info);
  EXPECT_TRUE(ok) << "libpng failed to write the test image";
  return out;
}

// The chunk types of a PNG file in order, with their data.
std::vector<std::pair<std::string, std::vector<uint8_t>>> chunks(const std::vector<uint8_t>& f) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (size_t pos = 8; pos + 12 <= f.size();) {
    const uint32_t len = uint32_t(f[pos]) << 24 | uint32_t(f[pos + 1]) << 16 |
                         uint32_t(f[pos + 2]) << 8 | f[pos + 3];
    if (pos + 12 + uint64_t(len) > f.size()) break;
    out.emplace_back(std::string(f.begin() + pos + 4, f.begin() + pos + 8),
                     std::vector<uint8_t>(f.begin() + pos + 8, f.begin() + pos + 8 + len));
    pos += 12 + len;
  }
  return out;
}

// Offset of the first chunk of `type`.
size_t chunk_offset(const std::vector<uint8_t>& f, const char* type) {
  for (size_t pos = 8; pos + 12 <= f.size();) {
    const uint32_t len = uint32_t(f[pos]) << 24 | uint32_t(f[pos + 1]) << 16 |
                         uint32_t(f[pos + 2]) << 8 | f[pos + 3];
    if (std::memcmp(&f[pos + 4], type, 4) == 0) return pos;
    pos += 12 + len;
  }
  return 0;
}

void fix_crc(std::vector<uint8_t>& f, size_t chunk_pos) {
  const uint32_t len = uint32_t(f[chunk_pos]) << 24 | uint32_t(f[chunk_pos + 1]) << 16 |
                       uint32_t(f[chunk_pos + 2]) << 8 | f[chunk_pos + 3];
  if (chunk_pos + 12 + uint64_t(len) > f.size()) return;  // a mutated length: leave it
  const uint32_t crc = static_cast<uint32_t>(crc32(0, &f[chunk_pos + 4], len + 4));
  for (int i = 0; i < 4; ++i) f[chunk_pos + 8 + len + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
}

// ---- round trips

TEST_F(ImageTest, RoundTripsEveryChannelCountAndOddSizes) {
  const int sizes[][2] = {{1, 1}, {7, 5}, {33, 17}, {3, 100}, {257, 2}};
  uint32_t seed = 1;
  for (int c : {1, 3, 4}) {
    for (const auto& wh : sizes) {
      const Image im = random_image(wh[0], wh[1], c, seed++);
      const std::string p = path("img.png");
      write_png(p, im);
      const Image back = read_png(p);
      EXPECT_EQ(back.width, im.width);
      EXPECT_EQ(back.height, im.height);
      EXPECT_EQ(back.channels, c);
      EXPECT_EQ(back.pixels, im.pixels) << c << " channels, " << wh[0] << "x" << wh[1];
      const Image mem = decode_png(encode_png(im));
      EXPECT_EQ(mem.pixels, im.pixels);
    }
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"img.png"});  // no temporaries left behind
}

TEST_F(ImageTest, OverwritesAtomically) {
  const std::string p = path("out.png");
  write_png(p, random_image(8, 8, 3, 1));
  const Image second = random_image(5, 9, 4, 2);
  write_png(p, second);
  EXPECT_EQ(read_png(p).pixels, second.pixels);
  EXPECT_EQ(listing(), std::vector<std::string>{"out.png"});
}

TEST_F(ImageTest, TextChunksRoundTripAsUtf8) {
  const TextChunks text = {
      {"prompt", "a cat in 東京 at night, 🐱, “quotes”"},
      {"negative_prompt", ""},
      {"seed", "42"},
      {"note", "café crème"},  // Latin-1 only: tEXt
      {"steps", "28"},
      {"long", std::string(5000, 'x') + "é"},
      {"long_cjk", [] {
         std::string s;
         for (int i = 0; i < 1000; ++i) s += "猫";
         return s;
       }()},
      {"fluxrt version", "0.1.0"},
  };
  const std::string p = path("text.png");
  write_png(p, random_image(4, 3, 3, 7), text);
  const auto got = read_png_text(p);
  ASSERT_EQ(got.size(), text.size());
  for (const auto& [k, v] : text) {
    ASSERT_TRUE(got.count(k)) << k;
    EXPECT_EQ(got.at(k), v) << k;
  }
  // Chunk types: tEXt for Latin-1, iTXt for the rest, compressed beyond 1 KiB, all before IDAT.
  std::map<std::string, std::string> type_of;
  bool seen_idat = false;
  for (const auto& [type, data] : chunks(read_bytes(p))) {
    if (type == "IDAT") seen_idat = true;
    if (type != "tEXt" && type != "iTXt" && type != "zTXt") continue;
    EXPECT_FALSE(seen_idat) << "text chunk after IDAT";
    type_of[std::string(reinterpret_cast<const char*>(data.data()))] = type;
  }
  EXPECT_EQ(type_of["prompt"], "iTXt");
  EXPECT_EQ(type_of["seed"], "tEXt");
  EXPECT_EQ(type_of["note"], "tEXt");
  EXPECT_EQ(type_of["long"], "zTXt");
  EXPECT_EQ(type_of["long_cjk"], "iTXt");
}

TEST_F(ImageTest, RejectsUnwritableTextWithoutCreatingAFile) {
  const Image im = random_image(2, 2, 3, 1);
  const std::string p = path("bad.png");
  for (const std::string& key : {std::string(), std::string(" lead"), std::string("trail "),
                                std::string("dou  ble"), std::string(80, 'k'), std::string("a\nb")}) {
    const std::string msg = expect_error(ErrorCode::InvalidArgument, [&] { write_png(p, im, {{key, "v"}}); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
  expect_error(ErrorCode::InvalidArgument, [&] { write_png(p, im, {{"k", "bad \xff utf-8"}}); });
  expect_error(ErrorCode::InvalidArgument, [&] { write_png(p, im, {{"k", std::string("nul\0x", 5)}}); });
  EXPECT_TRUE(listing().empty());
}

TEST_F(ImageTest, RejectsInvalidImages) {
  Image im = random_image(3, 3, 3, 1);
  im.pixels.pop_back();
  expect_error(ErrorCode::InvalidArgument, [&] { write_png(path("a.png"), im); });
  Image two = random_image(3, 3, 2, 1);
  expect_error(ErrorCode::InvalidArgument, [&] { write_png(path("a.png"), two); });
  Image empty;
  expect_error(ErrorCode::InvalidArgument, [&] { encode_png(empty); });
  Image huge;
  huge.width = kMaxImageSide + 1;
  huge.height = 1;
  huge.channels = 1;
  huge.pixels.resize(static_cast<size_t>(huge.width));
  expect_error(ErrorCode::InvalidArgument, [&] { encode_png(huge); });
  EXPECT_TRUE(listing().empty());
}

// ---- reading every kind of PNG

TEST_F(ImageTest, Reads16BitAsRounded8Bit) {
  RawPng r;
  r.width = 3;
  r.height = 2;
  r.bit_depth = 16;
  r.color_type = PNG_COLOR_TYPE_RGB;
  const uint16_t v[2][9] = {{0, 257, 65535, 100 * 257, 200 * 257, 0x1234, 1, 128, 65280},
                            {65535, 0, 7 * 257, 3, 300, 0xFF7F, 77 * 257, 0xFFFE, 2 * 257}};
  for (auto& row16 : v) {
    std::vector<uint8_t> row;
    for (uint16_t s : row16) {
      row.push_back(static_cast<uint8_t>(s >> 8));
      row.push_back(static_cast<uint8_t>(s & 0xFF));
    }
    r.rows.push_back(row);
  }
  const Image im = decode_png(make_png(r));
  ASSERT_EQ(im.channels, 3);
  std::vector<uint8_t> expected;
  for (auto& row16 : v)
    for (uint16_t s : row16) expected.push_back(static_cast<uint8_t>((s * 255u + 32895u) >> 16));
  EXPECT_EQ(im.pixels, expected);
  EXPECT_EQ(im.pixels[1], 1);
  EXPECT_EQ(im.pixels[2], 255);
  EXPECT_EQ(im.pixels[3], 100);

  // 16-bit gray+alpha becomes RGBA.
  RawPng ga;
  ga.width = 2;
  ga.height = 1;
  ga.bit_depth = 16;
  ga.color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  ga.rows = {{0x50, 0x50, 0xFF, 0xFF, 0x00, 0x00, 0x80, 0x80}};
  const Image g = decode_png(make_png(ga));
  ASSERT_EQ(g.channels, 4);
  EXPECT_EQ(g.pixels, (std::vector<uint8_t>{0x50, 0x50, 0x50, 0xFF, 0, 0, 0, 0x80}));
}

TEST_F(ImageTest, ReadsPalettesWithAndWithoutTransparency) {
  RawPng r;
  r.width = 4;
  r.height = 2;
  r.color_type = PNG_COLOR_TYPE_PALETTE;
  r.palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
  r.rows = {{0, 1, 2, 3}, {3, 2, 1, 0}};
  const std::vector<uint8_t> file = make_png(r);
  write_bytes(path("pal.png"), file);
  const Image im = read_png(path("pal.png"));
  ASSERT_EQ(im.channels, 3);
  EXPECT_EQ(im.pixels, (std::vector<uint8_t>{255, 0,  0,  0,  255, 0,  0, 0,   255, 10, 20, 30,
                                             10,  20, 30, 0,  0,   255, 0, 255, 0,   255, 0,  0}));

  // 4-bit palette with tRNS: RGBA, entries beyond the tRNS table are opaque.
  RawPng t = r;
  t.bit_depth = 4;
  t.rows = {{0x01, 0x23}, {0x32, 0x10}};
  t.trns_alpha = {0, 128};
  const Image ta = decode_png(make_png(t));
  ASSERT_EQ(ta.channels, 4);
  EXPECT_EQ(ta.pixels, (std::vector<uint8_t>{255, 0,  0,   0,   0,   255, 0,   128, 0,   0, 255,
                                             255, 10, 20,  30,  255, 10,  20,  30,  255, 0, 0,
                                             255, 255, 0,  255, 0,   128, 255, 0,   0,   0}));
}

TEST_F(ImageTest, ReadsLowBitDepthGrayAndGrayAlpha) {
  RawPng r;
  r.width = 10;
  r.height = 1;
  r.bit_depth = 1;
  r.color_type = PNG_COLOR_TYPE_GRAY;
  r.rows = {{0xA5, 0xC0}};  // 1010 0101 11
  const Image im = decode_png(make_png(r));
  ASSERT_EQ(im.channels, 1);
  EXPECT_EQ(im.pixels, (std::vector<uint8_t>{255, 0, 255, 0, 0, 255, 0, 255, 255, 255}));

  RawPng ga;
  ga.width = 2;
  ga.height = 1;
  ga.color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  ga.rows = {{7, 200, 9, 0}};
  EXPECT_EQ(decode_png(make_png(ga)).pixels, (std::vector<uint8_t>{7, 7, 7, 200, 9, 9, 9, 0}));

  // Gray with a tRNS colour key: RGBA with alpha 0 where the key matches.
  RawPng key;
  key.width = 3;
  key.height = 1;
  key.color_type = PNG_COLOR_TYPE_GRAY;
  key.rows = {{5, 6, 5}};
  key.trns_gray = true;
  key.trns_gray_value = 5;
  EXPECT_EQ(decode_png(make_png(key)).pixels,
            (std::vector<uint8_t>{5, 5, 5, 0, 6, 6, 6, 255, 5, 5, 5, 0}));
}

TEST_F(ImageTest, ReadsInterlacedImages) {
  const Image src = random_image(13, 11, 4, 3);
  RawPng r;
  r.width = 13;
  r.height = 11;
  r.color_type = PNG_COLOR_TYPE_RGBA;
  r.interlace = PNG_INTERLACE_ADAM7;
  for (int y = 0; y < 11; ++y)
    r.rows.emplace_back(src.pixels.begin() + y * 52, src.pixels.begin() + (y + 1) * 52);
  r.late_text = {{"after", "the image data"}};
  const std::vector<uint8_t> file = make_png(r);
  EXPECT_EQ(decode_png(file).pixels, src.pixels);
  const auto text = decode_png_text(file);
  ASSERT_EQ(text.count("after"), 1u);
  EXPECT_EQ(text.at("after"), "the image data");
}

TEST_F(ImageTest, ToRgb) {
  Image gray = random_image(3, 2, 1, 5);
  Image rgb = to_rgb(gray);
  ASSERT_EQ(rgb.channels, 3);
  for (size_t i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.pixels[i * 3 + c], gray.pixels[i]);
  Image rgba = random_image(2, 2, 4, 6);
  rgb = to_rgb(rgba);
  for (size_t i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.pixels[i * 3 + c], rgba.pixels[i * 4 + c]);
  const Image same = random_image(2, 2, 3, 7);
  EXPECT_EQ(to_rgb(same).pixels, same.pixels);
}

// ---- bad input

TEST_F(ImageTest, MissingFileIsNotFound) {
  const std::string p = path("nope.png");
  const std::string msg = expect_error(ErrorCode::NotFound, [&] { read_png(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  expect_error(ErrorCode::NotFound, [&] { read_png_text(p); });
  expect_error(ErrorCode::Io, [&] { read_png(dir_.string()); });  // a directory
}

TEST_F(ImageTest, GarbageIsFormatError) {
  std::mt19937 rng(11);
  std::vector<uint8_t> junk(1000);
  for (auto& b : junk) b = static_cast<uint8_t>(rng());
  write_bytes(path("junk.png"), junk);
  const std::string msg = expect_error(ErrorCode::Format, [&] { read_png(path("junk.png")); });
  EXPECT_NE(msg.find("junk.png"), std::string::npos) << msg;
  expect_error(ErrorCode::Format, [&] { decode_png({}); });
  // A valid signature followed by garbage.
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::copy(sig, sig + 8, junk.begin());
  expect_error(ErrorCode::Format, [&] { decode_png(junk); });
  expect_error(ErrorCode::Format, [&] { decode_png_text(junk); });
}

TEST_F(ImageTest, EveryTruncationIsFormatError) {
  const std::vector<uint8_t> file = encode_png(random_image(9, 7, 3, 9), {{"k", "v"}});
  ASSERT_FALSE(file.empty());
  for (size_t n = 0; n < file.size(); ++n) {
    const std::vector<uint8_t> cut(file.begin(), file.begin() + n);
    expect_error(ErrorCode::Format, [&] { decode_png(cut); });
  }
  write_bytes(path("cut.png"), std::vector<uint8_t>(file.begin(), file.begin() + file.size() / 2));
  const std::string msg = expect_error(ErrorCode::Format, [&] { read_png(path("cut.png")); });
  EXPECT_NE(msg.find("cut.png"), std::string::npos) << msg;
}

TEST_F(ImageTest, CorruptDataIsFormatError) {
  const std::vector<uint8_t> file = encode_png(random_image(16, 16, 3, 4));
  const size_t idat = chunk_offset(file, "IDAT");
  ASSERT_GT(idat, 0u);
  std::vector<uint8_t> bad_crc = file;
  bad_crc[idat + 10] ^= 0x55;
  expect_error(ErrorCode::Format, [&] { decode_png(bad_crc); });
  std::vector<uint8_t> bad_zlib = file;  // valid CRC, invalid zlib header
  bad_zlib[idat + 8] = 0xFF;
  bad_zlib[idat + 9] = 0xFF;
  fix_crc(bad_zlib, idat);
  expect_error(ErrorCode::Format, [&] { decode_png(bad_zlib); });
}

TEST_F(ImageTest, RandomMutationsNeverCrash) {
  const std::vector<uint8_t> file = encode_png(random_image(12, 10, 4, 8), {{"prompt", "猫"}});
  std::mt19937 rng(2024);
  int errors = 0;
  for (int i = 0; i < 400; ++i) {
    std::vector<uint8_t> m = file;
    for (int k = 0; k < 1 + i % 4; ++k) m[rng() % m.size()] = static_cast<uint8_t>(rng());
    if (i % 2) fix_crc(m, chunk_offset(m, "IDAT") ? chunk_offset(m, "IDAT") : 8);
    try {
      decode_png(m);
      decode_png_text(m);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST_F(ImageTest, OversizedHeaderIsRejected) {
  std::vector<uint8_t> file = encode_png(random_image(2, 2, 1, 1));
  const size_t ihdr = chunk_offset(file, "IHDR");
  ASSERT_EQ(ihdr, 8u);
  file[16] = 0;
  file[17] = 0;
  file[18] = 0x4E;  // width 20000
  file[19] = 0x20;
  fix_crc(file, ihdr);
  const std::string msg = expect_error(ErrorCode::Format, [&] { decode_png(file, "big.png"); });
  EXPECT_NE(msg.find("big.png"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
}

TEST_F(ImageTest, WriteFailuresLeaveNoFile) {
  const Image im = random_image(4, 4, 3, 1);
  const std::string missing = path("no_such_dir/out.png");
  const std::string msg = expect_error(ErrorCode::NotFound, [&] { write_png(missing, im); });
  EXPECT_NE(msg.find("out.png"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_TRUE(listing().empty());

  // The rename fails when the target is a directory: the temporary must be gone afterwards.
  fs::create_directories(dir_ / "taken.png");
  expect_error(ErrorCode::Io, [&] { write_png(path("taken.png"), im); });
  EXPECT_EQ(listing(), std::vector<std::string>{"taken.png"});
  EXPECT_TRUE(fs::is_empty(dir_ / "taken.png"));
}

}  // namespace
}  // namespace fluxrt::io
