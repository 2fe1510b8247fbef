#pragma once
// The request settings a user gives by name, each with its name on every surface: the
// `fluxrt generate` flag, the preset key (also the name in messages and Error::field()) and the
// server's JSON / form field (also the keyword of Python's FluxPipeline). The CLI's flags, the
// preset reader, the server's parsers and the Python binding all read this one table and set
// fields through set_request_field, so they accept the same values with the same limits, and a new
// setting is one entry here plus the pipeline that uses it.
//
//   for (const fluxrt::RequestField& f : fluxrt::request_fields()) add_flag(f.flag, f.help);
//   fluxrt::set_request_field(request, *fluxrt::find_request_field("steps"), "4", limits, "--steps");
//
// Prompts, images and LoRAs are not in the table: each surface gives them its own way (a list, a
// file, an upload, a PIL image).
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fluxrt/request.h"

namespace fluxrt {

enum class FieldType {
  Text,     // a string (UTF-8, no NUL, at most RequestLimits::max_prompt_chars)
  Integer,  // a whole number within the field's bounds
  Number,   // a finite number within the field's bounds
  Size,     // "WxH" (width and height); the server also takes "auto" (unset)
  Seed,     // an integer in [0, 2^64); "random" (the server also -1) picks one
  Cache,    // "NAME:key=value,..." (parse_cache_config); "none" (or "") for no cache
};

struct RequestField {
  const char* key;         // preset key, Error::field(), metadata: "true_cfg"
  const char* flag;        // `fluxrt generate` / `fluxrt serve` flag: "--true-cfg"
  const char* short_flag;  // "-n", or "" for none
  const char* api;         // JSON / form field and Python keyword: "true_cfg_scale"
  FieldType type;
  const char* help;  // one line, without the bounds (request_field_bounds says them)
};

// Every field, in the order the CLI's --help lists them.
const std::vector<RequestField>& request_fields();
// By key ("steps") or by API name ("num_inference_steps"); null when there is none.
const RequestField* find_request_field(std::string_view key);
const RequestField* find_request_field_by_api(std::string_view api);

// A value as a surface gives it: text (a flag, a preset scalar, a form field) or a JSON value
// (numbers as int64_t or double, strings as text).
using FieldValue = std::variant<std::string, int64_t, double>;

// Sets `field` in `request` from `value`, checking its syntax and its bounds in `limits`; a
// RequestLimits{} checks the bounds that hold for every model (a front end that has not opened one
// yet). InvalidArgument with Error::field() = field.key and a one-line message naming `name`, the
// surface's spelling ("--steps", "'num_inference_steps'"). A Seed of "random" (or -1) draws a seed
// in [0, 2^53) and returns true; otherwise returns false.
bool set_request_field(GenerateRequest& request, const RequestField& field, const FieldValue& value,
                       const RequestLimits& limits, std::string_view name);

// The field's bounds under `limits` in words, for help texts and /v1/models: "1 to 1000",
// "0 to 100", "(0, 1]", "multiples of 16 up to 16384", "" for text.
std::string request_field_bounds(const RequestField& field, const RequestLimits& limits);

// Whether a model with these limits takes the field at all (true_cfg: FLUX.1; strength: models
// with img2img); a field it does not take is refused when set (Engine::plan), never dropped.
bool request_field_taken(const RequestField& field, const RequestLimits& limits);

// The field's value in `request` as text ("" when unset), as a preset or a flag would give it.
std::string request_field_text(const GenerateRequest& request, const RequestField& field);

// A step cache as text, the same on every surface: "NAME" or "NAME:key=value,...", NAME
// first-block, taylorseer or mag, each key a field of its config in request.h (diffusers'
// names): "first-block:threshold=0.2", "mag:threshold=0.06,mag_ratios=ratios.json". mag_ratios
// is a file (a JSON list of numbers, or an object with "mag_ratios", as `fluxrt calibrate-cache`
// writes) or the numbers inline, separated by ';'. InvalidArgument with field "cache" and a
// one-line message naming `name` for an unknown method or key, a bad value or an unreadable file.
CacheConfig parse_cache_config(std::string_view text, std::string_view name = "cache");
// The config as parse_cache_config reads it back (MagCache's ratios inline).
std::string cache_config_text(const CacheConfig& config);

}  // namespace fluxrt
