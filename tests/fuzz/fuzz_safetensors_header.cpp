// libFuzzer target for the safetensors header parser: any bytes must either parse into a header
// that satisfies the format's invariants or throw fluxrt::Error with a one-line message. Anything
// else (a crash, a sanitizer report, another exception type escaping) is a bug.
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fluxrt::io::ParsedHeader h = fluxrt::io::parse_safetensors_header(data, size, "fuzz.safetensors");
    if (h.data_offset + h.data_size != size) __builtin_trap();
    uint64_t end = 0;
    for (const fluxrt::io::TensorInfo& t : h.tensors) {
      if (t.data_begin > t.data_end || t.data_end > h.data_size) __builtin_trap();
      if (t.nbytes() != static_cast<uint64_t>(t.numel()) * fluxrt::dtype_size(t.dtype)) __builtin_trap();
      if (t.nbytes() == 0) continue;
      if (t.data_begin < end) __builtin_trap();  // overlap slipped through
      end = t.data_end;
    }
  } catch (const fluxrt::Error& e) {
    if (std::strchr(e.what(), '\n') != nullptr || std::strchr(e.what(), '\r') != nullptr) __builtin_trap();
  }
  return 0;
}
