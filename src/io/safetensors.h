#pragma once
// safetensors over mmap: the header is validated completely before any tensor is used (header
// length inside the file, valid JSON, known dtypes, offsets inside the data section, no overlaps,
// byte size = element count x element size). Tensors are zero-copy views into the mapping.
//
// Every error is a fluxrt::Error with a one-line message that names the file and, where one is
// involved, the tensor (names are printed quoted and escaped, so a hostile name cannot break the
// line). Format: the bytes are not a valid safetensors file; Unsupported: valid, but a dtype or
// rank this engine does not handle; NotFound / Io: the file system.
//
// Views are read-only: the mapping is PROT_READ, so writing through Tensor::data() of a view
// faults. Call clone() for a writable copy. As with any mapping, a file truncated by another
// process while mapped raises SIGBUS when the missing pages are read; replace files by rename
// (as write_safetensors does), never by rewriting them in place.
//
// Alignment: the format does not promise that a tensor's data is aligned to its element size
// (files written by PyTorch usually are, files with odd-sized bool/u8 tensors may not be). A view
// is always valid for byte access (memcpy, convert); code that loads elements through typed
// pointers or SIMD must use tensor_aligned() / ensure_aligned(), which copy only when needed.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace fluxrt::io {

// Headers larger than this are rejected before any parsing (real ones are well under 10 MB).
inline constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t data_begin = 0;  // byte offsets relative to the start of the data section
  uint64_t data_end = 0;
  size_t nbytes() const { return static_cast<size_t>(data_end - data_begin); }
  int64_t numel() const { return shape.numel(); }
};

// A read-only memory mapping of a whole file. An empty file maps to data() == nullptr, size() 0.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);  // Io / NotFound errors
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Asks the kernel to read [offset, offset + bytes) ahead (MADV_WILLNEED); a hint, never fails.
  void prefetch(size_t offset, size_t bytes) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Parses and validates a safetensors header held in memory (the fuzzer's entry point).
// `bytes` holds the first `file_size` bytes of the file (the whole file); only the 8-byte length
// and the header are read. Errors name `path_for_errors`.
struct ParsedHeader {
  std::vector<TensorInfo> tensors;  // in file order of their data offsets (ties by name)
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
  uint64_t data_size = 0;    // file_size - data_offset
};
ParsedHeader parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                      const std::string& path_for_errors);

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const;
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  uint64_t data_offset() const { return header_.data_offset; }
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // NotFound naming file and tensor
  // A zero-copy view of the tensor's bytes; keeps the mapping alive. May be misaligned (above).
  Tensor tensor(const std::string& name) const;
  // The view when its data is aligned to `alignment` bytes (0: the element size), else a copy.
  Tensor tensor_aligned(const std::string& name, size_t alignment = 0) const;
  const MappedFile& mapping() const { return *file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  ParsedHeader header_;
  std::map<std::string, size_t> by_name_;
};

// `t` when its data pointer is aligned to `alignment` bytes (0: the element size), else a
// contiguous, 64-byte aligned copy.
Tensor ensure_aligned(const Tensor& t, size_t alignment = 0);

// All tensors of one checkpoint: a single .safetensors file, a sharded checkpoint through its
// *.safetensors.index.json, or a folder holding either (one index or *.safetensors files).
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // NotFound naming checkpoint and tensor
  Tensor tensor(const std::string& name) const;
  Tensor tensor_aligned(const std::string& name, size_t alignment = 0) const;
  const std::string& file_of(const std::string& name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  size_t size() const { return where_.size(); }
  const std::string& path() const { return path_; }
  // The index's "metadata" object (e.g. total_size) for sharded checkpoints, else the single
  // file's __metadata__; values that are not strings are kept as their JSON text.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  const SafetensorsFile& file_for(const std::string& name) const;
  void add_file(std::shared_ptr<SafetensorsFile> file);
  void open_index(const std::string& index_path);
  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
  std::map<std::string, std::string> metadata_;
};

struct WriteOptions {
  bool fsync = false;  // fsync the file (and its folder) before returning: durable, but slower
};

// Writes tensors (any strides; stored contiguous) atomically: a temporary file in the same
// folder, then rename; the temporary is removed on failure. Tensors are laid out by element size
// (largest first) then name, so every tensor in the file is aligned to its element size. Names
// must be unique, valid UTF-8 and not "__metadata__" (InvalidArgument otherwise).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const WriteOptions& options = {});

// Quotes and escapes a name for an error message: control bytes, quotes and bytes that are not
// valid UTF-8 become \n, \", \xff..., so the message stays on one line.
std::string quote_name(std::string_view name);

}  // namespace fluxrt::io
