// Request parsing for the images API. The rules (docs/server.md): `prompt` is required; unknown
// fields are ignored (the OpenAI SDK's extra_body puts seed, num_inference_steps, ... at the top
// level, as SGLang and vLLM-Omni read them); a known field with a wrong type or value is a 400
// naming it. Numbers are range-checked here, before the engine sees them, so that a huge or
// negative value is a clear message and never an allocation.
#include "api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "fluxrt/image.h"
#include "fluxrt/request_fields.h"
#include "image_probe.h"

namespace fluxrt::server {

using nlohmann::json;

class Fields {
 public:
  explicit Fields(const json* object) : json_(object) {}
  explicit Fields(const std::vector<Part>* parts) : parts_(parts) {}

  bool has(const std::string& name) const {
    if (json_) return json_->contains(name) && !(*json_)[name].is_null();
    return text(name) != nullptr;
  }

  std::optional<std::string> string(const std::string& name) const {
    if (!has(name)) return std::nullopt;
    if (json_) {
      const json& v = (*json_)[name];
      if (!v.is_string()) throw bad(name, "must be a string");
      return v.get<std::string>();
    }
    return *text(name);
  }

  std::optional<int64_t> integer(const std::string& name, int64_t lo, int64_t hi) const {
    if (!has(name)) return std::nullopt;
    int64_t value = 0;
    if (json_) {
      const json& v = (*json_)[name];
      if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) throw range(name, lo, hi);
        value = int64_t(v.get<uint64_t>());
      } else if (v.is_number_integer()) {
        value = v.get<int64_t>();
      } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
                 v.get<double>() == std::floor(v.get<double>())) {
        const double d = v.get<double>();
        if (d < double(lo) || d > double(hi)) throw range(name, lo, hi);
        value = int64_t(d);
      } else {
        throw bad(name, "must be an integer");
      }
    } else {
      const std::string& s = *text(name);
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      if (ec == std::errc::result_out_of_range) throw range(name, lo, hi);
      if (ec != std::errc() || end != s.data() + s.size() || s.empty()) throw bad(name, "must be an integer");
    }
    if (value < lo || value > hi) throw range(name, lo, hi);
    return value;
  }

  std::optional<double> number(const std::string& name, double lo, double hi) const {
    if (!has(name)) return std::nullopt;
    double value = 0;
    if (json_) {
      const json& v = (*json_)[name];
      if (!v.is_number()) throw bad(name, "must be a number");
      value = v.get<double>();
    } else {
      const std::string& s = *text(name);
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      if (ec != std::errc() || end != s.data() + s.size() || s.empty()) throw bad(name, "must be a number");
    }
    if (!std::isfinite(value) || value < lo || value > hi)
      throw bad(name, "must be a number from " + format(lo) + " to " + format(hi));
    return value;
  }

  // A JSON value: the value itself (generations) or a text part holding JSON text (edits).
  std::optional<json> value(const std::string& name) const {
    if (!has(name)) return std::nullopt;
    if (json_) return (*json_)[name];
    json v = json::parse(*text(name), nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) throw bad(name, "must be JSON text in a form field");
    return v;
  }

  std::optional<bool> boolean(const std::string& name) const {
    if (!has(name)) return std::nullopt;
    if (json_) {
      const json& v = (*json_)[name];
      if (!v.is_boolean()) throw bad(name, "must be true or false");
      return v.get<bool>();
    }
    const std::string& s = *text(name);
    if (s == "true" || s == "1") return true;
    if (s == "false" || s == "0") return false;
    throw bad(name, "must be true or false");
  }

  // A request field's value as the field table takes it (fluxrt/request_fields.h): JSON strings and
  // numbers, or a form field's text; anything else is a 400 naming the field.
  FieldValue field_value(const std::string& name, FieldType type) const {
    if (!json_) return *text(name);
    const json& v = (*json_)[name];
    // JSON says its types: a number given as a string is refused, as a form field's text is not.
    const bool numeric = type == FieldType::Integer || type == FieldType::Number || type == FieldType::Seed;
    if (v.is_string() && numeric) throw bad(name, "must be a number, not a string");
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::to_string(v.get<uint64_t>());  // a seed past int64, read in full from text
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) return v.get<double>();
    throw bad(name, "must be a string or a number");
  }

  static HttpError bad(const std::string& name, const std::string& what) {
    return HttpError(400, "'" + name + "' " + what, name, "invalid_value");
  }

 private:
  static std::string format(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  static HttpError range(const std::string& name, int64_t lo, int64_t hi) {
    return bad(name, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  const std::string* text(const std::string& name) const {
    for (const Part& p : *parts_)
      if (p.name == name && p.filename.empty()) return &p.content;
    return nullptr;
  }

  const json* json_ = nullptr;
  const std::vector<Part>* parts_ = nullptr;
};

bool valid_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

size_t utf8_length(const std::string& text) {
  return size_t(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string escape_for_message(const std::string& text, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (out.size() >= max_bytes) return out + "...";
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t length = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (length > 1 && valid_utf8(text.substr(i, length))) {  // a whole character passes
      out.append(text, i, length);
      i += length;
      continue;
    }
    if (c == '\\' || c == '"') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
    ++i;
  }
  return out;
}

namespace {

std::string checked_text(const Fields& f, const std::string& name, const ApiLimits& limits) {
  std::string s = *f.string(name);
  if (!valid_utf8(s)) throw Fields::bad(name, "is not valid UTF-8");
  if (utf8_length(s) > size_t(limits.model.max_prompt_chars))
    throw Fields::bad(name,
                      "is longer than " + std::to_string(limits.model.max_prompt_chars) + " characters");
  if (s.find('\0') != std::string::npos) throw Fields::bad(name, "contains a NUL character");
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The request fields of the field table by their API names (num_inference_steps, guidance_scale,
// ...), set over the defaults with the model's bounds; n within this server's --max-images. A seed
// not given (or -1) is drawn at random, as the OpenAI API has none.
void parse_request_fields(const Fields& f, const ApiLimits& limits, GenerateRequest& request) {
  RequestLimits bounds = limits.model;
  bounds.max_images_per_prompt = std::min(bounds.max_images_per_prompt, limits.max_images);
  bool seed_given = false;
  for (const RequestField& field : request_fields()) {
    if (!f.has(field.api)) continue;
    const FieldValue value = f.field_value(field.api, field.type);
    // "auto": the preset's size, else the model's (edits: the first image's).
    if (field.type == FieldType::Size && value == FieldValue(std::string("auto"))) continue;
    seed_given = seed_given || field.type == FieldType::Seed;
    try {
      set_request_field(request, field, value, bounds, std::string("'") + field.api + "'");
    } catch (const Error& e) {
      throw HttpError(400, e.what(), field.api, "invalid_value");
    }
  }
  if (!seed_given) set_request_field(request, *find_request_field("seed"), int64_t{-1}, bounds, "seed");
  if (f.has("size") && request.width &&
      (*request.width > limits.max_width || *request.height > limits.max_height))
    throw Fields::bad("size", "is over this server's limit of " + std::to_string(limits.max_width) + "x" +
                                  std::to_string(limits.max_height) + " (got " + *f.string("size") + ")");
}

// `loras`: [{"name": "style", "strength": 0.8}, "other", ...]; a bare name has strength 1.
std::vector<LoraChoice> parse_loras(const Fields& f, const ApiLimits& limits) {
  const std::optional<json> v = f.value("loras");
  if (!v) return {};
  if (!limits.loras)
    throw HttpError(400, "'loras': this server offers no LoRAs (it was started without --lora-dir)", "loras",
                    "unsupported_parameter");
  const char* shape = "must be a list of {\"name\": \"...\", \"strength\": 1.0} objects or names";
  if (!v->is_array()) throw Fields::bad("loras", shape);
  if (int(v->size()) > limits.max_loras)
    throw Fields::bad("loras", "takes at most " + std::to_string(limits.max_loras) + " LoRAs (got " +
                                   std::to_string(v->size()) + ")");
  std::vector<LoraChoice> out;
  for (const json& item : *v) {
    LoraChoice c;
    if (item.is_string()) {
      c.name = item.get<std::string>();
    } else if (item.is_object()) {
      for (const auto& kv : item.items())
        if (kv.key() != "name" && kv.key() != "strength")
          throw Fields::bad("loras", "entries take \"name\" and \"strength\" (got \"" +
                                         escape_for_message(kv.key(), 40) + "\")");
      if (!item.contains("name") || !item["name"].is_string()) throw Fields::bad("loras", shape);
      c.name = item["name"].get<std::string>();
      if (item.contains("strength")) {
        const json& s = item["strength"];
        if (!s.is_number() || !std::isfinite(s.get<double>()) || std::fabs(s.get<double>()) > 10)
          throw Fields::bad("loras", "strengths must be numbers from -10 to 10");
        c.strength = float(s.get<double>());
      }
    } else {
      throw Fields::bad("loras", shape);
    }
    if (!valid_utf8(c.name)) throw Fields::bad("loras", "names must be UTF-8");
    out.push_back(std::move(c));
  }
  return out;
}

// The fields both endpoints share.
ImageRequest parse_common(const Fields& f, const ApiLimits& limits, bool edit) {
  ImageRequest r;
  r.edit = edit;
  if (!f.has("prompt")) throw HttpError(400, "'prompt' is required", "prompt", "missing_required_parameter");
  // The preset's settings under the request's own; its prompts, images and seed are not the
  // request's.
  r.request = limits.defaults;
  r.request.prompts = {checked_text(f, "prompt", limits)};
  r.request.reference_images.clear();
  r.request.reference_image_names.clear();
  r.request.init_image.reset();
  r.request.init_image_name.clear();
  r.request.loras.clear();
  if (auto model = f.string("model")) {
    const auto& ids = limits.model_ids;
    if (std::find(ids.begin(), ids.end(), *model) == ids.end())
      throw HttpError(
          400, "unknown model '" + escape_for_message(*model, 100) + "'; this server runs " + join(ids),
          "model", "model_not_found");
  }
  parse_request_fields(f, limits, r.request);
  if (auto format = f.string("response_format")) {
    if (*format != "b64_json" && *format != "url")
      throw Fields::bad("response_format", "must be \"b64_json\" or \"url\"");
    r.url = *format == "url";
  }
  if (auto format = f.string("output_format")) {
    if (*format == "jpg") *format = "jpeg";
    const auto& known = limits.output_formats;
    if (std::find(known.begin(), known.end(), *format) == known.end())
      throw Fields::bad("output_format", "must be one of " + join(known) + " (got \"" +
                                             escape_for_message(*format, 40) + "\")");
    r.output_format = *format;
  }
  r.output_compression = int(f.integer("output_compression", 0, 100).value_or(100));
  if (auto user = f.string("user")) r.user = *user;
  r.stream = f.boolean("stream").value_or(false);
  r.partial_images = int(f.integer("partial_images", 0, 3).value_or(0));
  r.loras = parse_loras(f, limits);
  return r;
}

// `as_mask`: OpenAI's mask (decode_mask: fully transparent pixels are what to edit).
Image decode_upload(const Part& part, const ApiLimits& limits, bool as_mask = false) {
  const std::string field = part.name;
  const std::optional<ImageHeader> header = probe_image(part.content);
  if (!header)
    throw HttpError(
        400,
        "'" + field + "' (" + escape_for_message(part.filename, 100) + ") is not a PNG, JPEG or WebP image",
        field, "invalid_image");
  if (header->width == 0 || header->height == 0)
    throw HttpError(400, "'" + field + "' declares an empty image", field, "invalid_image");
  const uint64_t pixels = uint64_t(header->width) * header->height;
  if (pixels > limits.max_upload_pixels)
    throw HttpError(400,
                    "'" + field + "' is " + std::to_string(header->width) + "x" +
                        std::to_string(header->height) + ", over this server's limit of " +
                        std::to_string(limits.max_upload_pixels) + " pixels",
                    field, "image_too_large");
  try {
    const std::string name = part.filename.empty() ? field : part.filename;
    return as_mask ? decode_mask(part.content.data(), part.content.size(), name)
                   : decode_image(part.content.data(), part.content.size(), name);
  } catch (const Error& e) {
    throw HttpError(400, "'" + field + "' could not be read: " + std::string(e.what()), field,
                    "invalid_image");
  }
}

}  // namespace

ImageRequest parse_generation(const std::string& body, const ApiLimits& limits) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    throw HttpError(400, "the request body is not valid JSON (or not UTF-8)", "", "invalid_json");
  if (!doc.is_object()) throw HttpError(400, "the request body must be a JSON object", "", "invalid_json");
  return parse_common(Fields(&doc), limits, false);
}

ImageRequest parse_edit(const std::vector<Part>& parts, const ApiLimits& limits) {
  std::vector<const Part*> masks;
  for (const Part& p : parts)
    if (p.name == "mask") masks.push_back(&p);
  if (!masks.empty() && !limits.model.mask)
    throw HttpError(
        400, "'mask': this model does not inpaint (FLUX.2 klein models do); send the images without it",
        "mask", "unsupported_parameter");
  if (masks.size() > 1) throw HttpError(400, "'mask' takes one image", "mask", "invalid_value");
  if (masks.empty() && limits.model.mask_required)
    throw HttpError(400,
                    "'mask' is required: this model (FLUX.1 Fill) repaints the image where the mask is "
                    "transparent",
                    "mask", "missing_required_parameter");
  const Fields fields(&parts);
  ImageRequest r = parse_common(fields, limits, true);
  std::vector<const Part*> images;
  for (const Part& p : parts)
    if (p.name == "image" || p.name == "image[]") {
      if (p.filename.empty() && p.content.empty()) continue;
      images.push_back(&p);
    }
  if (images.empty())
    throw HttpError(400, "'image' is required (a file part)", "image", "missing_required_parameter");
  if (!masks.empty()) {  // inpainting: the first image is the one edited, the others references
    Image mask = decode_upload(*masks.front(), limits, /*as_mask=*/true);
    Image source = decode_upload(*images.front(), limits);
    if (mask.width != source.width || mask.height != source.height)
      throw HttpError(400,
                      "'mask' is " + std::to_string(mask.width) + "x" + std::to_string(mask.height) +
                          ", the image " + std::to_string(source.width) + "x" +
                          std::to_string(source.height) + ": they must be the same size",
                      "mask", "invalid_value");
    r.request.mask_image = std::move(mask);
    r.request.mask_image_name = masks.front()->filename.empty() ? "mask" : masks.front()->filename;
    r.request.init_image = std::move(source);
    r.request.init_image_name = images.front()->filename.empty() ? "image" : images.front()->filename;
    images.erase(images.begin());
    if (int(images.size()) > limits.model.max_reference_images)
      throw HttpError(
          400,
          "'image' takes the image to edit and at most " + std::to_string(limits.model.max_reference_images) +
              " reference images with a mask; got " + std::to_string(images.size() + 1) + " images",
          "image", "invalid_value");
  }
  // The family's inputs: reference images (klein), or one init image (FLUX.1 img2img).
  const bool init_image = limits.model.max_reference_images == 0 && limits.model.init_image;
  const int most = init_image ? 1 : limits.model.max_reference_images;
  if (most == 0 && !images.empty())
    throw HttpError(400, "this model takes no images; use /v1/images/generations", "image", "invalid_value");
  if (int(images.size()) > most)
    throw HttpError(400,
                    "'image' takes at most " + std::to_string(most) +
                        (init_image ? " image (the init image) " : " images ") + "with this model; got " +
                        std::to_string(images.size()),
                    "image", "invalid_value");
  for (const Part* p : images) {
    Image image = decode_upload(*p, limits);
    const std::string name = p->filename.empty() ? p->name : p->filename;
    if (init_image) {
      r.request.init_image = std::move(image);
      r.request.init_image_name = name;
    } else {
      r.request.reference_images.push_back(std::move(image));
      r.request.reference_image_names.push_back(name);
    }
  }
  // Unsized edits take the first image's size (the engine's rule), which must fit the limits too.
  if (!fields.has("size") || *fields.string("size") == "auto") {
    r.request.width.reset();
    r.request.height.reset();
  }
  return r;
}

}  // namespace fluxrt::server
