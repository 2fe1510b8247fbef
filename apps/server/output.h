#pragma once
// The images as a response carries them: encoded in the requested format (PNG with the same text
// chunks `fluxrt generate` writes), and base64 for b64_json.
#include <string>
#include <vector>

#include "fluxrt/engine.h"

namespace fluxrt::server {

struct Encoded {
  std::string bytes;
  std::string content_type;
};

// The output_format values this build encodes.
std::vector<std::string> output_formats();
// `compression` 0-100 as OpenAI's output_compression: the JPEG quality, the WebP quality with
// 100 meaning lossless; ignored for PNG (always lossless).
Encoded encode_output(const GeneratedImage& image, const std::string& format, int compression);

std::string base64(const std::string& bytes);

}  // namespace fluxrt::server
