// libFuzzer target for POST /v1/images/edits: the input is a list of multipart parts, parsed by
// server::parse_edit for each server of server_request_checks.h (klein: up to 4 reference images;
// FLUX.1: one init image; a model that takes none). Uploads are real image bytes (the seeds hold
// tiny PNG, JPEG and WebP files), decoded only when their header is within max_upload_pixels,
// which the fuzzers keep small: an image over it in the request is a header the probe misread.
//
// Input layout: parts separated by the line "--" ("\n--\n"); each part is a header line
//   name [TAB filename [TAB content-type]]
// then its content (any bytes, up to the next separator). A part without a filename is a form
// field, as httplib hands it over. Seeds: tests/data/requests/fuzz/edit_request/ (written by make_seeds.py).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server_request_checks.h"

namespace {

using namespace fluxrt;
using namespace fluxrt::fuzz;

constexpr std::string_view kSeparator = "\n--\n";
constexpr size_t kMostParts = 32;  // a form's parts, bounded so that inputs stay fast

server::Part read_part(std::string_view chunk) {
  server::Part p;
  const size_t eol = chunk.find('\n');
  const std::string_view header = chunk.substr(0, eol);
  if (eol != std::string_view::npos) p.content = std::string(chunk.substr(eol + 1));
  const size_t tab1 = header.find('\t');
  p.name = std::string(header.substr(0, tab1));
  if (tab1 == std::string_view::npos) return p;
  const size_t tab2 = header.find('\t', tab1 + 1);
  p.filename = std::string(header.substr(tab1 + 1, tab2 - (tab1 + 1)));
  if (tab2 != std::string_view::npos) p.content_type = std::string(header.substr(tab2 + 1));
  return p;
}

std::vector<server::Part> read_parts(std::string_view input) {
  std::vector<server::Part> parts;
  while (!input.empty() && parts.size() < kMostParts) {
    const size_t end = input.find(kSeparator);
    parts.push_back(read_part(input.substr(0, end)));
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + kSeparator.size());
  }
  return parts;
}

const std::string* form_field(const std::vector<server::Part>& parts, const std::string& name) {
  for (const server::Part& p : parts)
    if (p.name == name && p.filename.empty()) return &p.content;
  return nullptr;
}

// What the parts state is what the request holds: the prompt, one image per image part, the
// size only when the form gives one (else the first image's, decided by the engine).
void check_parts_taken(const std::vector<server::Part>& parts, const server::ImageRequest& r) {
  const GenerateRequest& q = r.request;
  FUZZ_CHECK(q.prompts[0] == *form_field(parts, "prompt"));
  size_t images = 0;
  for (const server::Part& p : parts)
    images += (p.name == "image" || p.name == "image[]") && !(p.filename.empty() && p.content.empty());
  FUZZ_CHECK(q.reference_images.size() + (q.init_image ? 1 : 0) == images);
  const std::string* size = form_field(parts, "size");
  if (!size || *size == "auto") FUZZ_CHECK(!q.width && !q.height);
  if (size && *size != "auto") FUZZ_CHECK(q.width.has_value());
}

bool has_part(const std::vector<server::Part>& parts, const std::string& name) {
  for (const server::Part& p : parts)
    if (p.name == name) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<FuzzedServer> servers = fuzzed_servers();
  const std::vector<server::Part> parts = read_parts({reinterpret_cast<const char*>(data), size});
  for (const FuzzedServer& s : servers) {
    try {
      const server::ImageRequest r = server::parse_edit(parts, s.limits);
      check_image_request(r, s.limits, /*edit=*/true);
      check_parts_taken(parts, r);
    } catch (const server::HttpError& e) {
      check_http_refusal(e);
      // A refusal about one field names a part the form has, or the prompt or image it lacks.
      if (!e.param().empty() && e.param() != "prompt" && e.param() != "image")
        FUZZ_CHECK(has_part(parts, e.param()));
    } catch (const Error& e) {
      check_library_refusal(e);
    }
  }
  return 0;
}
