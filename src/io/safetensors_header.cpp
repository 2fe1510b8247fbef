// The safetensors header parser and validator. Kept apart from the mmap and writer code because
// the libFuzzer target compiles this file on its own (tests/fuzz/). Layout of a file:
//   u64 little-endian N | N bytes of UTF-8 JSON | data section (tensor bytes, offsets relative to it)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>
#include <string_view>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/utf8.h"

namespace fluxrt::io {

namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
// Real headers nest three deep (root -> entry -> shape). A bound keeps a hostile header from
// building arbitrarily deep values; nlohmann parses iteratively, this only caps the work.
constexpr int kMaxJsonDepth = 16;

// Dtype strings the safetensors format defines that this engine does not compute with: a file
// holding them is valid but unsupported, which deserves a different message than garbage.
constexpr std::string_view kKnownUnsupported[] = {"U16", "U32", "U64", "F8_E8M0", "F4",
                                                  "F6_E2M3", "F6_E3M2", "C64", "C128"};

// nlohmann's messages start with "[json.exception.parse_error.101] "; the text after it says
// where and what, which is what a user needs.
std::string json_error_text(const char* what) {
  std::string_view text(what);
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find("] ");
    if (close != std::string_view::npos) text.remove_prefix(close + 2);
  }
  return escape_for_message(text);
}

// Finds the JSON string literal around byte `pos` (the first invalid UTF-8 byte) so the error can
// show the offending name. Quotes inside a string are always escaped, so the nearest unescaped
// quotes on either side delimit it.
std::string enclosing_string(std::string_view text, size_t pos, bool* is_key) {
  auto unescaped_quote = [&](size_t i) {
    if (text[i] != '"') return false;
    size_t backslashes = 0;
    while (i > backslashes && text[i - 1 - backslashes] == '\\') ++backslashes;
    return backslashes % 2 == 0;
  };
  size_t begin = pos;
  while (begin > 0 && !unescaped_quote(begin - 1)) --begin;
  size_t end = pos;
  while (end < text.size() && !unescaped_quote(end)) ++end;
  size_t after = end + 1;
  while (after < text.size() && (text[after] == ' ' || text[after] == '\t' || text[after] == '\n' ||
                                 text[after] == '\r'))
    ++after;
  *is_key = after < text.size() && text[after] == ':';
  return std::string(text.substr(begin, end - begin));
}

// The JSON parse with two checks nlohmann does not do by itself: duplicate keys (the DOM would
// silently keep the last) and a nesting bound.
json parse_json(std::string_view text, const std::string& path) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::vector<bool> is_object;              // what each open container is
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > kMaxJsonDepth)
          fail(ErrorCode::Format, "{}: header JSON nests deeper than {} levels", path, kMaxJsonDepth);
        is_object.push_back(event == json::parse_event_t::object_start);
        if (is_object.back()) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!is_object.empty()) {
          if (is_object.back() && !keys.empty()) keys.pop_back();
          is_object.pop_back();
        }
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
          std::string what = keys.size() == 1 ? "tensor" : "key";
          fail(ErrorCode::Format, "{}: {} {} appears twice in the header", path, what,
               quote_name(parsed.get<std::string>()));
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: header is not valid JSON: {}", path, json_error_text(e.what()));
  }
}

// A JSON number that is a non-negative integer fitting in int64 (the only kind shapes and
// offsets may hold).
bool as_index(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return *out <= static_cast<uint64_t>(INT64_MAX);
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

std::string short_dump(const json& value) {
  std::string text = value.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return escape_for_message(text);
}

TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                       const std::string& path) {
  const std::string q = quote_name(name);
  if (!entry.is_object())
    fail(ErrorCode::Format, "{}: tensor {}: entry is a JSON {}, expected an object", path, q,
         entry.type_name());
  TensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) fail(ErrorCode::Format, "{}: tensor {}: no \"dtype\"", path, q);
  if (!dtype_it->is_string())
    fail(ErrorCode::Format, "{}: tensor {}: \"dtype\" is {}, expected a string", path, q,
         short_dump(*dtype_it));
  const std::string& dtype_text = dtype_it->get_ref<const std::string&>();
  if (!dtype_from_safetensors(dtype_text, &info.dtype)) {
    bool known = std::find(std::begin(kKnownUnsupported), std::end(kKnownUnsupported), dtype_text) !=
                 std::end(kKnownUnsupported);
    if (known)
      fail(ErrorCode::Unsupported, "{}: tensor {}: dtype {} is not supported", path, q,
           quote_name(dtype_text));
    fail(ErrorCode::Format, "{}: tensor {}: unknown dtype {}", path, q, quote_name(dtype_text));
  }

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) fail(ErrorCode::Format, "{}: tensor {}: no \"shape\"", path, q);
  if (!shape_it->is_array())
    fail(ErrorCode::Format, "{}: tensor {}: \"shape\" is {}, expected an array", path, q,
         short_dump(*shape_it));
  if (shape_it->size() > static_cast<size_t>(kMaxDims))
    fail(ErrorCode::Unsupported, "{}: tensor {}: rank {} exceeds the supported {}", path, q,
         shape_it->size(), kMaxDims);
  // Element count with overflow checks: a hostile shape must not wrap around to a small size
  // that then matches the offsets. The product of the non-zero extents must fit in int64 even
  // when another extent is zero, because Tensor computes element counts and strides in int64.
  uint64_t nonzero_product = 1;
  bool overflow = false, has_zero = false;
  for (const json& extent : *shape_it) {
    uint64_t e = 0;
    if (!as_index(extent, &e))
      fail(ErrorCode::Format, "{}: tensor {}: shape {} has an extent that is not a non-negative integer",
           path, q, short_dump(*shape_it));
    info.shape.push_back(static_cast<int64_t>(e));
    if (e == 0)
      has_zero = true;
    else if (__builtin_mul_overflow(nonzero_product, e, &nonzero_product))
      overflow = true;
  }
  const uint64_t numel = has_zero ? 0 : nonzero_product;
  uint64_t nbytes = 0;
  if (overflow || nonzero_product > static_cast<uint64_t>(INT64_MAX) ||
      __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info.dtype)), &nbytes) ||
      nbytes > static_cast<uint64_t>(INT64_MAX))
    fail(ErrorCode::Format, "{}: tensor {}: shape {} has too many elements", path, q,
         short_dump(*shape_it));

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) fail(ErrorCode::Format, "{}: tensor {}: no \"data_offsets\"", path, q);
  if (!offsets_it->is_array() || offsets_it->size() != 2 || !as_index((*offsets_it)[0], &info.data_begin) ||
      !as_index((*offsets_it)[1], &info.data_end))
    fail(ErrorCode::Format, "{}: tensor {}: \"data_offsets\" is {}, expected [begin, end] with integers >= 0",
         path, q, short_dump(*offsets_it));
  if (info.data_begin > info.data_end)
    fail(ErrorCode::Format, "{}: tensor {}: data_offsets [{}, {}] end before they begin", path, q,
         info.data_begin, info.data_end);
  if (info.data_end > data_size)
    fail(ErrorCode::Format, "{}: tensor {}: data_offsets [{}, {}] run past the data section ({} bytes)",
         path, q, info.data_begin, info.data_end, data_size);
  if (info.data_end - info.data_begin != nbytes)
    fail(ErrorCode::Format, "{}: tensor {}: {} bytes in the file but {} {} x {} needs {}", path, q,
         info.data_end - info.data_begin, dtype_safetensors_name(info.dtype), info.shape.str(),
         dtype_size(info.dtype), nbytes);
  return info;
}

