#include "io/json_file.h"

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace fluxrt::io {
namespace {

namespace fs = std::filesystem;

constexpr uintmax_t kMaxConfigBytes = 16u << 20;  // configs are a few KB; refuse anything absurd

}  // namespace

std::string read_small_file(const fs::path& path) {
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(path, ec);
  if (ec) fail(ErrorCode::Io, "{}: cannot read: {}", path.string(), ec.message());
  if (bytes > kMaxConfigBytes)
    fail(ErrorCode::Format, "{}: {} bytes is too large for a config file", path.string(), bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::Io, "{}: cannot open", path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorCode::Io, "{}: read failed", path.string());
  return text;
}

// The parser's message can span lines, so keep only its first line.
nlohmann::json read_json_object(const fs::path& path) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(read_small_file(path));
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    fail(ErrorCode::Format, "{}: not valid JSON: {}", path.string(), what);
  }
  if (!root.is_object()) fail(ErrorCode::Format, "{}: expected a JSON object", path.string());
  return root;
}

int64_t json_int(const nlohmann::json& object, const char* key, int64_t fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

bool json_bool(const nlohmann::json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace fluxrt::io
