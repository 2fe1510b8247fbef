// libFuzzer target for the request field table (fluxrt/request_fields.h): set_request_field, which
// every surface calls (CLI flags and preset values as text, JSON numbers and strings from the server,
// Python keywords), on every field with random RequestLimits, and request_field_bounds /
// request_field_text on the result. A value is either set within the limits or refused with a
// one-line InvalidArgument naming the field; what request_field_text writes back (what metadata
// and presets hold) is taken again unchanged.
//
// Input layout (seeds: tests/data/requests/fuzz/request_fields/, written by make_seeds.py):
//   byte 0      the field: its index in request_fields(), modulo their number
//   byte 1      bits 0-1: the value's type: 0 and 3 text, 1 a JSON integer, 2 a JSON number;
//               bit 2: the limits below (else RequestLimits{}, the bounds every model has)
//   bytes 2-15  the limits, little-endian: max_steps, max_guidance (whole: models have 100),
//               max_sequence_length, max_side, max_images_per_prompt, max_prompt_chars (16 bits
//               each), size_multiple (8 bits), one byte unused
//   the rest    the value: the text itself, or 8 bytes of an int64 / a double
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "fluxrt/error.h"
#include "fluxrt/request_fields.h"
#include "fuzz_check.h"

namespace {

using namespace fluxrt;
using namespace fluxrt::fuzz;

constexpr size_t kHeaderBytes = 16;

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

RequestLimits read_limits(const uint8_t* p) {
  RequestLimits l;
  l.max_steps = u16(p);
  l.max_guidance = u16(p + 2);
  l.max_sequence_length = u16(p + 4);
  l.max_side = u16(p + 6);
  l.max_images_per_prompt = u16(p + 8);
  l.max_prompt_chars = u16(p + 10);
  l.size_multiple = p[12];
  return l;
}

template <typename T>
bool within(const std::optional<T>& v, double lo, double hi) {
  return v && std::isfinite(static_cast<double>(*v)) && *v >= lo && *v <= hi;
}

// The field `key` holds a value within `l` after it was set.
void check_set(const GenerateRequest& r, const std::string& key, const RequestLimits& l) {
  if (key == "negative_prompt") {
    FUZZ_CHECK(r.negative_prompt && is_valid_utf8(*r.negative_prompt));
    FUZZ_CHECK(r.negative_prompt->find('\0') == std::string::npos);
    FUZZ_CHECK(code_points(*r.negative_prompt) <= static_cast<size_t>(l.max_prompt_chars));
  } else if (key == "size") {
    FUZZ_CHECK(r.width.has_value() == r.height.has_value());
    if (r.width) {  // unset: "auto"
      FUZZ_CHECK(*r.width >= 1 && *r.width <= l.max_side && *r.height >= 1 && *r.height <= l.max_side);
      FUZZ_CHECK(l.size_multiple <= 1 ||
                 (*r.width % l.size_multiple == 0 && *r.height % l.size_multiple == 0));
    }
  } else if (key == "steps") {
    FUZZ_CHECK(within(r.steps, 1, l.max_steps));
  } else if (key == "guidance") {
    FUZZ_CHECK(within(r.guidance, 0, l.max_guidance));
  } else if (key == "true_cfg") {
    FUZZ_CHECK(within(r.true_cfg, 0, l.max_guidance));
  } else if (key == "strength") {
    FUZZ_CHECK(within(r.strength, 0, 1) && *r.strength > 0);
  } else if (key == "batch") {
    FUZZ_CHECK(r.images_per_prompt >= 1 && r.images_per_prompt <= l.max_images_per_prompt);
  } else if (key == "max_sequence_length") {
    FUZZ_CHECK(within(r.max_sequence_length, 1, l.max_sequence_length));
  }
}

void check_refusal(const Error& e, const RequestField& field, const std::string& name) {
  if (!is_one_line_message(e.what())) std::fprintf(stderr, "fuzz: refusal: %s\n", e.what());
  FUZZ_CHECK(e.code() == ErrorCode::InvalidArgument);
  FUZZ_CHECK(e.field() == field.key);
  FUZZ_CHECK(is_one_line_message(e.what()));
  FUZZ_CHECK(std::string_view(e.what()).starts_with(name));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return 0;
  const std::vector<RequestField>& fields = request_fields();
  const RequestField& field = fields[data[0] % fields.size()];
  const int type = data[1] & 3;
  const RequestLimits limits = (data[1] & 4) ? read_limits(data + 2) : RequestLimits{};
  const uint8_t* rest = data + kHeaderBytes;
  const size_t rest_size = size - kHeaderBytes;

  FieldValue value = std::string(reinterpret_cast<const char*>(rest), rest_size);
  if ((type == 1 || type == 2) && rest_size >= 8) {
    if (type == 1) {
      int64_t i = 0;
      std::memcpy(&i, rest, 8);
      value = i;
    } else {
      double d = 0;
      std::memcpy(&d, rest, 8);
      value = d;
    }
  }

  FUZZ_CHECK(is_valid_utf8(request_field_bounds(field, limits)));
  const std::string name = std::string("'") + field.api + "'";
  GenerateRequest request;
  bool random = false;
  try {
    random = set_request_field(request, field, value, limits, name);
  } catch (const Error& e) {
    check_refusal(e, field, name);
    return 0;
  }
  const std::string key = field.key;
  check_set(request, key, limits);
  // A random seed is asked for by name (or -1), and only for the seed.
  const auto* text = std::get_if<std::string>(&value);
  const bool asked_random = text ? *text == "random"
                                 : (std::holds_alternative<int64_t>(value) ? std::get<int64_t>(value) == -1
                                                                           : std::get<double>(value) == -1.0);
  FUZZ_CHECK(random == (key == "seed" && asked_random));

  // What request_field_text writes (a preset, an image's metadata) is taken back as it was.
  const std::string written = request_field_text(request, field);
  if (written.empty()) return 0;  // "auto"
  GenerateRequest again;
  try {
    set_request_field(again, field, written, limits, name);
  } catch (const Error& e) {
    std::fprintf(stderr, "fuzz: '%s' written back as '%s' was refused: %s\n", field.key, written.c_str(),
                 e.what());
    invariant_failed("request_field_text wrote a value set_request_field refuses");
  }
  FUZZ_CHECK(request_field_text(again, field) == written);
  return 0;
}