void parse_metadata(const json& value, std::map<std::string, std::string>* out, const std::string& path) {
  if (value.is_null()) return;  // the reference reader accepts an explicit null
  if (!value.is_object())
    fail(ErrorCode::Format, "{}: __metadata__ is a JSON {}, expected an object of strings", path,
         value.type_name());
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail(ErrorCode::Format, "{}: __metadata__ entry {} is {}, expected a string", path, quote_name(key),
           short_dump(v));
    (*out)[key] = v.get<std::string>();
  }
}

}  // namespace

ParsedHeader parse_safetensors_header(const uint8_t* bytes, size_t file_size, const std::string& path) {
  if (file_size == 0) fail(ErrorCode::Format, "{}: empty file (0 bytes), not a safetensors file", path);
  if (file_size < 8)
    fail(ErrorCode::Format, "{}: {} bytes, too short for a safetensors file (it starts with an 8-byte header length)",
         path, file_size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little endian
  if (header_len > kMaxHeaderBytes)
    fail(ErrorCode::Format, "{}: header length {} exceeds the {} byte limit (not a safetensors file?)", path,
         header_len, kMaxHeaderBytes);
  if (header_len > file_size - 8)
    fail(ErrorCode::Format, "{}: header length {} runs past the end of the file ({} bytes; truncated?)", path,
         header_len, file_size);
  if (header_len < 2)
    fail(ErrorCode::Format, "{}: header length {} is too short for a JSON object", path, header_len);

  ParsedHeader parsed;
  parsed.data_offset = 8 + header_len;
  parsed.data_size = file_size - parsed.data_offset;
  std::string_view text(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(header_len));

  // UTF-8 before JSON, so that a bad name is reported as that name rather than as a lexer error.
  size_t bad = 0;
  if (!is_valid_utf8(text, &bad)) {
    bool is_key = false;
    std::string str = enclosing_string(text, bad, &is_key);
    fail(ErrorCode::Format, "{}: header {} {} is not valid UTF-8 (byte {} of the header)", path,
         is_key ? "name" : "string", quote_name(str), bad);
  }

  json root = parse_json(text, path);
  if (!root.is_object())
    fail(ErrorCode::Format, "{}: header is a JSON {}, expected an object", path, root.type_name());

  parsed.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      parse_metadata(entry, &parsed.metadata, path);
      continue;
    }
    parsed.tensors.push_back(parse_entry(name, entry, parsed.data_size, path));
  }

  std::sort(parsed.tensors.begin(), parsed.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
    if (a.data_end != b.data_end) return a.data_end < b.data_end;
    return a.name < b.name;
  });
  // Empty tensors occupy no bytes and overlap nothing; among the rest, each must start at or after
  // the furthest end seen so far.
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo& t : parsed.tensors) {
    if (t.data_begin == t.data_end) continue;
    if (furthest != nullptr && t.data_begin < furthest->data_end)
      fail(ErrorCode::Format, "{}: tensors {} [{}, {}] and {} [{}, {}] overlap", path, quote_name(furthest->name),
           furthest->data_begin, furthest->data_end, quote_name(t.name), t.data_begin, t.data_end);
    if (furthest == nullptr || t.data_end > furthest->data_end) furthest = &t;
  }
  return parsed;
}

}  // namespace fluxrt::io
