// libFuzzer target for the image decoders (PNG, JPEG, WebP by magic bytes, EXIF orientation):
// any bytes must either decode into a consistent image within the pixel limit or throw
// fluxrt::Error with a one-line message. A crash, a sanitizer report, libjpeg calling exit(), or
// another exception type escaping is a bug. The limit keeps a header declaring 16384 x 16384
// from tripping the fuzzer's memory limit; the decoders check it before allocating.
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "io/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kMaxPixels = uint64_t(1) << 20;
  try {
    const fluxrt::io::Image im = fluxrt::io::decode_image({data, size}, "fuzz", kMaxPixels);
    if (im.width < 1 || im.height < 1 || uint64_t(im.width) * uint64_t(im.height) > kMaxPixels)
      __builtin_trap();
    if (im.channels != 1 && im.channels != 3 && im.channels != 4) __builtin_trap();
    if (im.pixels.size() != im.row_bytes() * size_t(im.height)) __builtin_trap();
  } catch (const fluxrt::Error& e) {
    if (std::strchr(e.what(), '\n') != nullptr || std::strchr(e.what(), '\r') != nullptr) __builtin_trap();
  }
  return 0;
}
