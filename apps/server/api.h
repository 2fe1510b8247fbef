#pragma once
// The OpenAI images API as fluxrt serves it (docs/server.md): the generation and edit requests
// parsed and checked into a fluxrt::GenerateRequest, and the JSON the responses carry. Nothing
// here touches the network or the engine; every bad field is an HttpError 400 naming it, raised
// before the request is queued.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fluxrt/engine.h"
#include "http_error.h"

namespace fluxrt::server {

// What the checks need to know about the server and the loaded model.
struct ApiLimits {
  int max_width = 2048, max_height = 2048;  // --max-size: this server's, within the model's
  int max_images = 4;                       // n, within the model's images per prompt
  uint64_t max_upload_pixels = 4096ull * 4096ull;
  RequestLimits model;                 // the model's (Engine::limits): bounds and inputs taken
  std::vector<std::string> model_ids;  // what `model` may name
  std::vector<std::string> output_formats{"png", "jpeg", "webp"};  // the encoders built in
  // What a request starts from: the run preset's and flags' fields as `fluxrt generate` uses them
  // (fluxrt::Run::request); the request's own fields go over it, its unset ones stay the model's.
  GenerateRequest defaults;
  // `loras` (names in --lora-dir): refused with a 400 when the server has no LoRA folder.
  bool loras = false;
  int max_loras = 8;
};

// A request field as it came: a JSON value (generations) or a multipart text part (edits).
// Multipart parts are strings, so numbers and booleans there are parsed from text, strictly.
class Fields;

// A LoRA a request names in `loras`: a file of the server's LoRA folder and its strength
// (resolved to a path by LoraDirectory, lora_dir.h).
struct LoraChoice {
  std::string name;
  float strength = 1.0f;
};

struct ImageRequest {
  GenerateRequest request;
  bool edit = false;
  bool stream = false;
  int partial_images = 0;
  bool url = false;  // response_format "url"
  std::string output_format = "png";
  int output_compression = 100;
  std::string user;
  std::vector<LoraChoice> loras;
};

// A multipart part as the edit endpoint sees it.
struct Part {
  std::string name, filename, content_type, content;
};

// POST /v1/images/generations: `body` is the JSON text.
ImageRequest parse_generation(const std::string& body, const ApiLimits& limits);
// POST /v1/images/edits: the parts in order (repeated names allowed: image[]).
ImageRequest parse_edit(const std::vector<Part>& parts, const ApiLimits& limits);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& text);
// Code points in well-formed UTF-8 text.
size_t utf8_length(const std::string& text);
// A value the client sent, made fit to quote in a message (one line of UTF-8): control bytes,
// backslashes, quotes and bytes that are no UTF-8 escaped (\n, \\, \", \xff), cut after
// `max_bytes` with "...".
std::string escape_for_message(const std::string& text, size_t max_bytes = 200);

}  // namespace fluxrt::server
