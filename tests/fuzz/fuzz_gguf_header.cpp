// libFuzzer target for the GGUF header parser: any bytes must either parse into a header that
// satisfies the format's invariants or throw fluxrt::Error with a one-line message. Anything else
// (a crash, a sanitizer report, another exception type escaping, an allocation sized by the
// input) is a bug.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fluxrt::io::ParsedGguf h = fluxrt::io::parse_gguf_header(data, size, "fuzz.gguf");
    if (h.data_offset > size) __builtin_trap();
    // Only a file without tensors may end before its padding (gguf.h, ParsedGguf::data_offset).
    if (h.data_offset % h.alignment != 0 && !(h.tensors.empty() && h.data_offset == size)) __builtin_trap();
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const fluxrt::io::GgufTensorInfo& t : h.tensors) {
      if (t.offset % h.alignment != 0 || t.offset + t.nbytes > size - h.data_offset) __builtin_trap();
      const fluxrt::QuantTraits& q = fluxrt::quant_traits(t.type);
      const int64_t cols = t.shape[t.shape.size() - 1];
      if (cols % q.block != 0) __builtin_trap();
      if (t.nbytes != static_cast<uint64_t>(t.numel() / cols) * fluxrt::quant_row_bytes(t.type, cols))
        __builtin_trap();
      spans.emplace_back(t.offset, t.offset + t.nbytes);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second) __builtin_trap();  // overlap slipped through
  } catch (const fluxrt::Error& e) {
    if (std::strchr(e.what(), '\n') != nullptr || std::strchr(e.what(), '\r') != nullptr) __builtin_trap();
  }
  return 0;
}
