// The GGUF header parser and validator. Kept apart from the mmap code because the libFuzzer target
// compiles this file on its own (tests/fuzz/). Nothing is read before the bytes left have been
// checked to hold it; every count is bounded by the bytes it would need before anything is
// reserved for it.
#include <algorithm>
#include <cstring>
#include <set>
#include <string_view>

#include "core/error.h"
#include "io/gguf.h"
#include "io/utf8.h"

namespace fluxrt::io {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
// GGML tensors have at most 4 extents.
constexpr uint32_t kMaxGgufDims = 4;
// Strings longer than this are not keys, names or tokens of any real file; the bound keeps a
// hostile length from being taken as a size to copy.
constexpr uint64_t kMaxStringBytes = 1u << 20;
// Arrays nest (an array of arrays); real files never do, a bound keeps the recursion shallow.
constexpr int kMaxArrayDepth = 3;
// An alignment this large is not a real file's (they use 32; a few writers 64 or 4096).
constexpr uint64_t kMaxAlignment = 1u << 20;

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::Bool:
      return 1;
    case GgufValueType::U16:
    case GgufValueType::I16:
      return 2;
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::F32:
      return 4;
    case GgufValueType::U64:
    case GgufValueType::I64:
    case GgufValueType::F64:
      return 8;
    default:
      return 0;  // string, array: variable
  }
}

// A bounds-checked little-endian reader over the header bytes.
class Reader {
 public:
  Reader(const uint8_t* bytes, size_t size, const std::string& path) : p_(bytes), size_(size), path_(path) {}
  uint64_t pos() const { return pos_; }
  const std::string& path() const { return path_; }
  uint64_t left() const { return size_ - pos_; }

  // `what` says what was being read when the file ended: "tensor count", "key \"x\"", ...
  void need(uint64_t bytes, const std::string& what) const {
    if (bytes > left())
      fail(ErrorCode::Format, "{}: file ends at byte {} inside {} (needs {} more bytes; truncated?)", path_,
           size_, what, bytes - left());
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringBytes)
      fail(ErrorCode::Format, "{}: {} has length {} (over the {} byte limit)", path_, what, len,
           kMaxStringBytes);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }
  void skip(uint64_t bytes, const std::string& what) {
    need(bytes, what);
    pos_ += bytes;
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::F64); }

void read_scalar(Reader& r, GgufValueType t, GgufValue* v, const std::string& what) {
  v->type = t;
  switch (t) {
    case GgufValueType::U8:
      v->u = r.read<uint8_t>(what);
      break;
    case GgufValueType::I8:
      v->i = r.read<int8_t>(what);
      break;
    case GgufValueType::U16:
      v->u = r.read<uint16_t>(what);
      break;
    case GgufValueType::I16:
      v->i = r.read<int16_t>(what);
      break;
    case GgufValueType::U32:
      v->u = r.read<uint32_t>(what);
      break;
    case GgufValueType::I32:
      v->i = r.read<int32_t>(what);
      break;
    case GgufValueType::U64:
      v->u = r.read<uint64_t>(what);
      break;
    case GgufValueType::I64:
      v->i = r.read<int64_t>(what);
      break;
    case GgufValueType::F32:
      v->f = r.read<float>(what);
      break;
    case GgufValueType::F64:
      v->f = r.read<double>(what);
      break;
    case GgufValueType::Bool: {
      const uint8_t b = r.read<uint8_t>(what);
      if (b > 1) fail(ErrorCode::Format, "{}: {} is a bool of value {} (not 0 or 1)", r.path(), what, b);
      v->u = b;
      break;
    }
    default:
      break;
  }
}

void read_value(Reader& r, GgufValueType t, GgufValue* v, const std::string& what, const std::string& path,
                int depth) {
  if (t == GgufValueType::String) {
    v->type = t;
    v->s = r.read_string(what);
    return;
  }
  if (t != GgufValueType::Array) {
    read_scalar(r, t, v, what);
    return;
  }
  v->type = t;
  const uint32_t elem = r.read<uint32_t>(what + " element type");
  if (!known_value_type(elem))
    fail(ErrorCode::Format, "{}: {} is an array of unknown value type {}", path, what, elem);
  v->array_type = static_cast<GgufValueType>(elem);
  v->array_count = r.read<uint64_t>(what + " length");
  const uint64_t count = v->array_count;
  if (v->array_type == GgufValueType::String) {
    // Each string takes at least its 8-byte length: a count the bytes left cannot hold is refused
    // before anything is reserved for it.
    if (count > r.left() / 8)
      fail(ErrorCode::Format, "{}: {} claims {} strings but only {} bytes are left", path, what, count,
           r.left());
    v->strings.reserve(static_cast<size_t>(count));
    for (uint64_t k = 0; k < count; ++k) v->strings.push_back(r.read_string(what));
  } else if (v->array_type == GgufValueType::Array) {
    if (depth + 1 >= kMaxArrayDepth)
      fail(ErrorCode::Format, "{}: {} nests arrays deeper than {} levels", path, what, kMaxArrayDepth);
    // An inner array takes at least 12 bytes (type and length).
    if (count > r.left() / 12)
      fail(ErrorCode::Format, "{}: {} claims {} arrays but only {} bytes are left", path, what, count,
           r.left());
    for (uint64_t k = 0; k < count; ++k) {
      GgufValue inner;
      read_value(r, GgufValueType::Array, &inner, what, path, depth + 1);
    }
  } else {
    const size_t es = scalar_size(v->array_type);
    if (count > r.left() / es)
      fail(ErrorCode::Format, "{}: {} claims {} values of {} bytes but only {} bytes are left", path, what,
           count, es, r.left());
    if (v->array_type == GgufValueType::Bool) {
      for (uint64_t k = 0; k < count; ++k) {
        GgufValue b;
        read_scalar(r, GgufValueType::Bool, &b, what);
      }
    } else {
      r.skip(count * es, what);
    }
  }
}

}  // namespace

