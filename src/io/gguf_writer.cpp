// write_gguf: the GGUF v3 writer behind `fluxrt quantize` (layout in gguf.h).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/error.h"
#include "io/gguf.h"

namespace fluxrt::io {
namespace {

constexpr uint64_t kAlignment = 32;

class Buffer {
 public:
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  void pad() { bytes_.append((kAlignment - bytes_.size() % kAlignment) % kAlignment, '\0'); }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

void write_value(Buffer& b, const std::string& key, const GgufValue& v) {
  b.u32(static_cast<uint32_t>(v.type));
  switch (v.type) {
    case GgufValueType::U8: {
      const uint8_t x = static_cast<uint8_t>(v.u);
      b.raw(&x, 1);
      break;
    }
    case GgufValueType::Bool: {
      const uint8_t x = v.u ? 1 : 0;
      b.raw(&x, 1);
      break;
    }
    case GgufValueType::U32:
      b.u32(static_cast<uint32_t>(v.u));
      break;
    case GgufValueType::I32: {
      const int32_t x = static_cast<int32_t>(v.i);
      b.raw(&x, 4);
      break;
    }
    case GgufValueType::U64:
      b.u64(v.u);
      break;
    case GgufValueType::I64:
      b.raw(&v.i, 8);
      break;
    case GgufValueType::F32: {
      const float x = static_cast<float>(v.f);
      b.raw(&x, 4);
      break;
    }
    case GgufValueType::F64:
      b.raw(&v.f, 8);
      break;
    case GgufValueType::String:
      b.str(v.s);
      break;
    case GgufValueType::Array:
      if (v.array_type != GgufValueType::String)
        fail(ErrorCode::InvalidArgument, "write_gguf: key {}: only arrays of strings can be written",
             quote_name(key));
      b.u32(static_cast<uint32_t>(GgufValueType::String));
      b.u64(v.strings.size());
      for (const std::string& s : v.strings) b.str(s);
      break;
    default:
      fail(ErrorCode::InvalidArgument, "write_gguf: key {}: value type {} cannot be written", quote_name(key),
           static_cast<uint32_t>(v.type));
  }
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(ErrorCode::Io, "{}: write failed: {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_gguf(const std::string& path, const std::vector<GgufTensorToWrite>& tensors,
                const std::vector<std::pair<std::string, GgufValue>>& metadata) {
  std::set<std::string> names;
  for (const GgufTensorToWrite& t : tensors) {
    if (!names.insert(t.name).second)
      fail(ErrorCode::InvalidArgument, "{}: tensor {} is given twice", path, quote_name(t.name));
    const QuantTraits& q = quant_traits(t.type);
    if (q.ggml_id < 0)
      fail(ErrorCode::InvalidArgument, "{}: tensor {}: {} is not a GGUF type", path, quote_name(t.name),
           q.name);
    const int64_t cols = t.shape.size() > 0 ? t.shape[t.shape.size() - 1] : 0;
    if (t.shape.size() < 1 || t.shape.size() > 4 || cols % q.block != 0 ||
        t.bytes.size() != static_cast<size_t>(t.shape.numel() / cols) * quant_row_bytes(t.type, cols))
      fail(ErrorCode::InvalidArgument, "{}: tensor {}: {} bytes do not hold {} {}", path, quote_name(t.name),
           t.bytes.size(), q.name, t.shape.str());
  }
  Buffer h;
  h.raw("GGUF", 4);
  h.u32(3);
  h.u64(tensors.size());
  h.u64(metadata.size() + 1);
  GgufValue alignment;
  alignment.type = GgufValueType::U32;
  alignment.u = kAlignment;
  h.str("general.alignment");
  write_value(h, "general.alignment", alignment);
  for (const auto& [key, value] : metadata) {
    if (key == "general.alignment")
      fail(ErrorCode::InvalidArgument, "{}: general.alignment is the writer's", path);
    h.str(key);
    write_value(h, key, value);
  }
  uint64_t offset = 0;
  for (const GgufTensorToWrite& t : tensors) {
    h.str(t.name);
    h.u32(static_cast<uint32_t>(t.shape.size()));
    for (int d = t.shape.size() - 1; d >= 0; --d) h.u64(static_cast<uint64_t>(t.shape[d]));
    h.u32(static_cast<uint32_t>(quant_traits(t.type).ggml_id));
    h.u64(offset);
    offset += (t.bytes.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  h.pad();

  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, static_cast<long>(::getpid()), counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(ErrorCode::Io, "{}: cannot create {}: {}", path, tmp, std::strerror(errno));
  try {
    write_all(fd, h.bytes().data(), h.bytes().size(), path);
    static const char zeros[kAlignment] = {};
    for (const GgufTensorToWrite& t : tensors) {
      write_all(fd, reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size(), path);
      write_all(fd, zeros, (kAlignment - t.bytes.size() % kAlignment) % kAlignment, path);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(ErrorCode::Io, "{}: close failed: {}", path, std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(ErrorCode::Io, "{}: cannot rename the temporary file into place: {}", path, std::strerror(e));
  }
}

}  // namespace fluxrt::io
