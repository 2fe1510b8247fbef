// The request field table (fluxrt/request_fields.h): each setting's names on every surface, its
// syntax and its bounds, in one place.
#include "fluxrt/request_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "core/error.h"
#include "io/utf8.h"

namespace fluxrt {
namespace {

const std::vector<RequestField> kFields = {
    {"negative_prompt", "--negative-prompt", "", "negative_prompt", FieldType::Text,
     "negative prompt: klein base variants with CFG (guidance > 1); FLUX.1 with true_cfg > 1"},
    {"size", "--size", "", "size", FieldType::Size,
     "image size WxH (default: the first reference image's, else the model's)"},
    {"steps", "--steps", "", "num_inference_steps", FieldType::Integer,
     "denoising steps (default: the model's)"},
    {"guidance", "--guidance", "", "guidance_scale", FieldType::Number,
     "guidance scale: CFG for klein base variants, the guidance embedding of FLUX.1 dev (default: the "
     "model's)"},
    {"true_cfg", "--true-cfg", "", "true_cfg_scale", FieldType::Number,
     "FLUX.1 true classifier-free guidance scale; runs when > 1 with a negative prompt (two forwards per "
     "step)"},
    {"strength", "--strength", "", "strength", FieldType::Number,
     "img2img / inpainting: how far the init image is noised (default 0.6; klein inpainting 0.8); about "
     "steps x strength steps run"},
    {"padding_mask_crop", "--padding-mask-crop", "", "padding_mask_crop", FieldType::Integer,
     "inpainting: repaint only a window around the mask, padded by this many pixels and grown to the "
     "output's aspect ratio, then blended back over the image (needs a mask)"},
    {"seed", "--seed", "", "seed", FieldType::Seed,
     "noise seed, or random (printed and stored in the image)"},
    {"batch", "--batch", "-n", "n", FieldType::Integer, "images per prompt"},
    {"max_sequence_length", "--max-sequence-length", "", "max_sequence_length", FieldType::Integer,
     "text tokens (default: the model's, 512; FLUX.1 schnell 256)"},
    {"max_area", "--max-area", "", "max_area", FieldType::Integer,
     "FLUX.1 Kontext: the output's area in pixels; the size is rescaled to it keeping its aspect "
     "ratio (diffusers' max_area; default: the size as given)"},
    {"cache", "--cache", "", "cache", FieldType::Cache,
     "step cache NAME:key=value,... with NAME first-block, taylorseer or mag (diffusers' config names; "
     "docs/requests.md), or none"},
};

struct Bounds {
  double lo = 0, hi = 0;
  bool lo_open = false;  // (lo, hi] rather than [lo, hi]
};

Bounds bounds_of(const RequestField& f, const RequestLimits& l) {
  const std::string_view key = f.key;
  if (key == "steps") return {1, double(l.max_steps)};
  if (key == "guidance" || key == "true_cfg") return {0, double(l.max_guidance)};
  if (key == "strength") return {0, 1, true};
  if (key == "batch") return {1, double(l.max_images_per_prompt)};
  if (key == "max_sequence_length") return {1, double(l.max_sequence_length)};
  // At least one size multiple squared: the smallest image there is.
  if (key == "max_area")
    return {double(l.size_multiple) * l.size_multiple,
            std::min(double(l.max_side) * double(l.max_side), double(std::numeric_limits<int>::max()))};
  if (key == "padding_mask_crop") return {0, double(l.max_side)};
  return {};
}

std::string number_text(double v) { return fmt::format("{}", v); }

[[noreturn]] void bad(const RequestField& f, std::string_view name, const std::string& what) {
  throw Error(ErrorCode::InvalidArgument, fmt::format("{} {}", name, what), f.key);
}

std::string shown(const FieldValue& v) {
  // Escaped: the value may hold line breaks or bytes that are no UTF-8, and messages are one line.
  if (const auto* s = std::get_if<std::string>(&v))
    return fmt::format("'{}'", io::escape_for_message(*s, 40));
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return number_text(std::get<double>(v));
}

// A whole number from text or JSON; nullopt when the value is no integer at all.
std::optional<int64_t> integer_of(const FieldValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) {
    if (std::isfinite(*d) && *d == std::floor(*d) && std::fabs(*d) < 9.0e18) return static_cast<int64_t>(*d);
    return std::nullopt;
  }
  const std::string& s = std::get<std::string>(v);
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return out;
}

std::optional<double> number_of(const FieldValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  const std::string& s = std::get<std::string>(v);
  char* end = nullptr;
  const double out = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) return std::nullopt;
  return out;
}

