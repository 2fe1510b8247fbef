#pragma once
// What the fuzzers of the server's request parsers (fuzz_generation_request, fuzz_edit_request,
// fuzz_lora_field) share: the servers they parse for, and the checks on what comes out.
//
// A parse either returns a request that satisfies the limits it was parsed with, or refuses with
// server::HttpError (a 4xx naming a real parameter, or none) or fluxrt::Error (InvalidArgument);
// either way the message is one line. Anything else escaping (a nlohmann::json exception, a
// std::out_of_range) is a bug, and so is a crash or a sanitizer report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "api.h"
#include "fluxrt/request_fields.h"
#include "fuzz_check.h"

namespace fluxrt::fuzz {

// The servers every input is parsed for: `fluxrt serve` with each family's limits and preset.
struct FuzzedServer {
  const char* name;
  server::ApiLimits limits;
};

// Uploads are decoded only after their header's size passes max_upload_pixels; the fuzzers use a
// small limit (the default is 4096 x 4096) so that a header the probe misreads shows up as an image
// over it rather than as the fuzzer's memory limit.
inline constexpr uint64_t kFuzzUploadPixels = 128 * 128;

inline std::vector<FuzzedServer> fuzzed_servers() {
  std::vector<FuzzedServer> out;
  {
    // FLUX.2 klein 4B distilled with configs/klein-4b.yaml and a LoRA folder.
    server::ApiLimits l;
    l.max_upload_pixels = kFuzzUploadPixels;
    l.model.size_multiple = 16;
    l.model.max_sequence_length = 4096;
    l.model.max_reference_images = 4;
    l.model_ids = {"black-forest-labs/FLUX.2-klein-4B", "klein-4b"};
    l.defaults.width = l.defaults.height = 1024;
    l.defaults.steps = 4;
    l.defaults.max_sequence_length = 512;
    l.loras = true;
    out.push_back({"klein-4b", l});
  }
  {
    // FLUX.1 dev with configs/flux1-dev.yaml, --max-size 1024x1024 and two LoRAs at most.
    server::ApiLimits l;
    l.max_width = l.max_height = 1024;
    l.max_upload_pixels = kFuzzUploadPixels;
    l.model.size_multiple = 16;
    l.model.max_sequence_length = 512;
    l.model.init_image = true;
    l.model.true_cfg = true;
    l.model_ids = {"black-forest-labs/FLUX.1-dev"};
    l.defaults.width = l.defaults.height = 1024;
    l.defaults.steps = 50;
    l.defaults.guidance = 3.5f;
    l.defaults.max_sequence_length = 512;
    l.loras = true;
    l.max_loras = 2;
    out.push_back({"flux1-dev", l});
  }
  {
    // Every limit near its edge, so that short inputs reach each bound: the demo model's size
    // multiple of 8, a small --max-size and --max-images 1, a 77-character prompt limit, a family
    // that takes no images, no LoRA folder, a build with the PNG encoder only; no preset.
    server::ApiLimits l;
    l.max_width = 256;
    l.max_height = 128;
    l.max_images = 1;
    l.max_upload_pixels = kFuzzUploadPixels;
    l.model.size_multiple = 8;
    l.model.max_steps = 50;
    l.model.max_guidance = 10;
    l.model.max_sequence_length = 77;
    l.model.max_prompt_chars = 77;
    l.model_ids = {"demo"};
    l.output_formats = {"png"};
    out.push_back({"tight", l});
  }
  return out;
}

// The parameters a refusal may name: the table's fields by their API names and the parser's own
// ("image[]" is the part name some clients send for several images).
inline bool is_api_param(const std::string& param) {
  static const char* const kOwn[] = {
      "prompt",  "model",  "response_format", "output_format", "output_compression",
      "user",    "stream", "partial_images",  "loras",         "image",
      "image[]", "mask"};
  for (const char* p : kOwn)
    if (param == p) return true;
  return find_request_field_by_api(param) != nullptr;
}

inline void check_http_refusal(const server::HttpError& e) {
  if (!is_one_line_message(e.what()) || !(e.param().empty() || is_api_param(e.param())))
    std::fprintf(stderr, "fuzz: refusal %d param '%s': %s\n", e.status(), e.param().c_str(), e.what());
  FUZZ_CHECK(e.status() >= 400 && e.status() < 500);
  FUZZ_CHECK(is_one_line_message(e.what()));
  FUZZ_CHECK(e.param().empty() || is_api_param(e.param()));
  FUZZ_CHECK(!e.code().empty());
}

inline void check_library_refusal(const Error& e) {
  if (!is_one_line_message(e.what())) std::fprintf(stderr, "fuzz: refusal: %s\n", e.what());
  FUZZ_CHECK(e.code() == ErrorCode::InvalidArgument);
  FUZZ_CHECK(is_one_line_message(e.what()));
}

// A prompt or negative prompt the server accepted.
inline bool is_acceptable_text(const std::string& text, const RequestLimits& model) {
  return is_valid_utf8(text) && text.find('\0') == std::string::npos &&
         code_points(text) <= static_cast<size_t>(model.max_prompt_chars);
}

// An optional field is unset or a finite value within [lo, hi].
template <typename T>
bool within(const std::optional<T>& v, double lo, double hi) {
  return !v || (std::isfinite(static_cast<double>(*v)) && *v >= lo && *v <= hi);
}

// A request the parser returned satisfies the limits it was parsed with.
inline void check_image_request(const server::ImageRequest& r, const server::ApiLimits& l, bool edit) {
  const GenerateRequest& q = r.request;
  const RequestLimits& m = l.model;
  FUZZ_CHECK(r.edit == edit);
  FUZZ_CHECK(q.prompts.size() == 1 && is_acceptable_text(q.prompts[0], m));
  FUZZ_CHECK(!q.negative_prompt || is_acceptable_text(*q.negative_prompt, m));

  FUZZ_CHECK(q.width.has_value() == q.height.has_value());
  if (q.width) {
    FUZZ_CHECK(*q.width >= 1 && *q.width <= std::min(l.max_width, m.max_side));
    FUZZ_CHECK(*q.height >= 1 && *q.height <= std::min(l.max_height, m.max_side));
    FUZZ_CHECK(m.size_multiple <= 1 || (*q.width % m.size_multiple == 0 && *q.height % m.size_multiple == 0));
  }
  FUZZ_CHECK(within(q.steps, 1, m.max_steps));
  FUZZ_CHECK(within(q.guidance, 0, m.max_guidance));
  FUZZ_CHECK(within(q.true_cfg, 0, m.max_guidance));
  FUZZ_CHECK(!q.strength || (std::isfinite(*q.strength) && *q.strength > 0 && *q.strength <= 1));
  FUZZ_CHECK(within(q.max_sequence_length, 1, m.max_sequence_length));
  FUZZ_CHECK(q.images_per_prompt >= 1 &&
             q.images_per_prompt <= std::min(l.max_images, m.max_images_per_prompt));

  // Per-request LoRAs travel in ImageRequest::loras (names in the server's folder), never as paths.
  FUZZ_CHECK(q.loras.empty());
  FUZZ_CHECK(r.loras.empty() || l.loras);
  FUZZ_CHECK(static_cast<int>(r.loras.size()) <= l.max_loras);
  for (const server::LoraChoice& c : r.loras)
    FUZZ_CHECK(is_valid_utf8(c.name) && std::isfinite(c.strength) && std::fabs(c.strength) <= 10);

  FUZZ_CHECK(std::find(l.output_formats.begin(), l.output_formats.end(), r.output_format) !=
             l.output_formats.end());
  FUZZ_CHECK(r.output_compression >= 0 && r.output_compression <= 100);
  FUZZ_CHECK(r.partial_images >= 0 && r.partial_images <= 3);

  FUZZ_CHECK(q.reference_images.size() == q.reference_image_names.size());
  FUZZ_CHECK(static_cast<int>(q.reference_images.size()) <= m.max_reference_images);
  FUZZ_CHECK(!q.init_image || m.init_image);
  if (!edit) FUZZ_CHECK(q.reference_images.empty() && !q.init_image);
  if (edit) FUZZ_CHECK(!q.reference_images.empty() || q.init_image);
  auto check_image = [&](const Image& im) {
    FUZZ_CHECK(im.width >= 1 && im.height >= 1);
    FUZZ_CHECK(static_cast<uint64_t>(im.width) * static_cast<uint64_t>(im.height) <= l.max_upload_pixels);
    FUZZ_CHECK(im.rgb.size() == static_cast<size_t>(im.width) * static_cast<size_t>(im.height) * 3);
  };
  for (const Image& im : q.reference_images) check_image(im);
  if (q.init_image) check_image(*q.init_image);
}

}  // namespace fluxrt::fuzz
