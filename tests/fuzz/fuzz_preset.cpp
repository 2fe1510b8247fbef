// libFuzzer target for run presets: the input is a preset's YAML text, parsed by
// frontend::parse_preset. It either returns a preset whose values are what the CLI, the server and
// Python may run with (every request field accepted by the field table with the bounds every model
// has, non-empty names and paths, the enumerated choices), or refuses with a one-line fluxrt::Error:
// Format for text that is no YAML map, InvalidArgument for a bad key or value. A YAML exception,
// a crash or a sanitizer report is a bug. Seeds: configs/*.yaml and tests/data/requests/fuzz/preset/.
#include <cmath>
#include <cstdint>
#include <string>

#include "fluxrt/error.h"
#include "fluxrt/request_fields.h"
#include "frontend/presets.h"
#include "fuzz_check.h"

namespace {

using namespace fluxrt;
using namespace fluxrt::fuzz;

void check_preset(const frontend::Preset& p) {
  for (const auto& [key, text] : p.fields) {
    const RequestField* field = find_request_field(key);
    FUZZ_CHECK(field != nullptr && p.where.count(key) == 1);
    GenerateRequest scratch;
    try {
      set_request_field(scratch, *field, text, request_limits(), key);
    } catch (const Error&) {
      invariant_failed("a preset holds a field value the field table refuses");
    }
  }
  if (p.prompts) FUZZ_CHECK(!p.prompts->empty());
  if (p.dtype) FUZZ_CHECK(*p.dtype == "bf16" || *p.dtype == "f32" || *p.dtype == "int8");
  if (p.vae_tiling) FUZZ_CHECK(*p.vae_tiling == "auto" || *p.vae_tiling == "on" || *p.vae_tiling == "off");
  if (p.threads) FUZZ_CHECK(*p.threads >= 0 && *p.threads <= 4096);
  for (const std::optional<std::string>* s :
       {&p.model, &p.device, &p.out_dir, &p.filename_pattern, &p.init_image})
    if (*s) FUZZ_CHECK(!(*s)->empty());
  if (p.loras)
    for (const Lora& l : *p.loras) FUZZ_CHECK(!l.path.empty() && std::isfinite(l.strength));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    check_preset(frontend::parse_preset(text, "fuzz.yaml"));
  } catch (const Error& e) {
    if (!is_one_line_message(e.what())) std::fprintf(stderr, "fuzz: refusal: %s\n", e.what());
    FUZZ_CHECK(e.code() == ErrorCode::InvalidArgument || e.code() == ErrorCode::Format);
    FUZZ_CHECK(is_one_line_message(e.what()));
  }
  return 0;
}