// `what`: "an integer" or "a number", for the message.
void check_bounds(const RequestField& f, std::string_view name, double value, const Bounds& b,
                  const char* what) {
  const bool low_ok = b.lo_open ? value > b.lo : value >= b.lo;
  if (!std::isfinite(value) || !low_ok || value > b.hi)
    bad(f, name,
        b.lo_open ? fmt::format("{} must be {} in ({}, {}]", number_text(value), what, number_text(b.lo),
                                number_text(b.hi))
                  : fmt::format("{} must be {} from {} to {}", number_text(value), what, number_text(b.lo),
                                number_text(b.hi)));
}

uint64_t random_seed() {
  std::random_device device;
  // 2^53 - 1 at most: seeds survive a round trip through JSON and JavaScript.
  return ((static_cast<uint64_t>(device()) << 32) | device()) & ((uint64_t{1} << 53) - 1);
}

void set_size(GenerateRequest& r, const RequestField& f, const FieldValue& v, const RequestLimits& l,
              std::string_view name) {
  const auto* text = std::get_if<std::string>(&v);
  if (!text) bad(f, name, "must be a string \"WIDTHxHEIGHT\", e.g. \"1024x1024\"");
  if (*text == "auto") {  // the model's, or the first reference image's
    r.width.reset();
    r.height.reset();
    return;
  }
  const size_t x = text->find_first_of("xX");
  auto side = [](std::string_view s, int* out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return !s.empty() && s[0] != '+' && ec == std::errc() && end == s.data() + s.size() && *out > 0;
  };
  int w = 0, h = 0;
  if (x == std::string::npos || !side(std::string_view(*text).substr(0, x), &w) ||
      !side(std::string_view(*text).substr(x + 1), &h))
    bad(f, name,
        fmt::format("'{}' must be WIDTHxHEIGHT with positive integers, e.g. 1024x1024, or auto",
                    io::escape_for_message(*text, 40)));
  if (w > l.max_side || h > l.max_side)
    bad(f, name, fmt::format("{}x{}: sides must be at most {}", w, h, l.max_side));
  if (l.size_multiple > 1 && (w % l.size_multiple != 0 || h % l.size_multiple != 0))
    bad(f, name,
        fmt::format("{}x{}: width and height must be multiples of {} for this model", w, h, l.size_multiple));
  r.width = w;
  r.height = h;
}

}  // namespace

const std::vector<RequestField>& request_fields() { return kFields; }

const RequestField* find_request_field(std::string_view key) {
  for (const RequestField& f : kFields)
    if (key == f.key) return &f;
  return nullptr;
}

const RequestField* find_request_field_by_api(std::string_view api) {
  for (const RequestField& f : kFields)
    if (api == f.api) return &f;
  return nullptr;
}

