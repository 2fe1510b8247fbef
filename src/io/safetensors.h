#pragma once
// safetensors over mmap: the header is validated completely before any tensor is used (header
// length inside the file, valid JSON, known dtypes, offsets inside the data section, no overlaps,
// byte size = element count x element size). Tensors are zero-copy views into the mapping.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace fluxrt::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t data_begin = 0;  // byte offsets relative to the start of the data section
  uint64_t data_end = 0;
  size_t nbytes() const { return static_cast<size_t>(data_end - data_begin); }
};

// A read-only memory mapping of a whole file.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);  // Io / NotFound errors
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Parses and validates a safetensors header held in memory (the fuzzer's entry point).
// `file_size` is the size of the whole file; errors name `path_for_errors`.
struct ParsedHeader {
  std::vector<TensorInfo> tensors;  // in file order of their data offsets
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};
ParsedHeader parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                      const std::string& path_for_errors);

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const;
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // NotFound naming file and tensor
  // A zero-copy view of the tensor's bytes; keeps the mapping alive.
  Tensor tensor(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  ParsedHeader header_;
  std::map<std::string, size_t> by_name_;
};

// All tensors of one checkpoint: a single .safetensors file, a sharded checkpoint through its
// *.safetensors.index.json, or a folder holding either (one index or *.safetensors files).
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  size_t size() const { return where_.size(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// Writes tensors (any strides; stored contiguous) atomically: a temporary file, then rename.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace fluxrt::io
