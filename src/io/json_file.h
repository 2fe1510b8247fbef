#pragma once
// Small JSON files read whole (model_index.json, a component's config.json): size-limited, with
// one-line errors naming the file. Model discovery reads them here, and so do the pipeline kinds
// when they read their transformer's config.json for variant detection.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace fluxrt::io {

// The whole file as text. Io when it cannot be read, Format when it is larger than any config
// file is (16 MiB).
std::string read_small_file(const std::filesystem::path& path);

// The file parsed as a JSON object. Errors as read_small_file's, and Format when it is not JSON
// (with the parser's first line) or not an object.
nlohmann::json read_json_object(const std::filesystem::path& path);

// `object[key]` when it is an integer (a boolean), else `fallback`: a config's optional field,
// absent or of another type, takes the class's default.
int64_t json_int(const nlohmann::json& object, const char* key, int64_t fallback);
bool json_bool(const nlohmann::json& object, const char* key, bool fallback);

}  // namespace fluxrt::io
