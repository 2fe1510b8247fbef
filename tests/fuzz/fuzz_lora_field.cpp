// libFuzzer target for the LoRA choices a request names. The input is the images API's `loras`
// field as JSON text: it goes to the server both ways a client sends it, as the value of a JSON
// body's "loras" (generations) and as the text of a form field (edits, which read the text as
// JSON), each with the other fields fixed and valid, so every input reaches the LoRA rules. What
// the parser decides is compared with those rules written out again below (docs/server.md): a list
// of at most max_loras entries, each a name or {"name": ..., "strength": -10..10}. The same text is
// also the CLI's --lora FILE[:STRENGTH] (parse_lora_text, for `fluxrt generate` and `serve`).
// Seeds: tests/data/requests/fuzz/lora_field/.
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fluxrt/run.h"
#include "server_request_checks.h"

namespace {

using nlohmann::json;
using namespace fluxrt;
using namespace fluxrt::fuzz;

// The LoRAs a server with `max_loras` takes from `value`; unset when it must refuse it.
std::optional<std::vector<server::LoraChoice>> expected_loras(const json& value, int max_loras) {
  if (!value.is_array() || value.size() > static_cast<size_t>(max_loras)) return std::nullopt;
  std::vector<server::LoraChoice> out;
  for (const json& item : value) {
    server::LoraChoice c;
    if (item.is_string()) {
      c.name = item.get<std::string>();
    } else if (item.is_object()) {
      for (const auto& kv : item.items())
        if (kv.key() != "name" && kv.key() != "strength") return std::nullopt;
      const auto name = item.find("name");
      if (name == item.end() || !name->is_string()) return std::nullopt;
      c.name = name->get<std::string>();
      if (const auto s = item.find("strength"); s != item.end()) {
        if (!s->is_number() || !std::isfinite(s->get<double>()) || std::fabs(s->get<double>()) > 10)
          return std::nullopt;
        c.strength = static_cast<float>(s->get<double>());
      }
    } else {
      return std::nullopt;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Runs one parse and compares its outcome with `expected` (unset: a refusal naming `loras`).
template <typename Parse>
void check_outcome(Parse parse, const server::ApiLimits& limits, bool edit,
                   const std::optional<std::vector<server::LoraChoice>>& expected) {
  try {
    const server::ImageRequest r = parse();
    check_image_request(r, limits, edit);
    FUZZ_CHECK(expected.has_value() && r.loras.size() == expected->size());
    for (size_t i = 0; i < r.loras.size(); ++i)
      FUZZ_CHECK(r.loras[i].name == (*expected)[i].name && r.loras[i].strength == (*expected)[i].strength);
  } catch (const server::HttpError& e) {
    check_http_refusal(e);
    FUZZ_CHECK(!expected.has_value() && e.param() == "loras");
  }
}

// --lora FILE[:STRENGTH]: the text after the last colon is the strength when all of it is a finite
// number, else part of the file name. Refused only when no file name is left (an empty text or
// ":STRENGTH"); what is taken is a file name and a finite strength, and written back the same way
// (as `fluxrt info` and image metadata show it) it is taken again unchanged.
void check_lora_text(const std::string& text) {
  Lora l;
  try {
    l = parse_lora_text(text);
  } catch (const Error& e) {
    check_library_refusal(e);
    FUZZ_CHECK(text.empty() || text.rfind(':') == 0);
    return;
  }
  FUZZ_CHECK(!l.path.empty() && std::isfinite(l.strength));
  if (l.path == text) {
    FUZZ_CHECK(l.strength == 1.0f);
  } else {
    // Split at the last colon: the strength's text holds none.
    FUZZ_CHECK(text.size() > l.path.size() + 1 && text.starts_with(l.path) && text[l.path.size()] == ':');
    FUZZ_CHECK(text.find(':', l.path.size() + 1) == std::string::npos);
  }
  const Lora again = parse_lora_text(l.path + ":" + fmt::format("{}", l.strength));
  FUZZ_CHECK(again.path == l.path && again.strength == l.strength);
}

// The edits need an image: a genuine 8 x 8 PNG of the image seeds.
const std::string& upload() {
  static const std::string bytes = [] {
    std::ifstream in(std::filesystem::path(FLUXRT_SOURCE_DIR) / "tests/data/images/seeds/rgb.png",
                     std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<server::ApiLimits> limits = [] {
    // klein with 8 LoRAs at most, FLUX.1 with 2, and a server without a LoRA folder: both take
    // uploads, so the edits get past their images.
    std::vector<server::ApiLimits> out;
    for (const FuzzedServer& s : fuzzed_servers())
      if (s.limits.model.max_reference_images > 0 || s.limits.model.init_image) out.push_back(s.limits);
    out.push_back(out.front());
    out.back().loras = false;
    return out;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_lora_text(text);
  const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  for (const server::ApiLimits& l : limits) {
    // A JSON body: null is a field not given.
    if (!value.is_discarded()) {
      std::optional<std::vector<server::LoraChoice>> expected;
      if (value.is_null()) expected.emplace();
      if (!value.is_null() && l.loras) expected = expected_loras(value, l.max_loras);
      const std::string body = json{{"prompt", "a cat"}, {"loras", value}}.dump();
      check_outcome([&] { return server::parse_generation(body, l); }, l, false, expected);
    }
    // A form field: its text must be JSON, and "null" there is a value (not a list).
    std::optional<std::vector<server::LoraChoice>> expected;
    if (!value.is_discarded() && l.loras) expected = expected_loras(value, l.max_loras);
    const std::vector<server::Part> parts = {
        {"prompt", "", "", "a cat"}, {"loras", "", "", text}, {"image", "cat.png", "image/png", upload()}};
    check_outcome([&] { return server::parse_edit(parts, l); }, l, true, expected);
  }
  return 0;
}
