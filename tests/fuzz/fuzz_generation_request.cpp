// libFuzzer target for POST /v1/images/generations: the input is the JSON body, parsed by
// server::parse_generation for each server of server_request_checks.h (klein and FLUX.1 limits with
// their presets' defaults and LoRAs on, and a server at its limits' edges). Besides the checks every
// request parser gets (server_request_checks.h), what the body states is what the request holds:
// the prompt, each field of the table given as a JSON number or string, and the preset's value
// for each field the body leaves out. Seeds: tests/data/requests/fuzz/generation_request/.
#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server_request_checks.h"

namespace {

using nlohmann::json;
using namespace fluxrt;
using namespace fluxrt::fuzz;

// The body's value for each field it states, the preset's for each it leaves out.
void check_fields_taken(const json& body, const server::ImageRequest& r, const server::ApiLimits& l) {
  const GenerateRequest& q = r.request;
  FUZZ_CHECK(q.prompts[0] == body["prompt"].get<std::string>());
  for (const RequestField& field : request_fields()) {
    const std::string key = field.key;
    const bool given = body.contains(field.api) && !body[field.api].is_null();
    if (!given) {
      if (key != "seed" && key != "size")
        FUZZ_CHECK(request_field_text(q, field) == request_field_text(l.defaults, field));
      continue;
    }
    const json& v = body[field.api];
    if (field.type == FieldType::Integer && v.is_number_integer())
      FUZZ_CHECK(request_field_text(q, field) == std::to_string(v.get<int64_t>()));
    // Numbers are kept as floats: the body's value rounded once, as text the shortest that reads back.
    if (field.type == FieldType::Number && v.is_number())
      FUZZ_CHECK(request_field_text(q, field) == fmt::format("{}", static_cast<float>(v.get<double>())));
    if (key == "negative_prompt") FUZZ_CHECK(q.negative_prompt == v.get<std::string>());
    if (key == "seed" && v.is_number_integer() && v.get<int64_t>() >= 0)
      FUZZ_CHECK(q.seed == static_cast<uint64_t>(v.get<int64_t>()));
  }
  // The size: the body's, else (absent or "auto") the preset's.
  const bool sized = body.contains("size") && body["size"].is_string() && body["size"] != "auto";
  if (!sized) FUZZ_CHECK(q.width == l.defaults.width && q.height == l.defaults.height);
  if (sized) FUZZ_CHECK(q.width.has_value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<FuzzedServer> servers = fuzzed_servers();
  const std::string body(reinterpret_cast<const char*>(data), size);
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  for (const FuzzedServer& s : servers) {
    try {
      const server::ImageRequest r = server::parse_generation(body, s.limits);
      check_image_request(r, s.limits, /*edit=*/false);
      FUZZ_CHECK(parsed.is_object());
      check_fields_taken(parsed, r, s.limits);
    } catch (const server::HttpError& e) {
      check_http_refusal(e);
      // A refusal about one field names a field the body has, or the prompt it lacks.
      if (!e.param().empty() && e.param() != "prompt") FUZZ_CHECK(parsed.contains(e.param()));
    } catch (const Error& e) {
      check_library_refusal(e);
    }
  }
  return 0;
}
