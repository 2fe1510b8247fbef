// The `cache` request field's text (fluxrt/request_fields.h parse_cache_config): a step cache
// method and its settings under diffusers' config field names, the same text on every surface
// (the --cache flag, a preset, the server's field, what Python's enable_cache sends).
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/error.h"
#include "fluxrt/request_fields.h"
#include "io/json_file.h"
#include "io/utf8.h"
#include "pipelines/cache_text.h"

namespace fluxrt {
namespace {

struct CacheParser {
  std::string_view name;  // the surface's spelling of the field, for messages

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::InvalidArgument, fmt::format("{} {}", name, what), "cache");
  }

  int integer(std::string_view key, std::string_view value) const {
    int out = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size())
      fail(fmt::format("{}='{}' must be an integer", key, io::escape_for_message(std::string(value), 40)));
    return out;
  }

  float number(std::string_view key, std::string_view value) const {
    const std::string text(value);
    char* end = nullptr;
    const double out = std::strtod(text.c_str(), &end);
    // Finite as the float the config holds, so the text written back reads back.
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(static_cast<float>(out)))
      fail(fmt::format("{}='{}' must be a number", key, io::escape_for_message(text, 40)));
    return static_cast<float>(out);
  }

  bool boolean(std::string_view key, std::string_view value) const {
    if (value == "true" || value == "1") return true;
    if (value == "false" || value == "0") return false;
    fail(fmt::format("{}='{}' must be true or false", key, io::escape_for_message(std::string(value), 40)));
  }

  // Inline "1.0;1.2;..." or a JSON file: a list, or an object with "mag_ratios".
  std::vector<float> ratios(std::string_view value) const {
    const bool inline_list =
        !value.empty() && value.find_first_not_of("0123456789.;eE+-") == std::string_view::npos;
    std::vector<float> out;
    if (inline_list) {
      size_t start = 0;
      while (start <= value.size()) {
        const size_t end = std::min(value.find(';', start), value.size());
        out.push_back(number("mag_ratios", value.substr(start, end - start)));
        start = end + 1;
      }
      return out;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(io::read_small_file(std::filesystem::path(std::string(value))));
    } catch (const Error& e) {
      // The reader's message without the path as given (it may hold any bytes): one line.
      const std::string what = e.what();
      const size_t colon = what.rfind(": ");
      fail(fmt::format(
          "mag_ratios: {} cannot be read as a ratios file ({})",
          io::escape_for_message(std::string(value), 80),
          io::escape_for_message(colon == std::string::npos ? what : what.substr(colon + 2), 60)));
    } catch (const std::exception& e) {
      fail(fmt::format("mag_ratios: {} is not JSON", io::escape_for_message(std::string(value), 80)));
    }
    if (j.is_object() && j.contains("mag_ratios")) j = j["mag_ratios"];
    if (!j.is_array() || j.empty())
      fail(fmt::format(
          "mag_ratios: {} holds no list of numbers (a JSON list, or an object with \"mag_ratios\")",
          io::escape_for_message(std::string(value), 80)));
    for (const auto& e : j) {
      if (!e.is_number() || !std::isfinite(e.get<float>()))
        fail(fmt::format("mag_ratios: {} holds a value that is no finite number",
                         io::escape_for_message(std::string(value), 80)));
      out.push_back(e.get<float>());
    }
    return out;
  }
};

}  // namespace

CacheConfig parse_cache_config(std::string_view text, std::string_view name) {
  const CacheParser p{name};
  const size_t colon = text.find(':');
  const std::string_view method = text.substr(0, colon);
  CacheConfig config;
  if (method == "first-block")
    config = FirstBlockCacheConfig{};
  else if (method == "taylorseer")
    config = TaylorSeerCacheConfig{};
  else if (method == "mag")
    config = MagCacheConfig{};
  else
    p.fail(fmt::format("'{}': the method must be first-block, taylorseer or mag (NAME:key=value,...)",
                       io::escape_for_message(std::string(method), 40)));
  std::set<std::string, std::less<>> seen;
  std::string_view rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      p.fail(fmt::format("'{}' must be key=value", io::escape_for_message(std::string(item), 40)));
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!seen.insert(std::string(key)).second)
      p.fail(fmt::format("{} is given twice", io::escape_for_message(std::string(key), 40)));
    bool known = true;
    if (auto* fbc = std::get_if<FirstBlockCacheConfig>(&config)) {
      if (key == "threshold")
        fbc->threshold = p.number(key, value);
      else
        known = false;
    } else if (auto* ts = std::get_if<TaylorSeerCacheConfig>(&config)) {
      if (key == "cache_interval")
        ts->cache_interval = p.integer(key, value);
      else if (key == "disable_cache_before_step")
        ts->disable_cache_before_step = p.integer(key, value);
      else if (key == "disable_cache_after_step")
        ts->disable_cache_after_step = p.integer(key, value);
      else if (key == "max_order")
        ts->max_order = p.integer(key, value);
      else if (key == "taylor_factors_dtype")
        ts->taylor_factors_dtype = std::string(value);
      else if (key == "use_lite_mode")
        ts->use_lite_mode = p.boolean(key, value);
      else
        known = false;
    } else {
      auto& mag = std::get<MagCacheConfig>(config);
      if (key == "threshold")
        mag.threshold = p.number(key, value);
      else if (key == "max_skip_steps")
        mag.max_skip_steps = p.integer(key, value);
      else if (key == "retention_ratio")
        mag.retention_ratio = p.number(key, value);
      else if (key == "num_inference_steps")
        mag.num_inference_steps = p.integer(key, value);
      else if (key == "mag_ratios")
        mag.mag_ratios = p.ratios(value);
      else if (key == "calibrate")
        mag.calibrate = p.boolean(key, value);
      else
        known = false;
    }
    if (!known) {
      const char* keys =
          std::holds_alternative<FirstBlockCacheConfig>(config) ? "threshold"
          : std::holds_alternative<TaylorSeerCacheConfig>(config)
              ? "cache_interval, disable_cache_before_step, disable_cache_after_step, max_order, "
                "taylor_factors_dtype, use_lite_mode"
              : "threshold, max_skip_steps, retention_ratio, num_inference_steps, mag_ratios, calibrate";
      p.fail(fmt::format("'{}' is no {} setting (it takes {})", io::escape_for_message(std::string(key), 40),
                         method, keys));
    }
  }
  return config;
}

std::string cache_config_text(const CacheConfig& config) { return pipelines::cache_text(config); }

}  // namespace fluxrt