std::optional<double> GgufValue::number() const {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::U16:
    case GgufValueType::U32:
    case GgufValueType::U64:
      return static_cast<double>(u);
    case GgufValueType::I8:
    case GgufValueType::I16:
    case GgufValueType::I32:
    case GgufValueType::I64:
      return static_cast<double>(i);
    case GgufValueType::F32:
    case GgufValueType::F64:
      return f;
    default:
      return std::nullopt;
  }
}

std::string GgufValue::str() const {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::U16:
    case GgufValueType::U32:
    case GgufValueType::U64:
      return std::to_string(u);
    case GgufValueType::I8:
    case GgufValueType::I16:
    case GgufValueType::I32:
    case GgufValueType::I64:
      return std::to_string(i);
    case GgufValueType::F32:
    case GgufValueType::F64:
      return fmt::format("{}", f);
    case GgufValueType::Bool:
      return u ? "true" : "false";
    case GgufValueType::String:
      return quote_name(s.size() > 80 ? s.substr(0, 77) + "..." : s);
    case GgufValueType::Array: {
      static constexpr std::string_view kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                    "bool", "string", "array", "u64", "i64", "f64"};
      return fmt::format("[{} x {}]", kNames[static_cast<uint32_t>(array_type)], array_count);
    }
  }
  return "?";
}

