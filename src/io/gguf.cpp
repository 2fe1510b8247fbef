// GgufFile: the mapping and zero-copy views of a validated GGUF header (gguf_header.cpp).
#include "io/gguf.h"

#include <fstream>

#include "core/error.h"

namespace fluxrt::io {

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  if (!in.read(magic, 4)) return false;
  return magic[0] == 'G' && magic[1] == 'G' && magic[2] == 'U' && magic[3] == 'F';
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto file = std::make_shared<GgufFile>();
  file->file_ = MappedFile::open(path);
  file->header_ = parse_gguf_header(file->file_->data(), file->file_->size(), path);
  for (size_t i = 0; i < file->header_.tensors.size(); ++i) file->by_name_[file->header_.tensors[i].name] = i;
  return file;
}

const GgufTensorInfo& GgufFile::info(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) fail(ErrorCode::NotFound, "{}: no tensor {}", path(), quote_name(name));
  return header_.tensors[it->second];
}

QuantizedMatrix GgufFile::matrix(const std::string& name) const {
  const GgufTensorInfo& t = info(name);
  QuantizedMatrix q;
  q.type = t.type;
  q.cols = t.shape[t.shape.size() - 1];
  q.rows = t.numel() / q.cols;
  // The header was validated against the file size, so the window lies inside the mapping.
  auto* data = const_cast<uint8_t*>(file_->data() + header_.data_offset + t.offset);
  q.bytes =
      Tensor::from_blob(data, {static_cast<int64_t>(t.nbytes)}, DType::U8, std::shared_ptr<void>(file_));
  return q;
}

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo& t = info(name);
  const QuantizedMatrix q = matrix(name);
  DType dtype = DType::F32;
  switch (t.type) {
    case QuantType::F32:
      dtype = DType::F32;
      break;
    case QuantType::F16:
      dtype = DType::F16;
      break;
    case QuantType::BF16:
      dtype = DType::BF16;
      break;
    default:
      return dequantize_ref(q).reshape(t.shape);
  }
  Tensor view =
      Tensor::from_blob(const_cast<uint8_t*>(q.row(0)), t.shape, dtype, std::shared_ptr<void>(file_));
  return ensure_aligned(view);
}

}  // namespace fluxrt::io