bool set_request_field(GenerateRequest& r, const RequestField& f, const FieldValue& v, const RequestLimits& l,
                       std::string_view name) {
  const std::string_view key = f.key;
  switch (f.type) {
    case FieldType::Text: {
      const auto* text = std::get_if<std::string>(&v);
      if (!text) bad(f, name, "must be a string");
      size_t at = 0;
      if (!io::is_valid_utf8(*text, &at)) bad(f, name, fmt::format("is not valid UTF-8 (byte {})", at));
      if (text->find('\0') != std::string::npos) bad(f, name, "contains a NUL character");
      if (io::utf8_length(*text) > static_cast<size_t>(l.max_prompt_chars))
        bad(f, name, fmt::format("is longer than {} characters", l.max_prompt_chars));
      if (key == "negative_prompt") r.negative_prompt = *text;
      return false;
    }
    case FieldType::Size:
      set_size(r, f, v, l, name);
      return false;
    case FieldType::Cache: {
      const auto* text = std::get_if<std::string>(&v);
      if (!text) bad(f, name, "must be a string \"NAME:key=value,...\", e.g. \"first-block:threshold=0.2\"");
      if (text->empty() || *text == "none")
        r.cache.reset();
      else
        r.cache = parse_cache_config(*text, name);
      return false;
    }
    case FieldType::Seed: {
      const auto* text = std::get_if<std::string>(&v);
      const std::optional<int64_t> whole = integer_of(v);
      if ((text && *text == "random") || (!text && whole == -1)) {
        r.seed = random_seed();
        return true;
      }
      if (text) {  // the full unsigned range in text
        uint64_t seed = 0;
        const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), seed);
        if (text->empty() || ec != std::errc() || end != text->data() + text->size())
          bad(f, name, fmt::format("{} must be an integer from 0 to {} or random", shown(v), UINT64_MAX));
        r.seed = seed;
        return false;
      }
      if (!whole || *whole < 0)
        bad(f, name, fmt::format("{} must be an integer from 0 (-1: random)", shown(v)));
      r.seed = static_cast<uint64_t>(*whole);
      return false;
    }
    case FieldType::Integer: {
      const std::optional<int64_t> value = integer_of(v);
      const Bounds b = bounds_of(f, l);
      if (!value)
        bad(f, name,
            fmt::format("{} must be an integer from {} to {}", shown(v), number_text(b.lo),
                        number_text(b.hi)));
      check_bounds(f, name, static_cast<double>(*value), b, "an integer");
      const int as_int = static_cast<int>(*value);
      if (key == "steps")
        r.steps = as_int;
      else if (key == "batch")
        r.images_per_prompt = as_int;
      else if (key == "max_sequence_length")
        r.max_sequence_length = as_int;
      else if (key == "max_area")
        r.max_area = as_int;
      else if (key == "padding_mask_crop")
        r.padding_mask_crop = as_int;
      return false;
    }
    case FieldType::Number: {
      const std::optional<double> value = number_of(v);
      const Bounds b = bounds_of(f, l);
      if (!value) bad(f, name, fmt::format("{} must be a number ({})", shown(v), request_field_bounds(f, l)));
      check_bounds(f, name, *value, b, "a number");
      // The request holds a float: a strength below float's smallest would be 0, outside (0, 1].
      const float as_float = static_cast<float>(*value);
      if (b.lo_open && !(as_float > b.lo))
        bad(f, name,
            fmt::format("{} must be a number in {} (it is 0 as a float)", number_text(*value),
                        request_field_bounds(f, l)));
      if (key == "guidance")
        r.guidance = as_float;
      else if (key == "true_cfg")
        r.true_cfg = as_float;
      else if (key == "strength")
        r.strength = as_float;
      return false;
    }
  }
  return false;
}

std::string request_field_bounds(const RequestField& f, const RequestLimits& l) {
  switch (f.type) {
    case FieldType::Text:
    case FieldType::Cache:
      return "";
    case FieldType::Seed:
      return fmt::format("0 to {} or random", UINT64_MAX);
    case FieldType::Size:
      return l.size_multiple > 1 ? fmt::format("multiples of {} up to {}", l.size_multiple, l.max_side)
                                 : fmt::format("up to {}", l.max_side);
    case FieldType::Integer:
    case FieldType::Number: {
      const Bounds b = bounds_of(f, l);
      return b.lo_open ? fmt::format("({}, {}]", number_text(b.lo), number_text(b.hi))
                       : fmt::format("{} to {}", number_text(b.lo), number_text(b.hi));
    }
  }
  return "";
}

bool request_field_taken(const RequestField& f, const RequestLimits& l) {
  const std::string_view key = f.key;
  if (key == "true_cfg") return l.true_cfg;
  if (key == "strength") return l.init_image || l.mask;
  if (key == "max_area") return l.max_area;
  if (key == "padding_mask_crop") return l.padding_mask_crop;
  return true;
}

std::string request_field_text(const GenerateRequest& r, const RequestField& f) {
  const std::string_view key = f.key;
  auto opt = [](const auto& o) { return o ? fmt::format("{}", *o) : std::string(); };
  if (key == "negative_prompt") return r.negative_prompt.value_or("");
  if (key == "size") return r.width && r.height ? fmt::format("{}x{}", *r.width, *r.height) : std::string();
  if (key == "steps") return opt(r.steps);
  if (key == "guidance") return opt(r.guidance);
  if (key == "true_cfg") return opt(r.true_cfg);
  if (key == "strength") return opt(r.strength);
  if (key == "seed") return std::to_string(r.seed);
  if (key == "batch") return std::to_string(r.images_per_prompt);
  if (key == "max_sequence_length") return opt(r.max_sequence_length);
  if (key == "max_area") return opt(r.max_area);
  if (key == "padding_mask_crop") return opt(r.padding_mask_crop);
  if (key == "cache") return r.cache ? cache_config_text(*r.cache) : std::string();
  return "";
}

}  // namespace fluxrt