ParsedGguf parse_gguf_header(const uint8_t* bytes, size_t file_size, const std::string& path) {
  if (file_size == 0) fail(ErrorCode::Format, "{}: empty file (0 bytes), not a GGUF file", path);
  Reader r(bytes, file_size, path);
  if (file_size < 4) fail(ErrorCode::Format, "{}: {} bytes, too short for a GGUF file", path, file_size);
  const uint32_t magic = r.read<uint32_t>("the magic");
  if (magic != kMagic)
    fail(ErrorCode::Format, "{}: no GGUF magic (the file does not start with \"GGUF\")", path);
  ParsedGguf parsed;
  parsed.version = r.read<uint32_t>("the version");
  if (parsed.version == 1)
    fail(ErrorCode::Unsupported,
         "{}: GGUF version 1 (32-bit counts) is not supported; convert it to version 3", path);
  if (parsed.version != 2 && parsed.version != 3) {
    const bool swapped = __builtin_bswap32(parsed.version) == 2 || __builtin_bswap32(parsed.version) == 3;
    fail(ErrorCode::Unsupported, "{}: GGUF version {} is not supported (2 and 3 are){}", path, parsed.version,
         swapped ? "; this looks like a big-endian file" : "");
  }
  const uint64_t tensor_count = r.read<uint64_t>("the tensor count");
  const uint64_t kv_count = r.read<uint64_t>("the key-value count");
  // A key-value takes at least 13 bytes (length, type, one byte of value); a tensor info at least
  // 28 (name length, rank, type, offset).
  if (kv_count > r.left() / 13)
    fail(ErrorCode::Format, "{}: key-value count {} cannot fit in the {} bytes left", path, kv_count,
         r.left());
  if (tensor_count > r.left() / 28)
    fail(ErrorCode::Format, "{}: tensor count {} cannot fit in the {} bytes left", path, tensor_count,
         r.left());

  for (uint64_t k = 0; k < kv_count; ++k) {
    std::string key = r.read_string(fmt::format("key {}", k));
    const std::string what = fmt::format("key {}", quote_name(key));
    if (!is_valid_utf8(key)) fail(ErrorCode::Format, "{}: {} is not valid UTF-8", path, what);
    const uint32_t type = r.read<uint32_t>(what + " type");
    if (!known_value_type(type))
      fail(ErrorCode::Format, "{}: {} has unknown value type {}", path, what, type);
    GgufValue value;
    read_value(r, static_cast<GgufValueType>(type), &value, what, path, 0);
    if (!parsed.metadata.emplace(key, std::move(value)).second)
      fail(ErrorCode::Format, "{}: {} appears twice", path, what);
  }

  auto align_it = parsed.metadata.find("general.alignment");
  parsed.alignment = kDefaultAlignment;
  if (align_it != parsed.metadata.end()) {
    const GgufValue& a = align_it->second;
    if (a.type != GgufValueType::U32) fail(ErrorCode::Format, "{}: general.alignment is not a u32", path);
    if (a.u == 0 || (a.u & (a.u - 1)) != 0 || a.u > kMaxAlignment)
      fail(ErrorCode::Format, "{}: general.alignment {} is not a power of two up to {}", path, a.u,
           kMaxAlignment);
    parsed.alignment = a.u;
  }

  std::set<std::string> names;
  parsed.tensors.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t k = 0; k < tensor_count; ++k) {
    GgufTensorInfo t;
    t.name = r.read_string(fmt::format("the name of tensor {}", k));
    const std::string q = quote_name(t.name);
    const std::string what = "tensor " + q;
    if (!is_valid_utf8(t.name)) fail(ErrorCode::Format, "{}: {}: name is not valid UTF-8", path, what);
    if (!names.insert(t.name).second) fail(ErrorCode::Format, "{}: {} appears twice", path, what);
    const uint32_t n_dims = r.read<uint32_t>(what + " rank");
    if (n_dims == 0 || n_dims > kMaxGgufDims)
      fail(ErrorCode::Format, "{}: {}: rank {} (GGUF tensors have 1 to {} extents)", path, what, n_dims,
           kMaxGgufDims);
    uint64_t dims[kMaxGgufDims] = {};
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      dims[d] = r.read<uint64_t>(what + " extents");
      if (dims[d] == 0 || dims[d] > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(numel, dims[d], &numel) || numel > static_cast<uint64_t>(INT64_MAX))
        fail(ErrorCode::Format, "{}: {}: extent {} = {} is zero or makes too many elements", path, what, d,
             dims[d]);
    }
    const uint32_t type_id = r.read<uint32_t>(what + " type");
    t.offset = r.read<uint64_t>(what + " offset");
    if (!quant_type_from_ggml(type_id, &t.type)) {
      const std::string_view name = ggml_type_name(type_id);
      if (!name.empty())
        fail(ErrorCode::Unsupported,
             "{}: {}: type {} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
             "Q5_1, Q2_K..Q6_K are)",
             path, what, name);
      fail(ErrorCode::Format, "{}: {}: unknown type id {}", path, what, type_id);
    }
    const QuantTraits& traits = quant_traits(t.type);
    if (dims[0] % static_cast<uint64_t>(traits.block) != 0)
      fail(ErrorCode::Format, "{}: {}: rows of {} values are not whole {} blocks of {}", path, what, dims[0],
           traits.name, traits.block);
    const uint64_t rows = numel / dims[0];
    uint64_t row_bytes = 0;
    if (__builtin_mul_overflow(dims[0] / static_cast<uint64_t>(traits.block), traits.block_bytes,
                               &row_bytes) ||
        __builtin_mul_overflow(rows, row_bytes, &t.nbytes) || t.nbytes > static_cast<uint64_t>(INT64_MAX))
      fail(ErrorCode::Format, "{}: {}: byte size overflows", path, what);
    if (t.offset % parsed.alignment != 0)
      fail(ErrorCode::Format, "{}: {}: offset {} is not a multiple of the alignment {}", path, what, t.offset,
           parsed.alignment);
    for (uint32_t d = n_dims; d-- > 0;) t.shape.push_back(static_cast<int64_t>(dims[d]));
    parsed.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t header_end = r.pos();
  const uint64_t data_offset = (header_end + parsed.alignment - 1) / parsed.alignment * parsed.alignment;
  if (!parsed.tensors.empty() && data_offset > file_size)
    fail(ErrorCode::Format,
         "{}: the data section would start at byte {}, past the end of the file ({} bytes)", path,
         data_offset, file_size);
  parsed.data_offset = std::min<uint64_t>(data_offset, file_size);
  const uint64_t data_size = file_size - parsed.data_offset;

  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(parsed.tensors.size());
  for (const GgufTensorInfo& t : parsed.tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail(ErrorCode::Format,
           "{}: tensor {}: bytes [{}, {}) run past the data section ({} bytes; truncated?)", path,
           quote_name(t.name), t.offset, t.offset + std::min<uint64_t>(t.nbytes, data_size + 1), data_size);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->name < b->name;
  });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    if (b.offset < a.offset + a.nbytes)
      fail(ErrorCode::Format, "{}: tensors {} [{}, {}) and {} [{}, {}) overlap", path, quote_name(a.name),
           a.offset, a.offset + a.nbytes, quote_name(b.name), b.offset, b.offset + b.nbytes);
  }
  return parsed;
}

}  // namespace fluxrt::io
