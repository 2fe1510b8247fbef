#pragma once
// GGUF (versions 2 and 3) over mmap, with the discipline of safetensors.h: the header is validated
// completely before any tensor is used (magic, version, counts against the bytes left, every
// string length, key-value type and array length, tensor ranks and extents with overflow checks,
// the alignment, each tensor's type, byte size and offset inside the data section, no overlaps,
// no duplicate names or keys). Tensors are zero-copy views into the mapping.
//
// Every error is a fluxrt::Error with a one-line message naming the file and, where one is
// involved, the tensor or key (quoted and escaped by quote_name). Format: not a valid GGUF file;
// Unsupported: valid, but a version or tensor type this engine does not run (named: "IQ2_XXS").
//
// Layout: "GGUF" | u32 version | u64 tensor count | u64 key-value count | key-values | tensor
// infos | padding to the alignment | data section. Strings are a u64 length and UTF-8 bytes.
// GGUF lists a tensor's extents innermost first; shapes here are in PyTorch order (reversed), so
// a linear's weight is [out, in] with blocks running along `in`.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/quant.h"
#include "core/tensor.h"
#include "io/safetensors.h"

namespace fluxrt::io {

// GGUF's metadata value types (the numbers are the format's).
enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// One metadata value. Scalars keep their value; strings their text; arrays their element type
// and count, and their text elements when they are strings (tokenizer vocabularies), else none.
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  uint64_t u = 0;  // unsigned integers and bool
  int64_t i = 0;   // signed integers
  double f = 0;    // floats
  std::string s;
  GgufValueType array_type = GgufValueType::U8;
  uint64_t array_count = 0;
  std::vector<std::string> strings;
  // "3", "\"flux\"", "[string x 151936]": for `fluxrt info`.
  std::string str() const;
  // The value of a numeric scalar (integer or float), else nothing (strings, arrays, bools).
  std::optional<double> number() const;
};

struct GgufTensorInfo {
  std::string name;
  QuantType type = QuantType::F32;
  Shape shape;          // PyTorch order (GGUF's extents reversed)
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  int64_t numel() const { return shape.numel(); }
};

struct ParsedGguf {
  uint32_t version = 0;
  uint64_t alignment = 32;
  // Where the data section starts in the file: a multiple of `alignment`, except in a file with no
  // tensors whose writer left out the padding after the header, where it is the file's size.
  uint64_t data_offset = 0;
  std::vector<GgufTensorInfo> tensors;  // in file (header) order
  std::map<std::string, GgufValue> metadata;
};

// Parses and validates a GGUF header held in memory (the fuzzer's entry point): `bytes` is the
// whole file of `file_size` bytes. Errors name `path_for_errors`.
ParsedGguf parse_gguf_header(const uint8_t* bytes, size_t file_size, const std::string& path_for_errors);

// True when the first bytes of `path` are GGUF's magic (an unreadable file is not).
bool is_gguf_file(const std::string& path);

class GgufFile {
 public:
  static std::shared_ptr<GgufFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return header_.version; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, GgufValue>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const { return by_name_.count(name) != 0; }
  const GgufTensorInfo& info(const std::string& name) const;  // NotFound naming file and tensor
  // The tensor's bytes as a [rows, cols] quantized matrix (cols = the innermost extent, rows the
  // product of the others), zero-copy; keeps the mapping alive.
  QuantizedMatrix matrix(const std::string& name) const;
  // A dense tensor in PyTorch shape: F32 / F16 / BF16 as a zero-copy view (copied when the file's
  // alignment leaves it misaligned for its element size), block types dequantized into f32.
  Tensor tensor(const std::string& name) const;
  const MappedFile& mapping() const { return *file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  ParsedGguf header_;
  std::map<std::string, size_t> by_name_;
};

// One tensor to write: `bytes` holds rows x quant_row_bytes(type, shape[-1]) bytes, shape in
// PyTorch order (written reversed, GGUF's way).
struct GgufTensorToWrite {
  std::string name;
  QuantType type = QuantType::F32;
  Shape shape;
  std::vector<uint8_t> bytes;
};

// Writes a GGUF v3 file atomically (a temporary file in the same folder, then rename), data
// aligned to 32 bytes, tensors in the given order. Metadata values: scalars, strings and arrays of
// strings (GgufValue::strings); `general.alignment` is written by the writer. InvalidArgument for
// duplicate names, sizes that do not match, fp8 types (not GGUF's).
void write_gguf(const std::string& path, const std::vector<GgufTensorToWrite>& tensors,
                const std::vector<std::pair<std::string, GgufValue>>& metadata);

}  // namespace fluxrt::io
