// A step cache config as the `cache` request field's text (pipelines/cache_text.h). Its own file,
// with nothing but fmt below it, so the request-field fuzzers compile it with the field parser.
#include "pipelines/cache_text.h"

#include <fmt/format.h>

namespace fluxrt::pipelines {

std::string cache_text(const fluxrt::CacheConfig& config) {
  if (const auto* fbc = std::get_if<fluxrt::FirstBlockCacheConfig>(&config))
    return fmt::format("first-block:threshold={}", fbc->threshold);
  if (const auto* ts = std::get_if<fluxrt::TaylorSeerCacheConfig>(&config)) {
    std::string out = fmt::format(
        "taylorseer:cache_interval={},disable_cache_before_step={},max_order={},taylor_factors_dtype={}",
        ts->cache_interval, ts->disable_cache_before_step, ts->max_order, ts->taylor_factors_dtype);
    if (ts->disable_cache_after_step)
      out += fmt::format(",disable_cache_after_step={}", *ts->disable_cache_after_step);
    if (ts->use_lite_mode) out += ",use_lite_mode=true";
    return out;
  }
  const auto& mag = std::get<fluxrt::MagCacheConfig>(config);
  std::string out = fmt::format("mag:threshold={},max_skip_steps={},retention_ratio={}", mag.threshold,
                                mag.max_skip_steps, mag.retention_ratio);
  if (mag.num_inference_steps) out += fmt::format(",num_inference_steps={}", *mag.num_inference_steps);
  for (size_t i = 0; i < mag.mag_ratios.size(); ++i)
    out += fmt::format("{}{}", i ? ";" : ",mag_ratios=", mag.mag_ratios[i]);
  if (mag.calibrate) out += ",calibrate=true";
  return out;
}

}  // namespace fluxrt::pipelines
