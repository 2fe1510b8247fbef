#pragma once
// A step cache config (fluxrt/request.h) as the `cache` request field's text: what
// fluxrt::parse_cache_config reads back (MagCache's ratios inline), what the metadata records
// and fluxrt::cache_config_text returns.
#include <string>

#include "fluxrt/request.h"

namespace fluxrt::pipelines {

std::string cache_text(const fluxrt::CacheConfig& config);

}  // namespace fluxrt::pipelines
