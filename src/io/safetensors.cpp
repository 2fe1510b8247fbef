// SafetensorsFile (mmap + validated header), Checkpoint (one file, a sharded index or a folder)
// and the atomic writer. The header parser itself lives in safetensors_header.cpp.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/allocator.h"
#include "core/error.h"
#include "core/log.h"
#include "io/utf8.h"

namespace fluxrt::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kIndexSuffix = ".safetensors.index.json";
constexpr std::string_view kFileSuffix = ".safetensors";
// Index files list names and shard files only; anything this large is not one.
constexpr uintmax_t kMaxIndexBytes = 256ull * 1024 * 1024;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

// ---------------------------------------------------------------- SafetensorsFile

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto file = std::make_shared<SafetensorsFile>();
  file->file_ = MappedFile::open(path);
  file->header_ = parse_safetensors_header(file->file_->data(), file->file_->size(), path);
  for (size_t i = 0; i < file->header_.tensors.size(); ++i) file->by_name_[file->header_.tensors[i].name] = i;
  return file;
}

const std::string& SafetensorsFile::path() const { return file_->path(); }

bool SafetensorsFile::contains(const std::string& name) const { return by_name_.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) fail(ErrorCode::NotFound, "{}: no tensor {}", path(), quote_name(name));
  return header_.tensors[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& t = info(name);
  // The header was validated against the file size, so the window lies inside the mapping.
  auto* data = const_cast<uint8_t*>(file_->data() + header_.data_offset + t.data_begin);
  return Tensor::from_blob(data, t.shape, t.dtype, std::shared_ptr<void>(file_));
}

Tensor SafetensorsFile::tensor_aligned(const std::string& name, size_t alignment) const {
  return ensure_aligned(tensor(name), alignment);
}

Tensor ensure_aligned(const Tensor& t, size_t alignment) {
  if (!t.defined()) return t;
  if (alignment == 0) alignment = t.element_size();
  FLUXRT_CHECK(alignment <= kTensorAlignment && (alignment & (alignment - 1)) == 0, ErrorCode::InvalidArgument,
               "ensure_aligned: alignment {} is not a power of two up to {}", alignment, kTensorAlignment);
  if (reinterpret_cast<uintptr_t>(t.raw_data()) % alignment == 0) return t;
  Tensor copy = Tensor::empty(t.shape(), t.dtype());
  // memcpy rather than copy_from: the source is misaligned, so only byte access is safe on it.
  if (t.is_contiguous())
    std::memcpy(copy.raw_data(), t.raw_data(), t.nbytes());
  else
    copy.copy_from(t);
  return copy;
}

// ---------------------------------------------------------------- Checkpoint

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint ckpt;
  ckpt.path_ = path;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      fail(ErrorCode::Io, "{}: cannot read: {}", path, ec.message());
    fail(ErrorCode::NotFound, "{}: no such file or folder", path);
  }
  if (!fs::is_directory(st)) {
    if (ends_with(path, ".json")) {
      ckpt.open_index(path);
    } else {
      ckpt.add_file(SafetensorsFile::open(path));
      ckpt.metadata_ = ckpt.files_.front()->metadata();
    }
    return ckpt;
  }

  std::vector<std::string> indexes, files;
  fs::directory_iterator it(path, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    std::string name = it->path().filename().string();
    if (ends_with(name, kIndexSuffix))
      indexes.push_back(it->path().string());
    else if (ends_with(name, kFileSuffix))
      files.push_back(it->path().string());
  }
  if (ec) fail(ErrorCode::Io, "{}: cannot list the folder: {}", path, ec.message());
  std::sort(indexes.begin(), indexes.end());
  std::sort(files.begin(), files.end());
  if (indexes.size() > 1) {
    std::string list;
    for (const auto& i : indexes) list += (list.empty() ? "" : ", ") + fs::path(i).filename().string();
    fail(ErrorCode::Format, "{}: {} index files ({}); open the one to use directly", path, indexes.size(), list);
  }
  if (indexes.size() == 1) {
    ckpt.open_index(indexes.front());
    return ckpt;
  }
  if (files.empty())
    fail(ErrorCode::NotFound, "{}: no *.safetensors file or *{} in this folder", path, kIndexSuffix);
  for (const auto& f : files) ckpt.add_file(SafetensorsFile::open(f));
  if (ckpt.files_.size() == 1) ckpt.metadata_ = ckpt.files_.front()->metadata();
  return ckpt;
}

void Checkpoint::add_file(std::shared_ptr<SafetensorsFile> file) {
  const size_t index = files_.size();
  for (const TensorInfo& t : file->tensors()) {
    auto [it, inserted] = where_.emplace(t.name, index);
    if (!inserted)
      fail(ErrorCode::Format, "{}: tensor {} is in both {} and {} (dtype variants of one model? open one file)",
           path_, quote_name(t.name), files_[it->second]->path(), file->path());
  }
  files_.push_back(std::move(file));
}

void Checkpoint::open_index(const std::string& index_path) {
  std::error_code ec;
  uintmax_t bytes = fs::file_size(index_path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) fail(ErrorCode::NotFound, "{}: no such file", index_path);
    fail(ErrorCode::Io, "{}: cannot read: {}", index_path, ec.message());
  }
  if (bytes > kMaxIndexBytes)
    fail(ErrorCode::Format, "{}: {} bytes is too large for a safetensors index", index_path, bytes);
  std::ifstream in(index_path, std::ios::binary);
  if (!in) fail(ErrorCode::Io, "{}: cannot open: {}", index_path, std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorCode::Io, "{}: read failed", index_path);

  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: not valid JSON: {}", index_path, escape_for_message(e.what()));
  }
  if (!root.is_object()) fail(ErrorCode::Format, "{}: expected a JSON object", index_path);
  auto map_it = root.find("weight_map");
  if (map_it == root.end() || !map_it->is_object())
    fail(ErrorCode::Format, "{}: no \"weight_map\" object (not a safetensors index?)", index_path);
  auto meta_it = root.find("metadata");
  if (meta_it != root.end() && meta_it->is_object()) {
    for (const auto& [key, value] : meta_it->items())
      metadata_[key] = value.is_string() ? value.get<std::string>()
                                         : value.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  // Group the names by shard so each shard is opened (and validated) once.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : map_it->items()) {
    if (!shard.is_string() || shard.get_ref<const std::string&>().empty())
      fail(ErrorCode::Format, "{}: weight_map entry {} is not a file name", index_path, quote_name(name));
    const std::string& file = shard.get_ref<const std::string&>();
    if (fs::path(file).is_absolute())
      fail(ErrorCode::Format, "{}: shard {} for tensor {} is an absolute path; shards are relative to the index",
           index_path, quote_name(file), quote_name(name));
    by_shard[file].push_back(name);
  }
  if (by_shard.empty()) fail(ErrorCode::Format, "{}: weight_map is empty", index_path);

  const fs::path dir = fs::path(index_path).parent_path();
  for (const auto& [shard, names] : by_shard) {
    const std::string shard_path = (dir / shard).string();
    std::shared_ptr<SafetensorsFile> file;
    try {
      file = SafetensorsFile::open(shard_path);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::NotFound) throw;
      fail(ErrorCode::NotFound, "{}: shard {} (holding tensor {}) does not exist", index_path, shard_path,
           quote_name(names.front()));
    }
    for (const std::string& name : names) {
      if (!file->contains(name))
        fail(ErrorCode::Format, "{}: tensor {} is mapped to {} but that file has no such tensor", index_path,
             quote_name(name), shard_path);
    }
    const size_t index = files_.size();
    for (const std::string& name : names) where_[name] = index;
    files_.push_back(std::move(file));
  }
  // Tensors present in a shard but missing from the index: diffusers and transformers load whole
  // shards, so keep them, unless the name already belongs to another shard.
  for (size_t i = 0; i < files_.size(); ++i) {
    size_t unlisted = 0;
    for (const TensorInfo& t : files_[i]->tensors())
      if (where_.emplace(t.name, i).second) ++unlisted;
    if (unlisted > 0)
      FLUXRT_LOG_DEBUG("{}: {} tensors in {} are not in the index; kept", index_path, unlisted, files_[i]->path());
  }
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, index] : where_) out.push_back(name);
  return out;
}

bool Checkpoint::contains(const std::string& name) const { return where_.count(name) != 0; }

const SafetensorsFile& Checkpoint::file_for(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(ErrorCode::NotFound, "{}: no tensor {}", path_, quote_name(name));
  return *files_[it->second];
}

const TensorInfo& Checkpoint::info(const std::string& name) const { return file_for(name).info(name); }
Tensor Checkpoint::tensor(const std::string& name) const { return file_for(name).tensor(name); }
Tensor Checkpoint::tensor_aligned(const std::string& name, size_t alignment) const {
  return file_for(name).tensor_aligned(name, alignment);
}
const std::string& Checkpoint::file_of(const std::string& name) const { return file_for(name).path(); }

// ---------------------------------------------------------------- writer

namespace {

// The temporary file of an atomic write: removed unless commit() renamed it into place.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = fmt::format("{}.tmp.{}.{}", target, static_cast<long>(::getpid()), counter++);
      // 0666 through the umask, like any other file the user creates (mkstemp would force 0600).
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0 || errno != EEXIST) break;
    }
    if (fd_ < 0) fail(ErrorCode::Io, "{}: cannot create a temporary file: {}", target, std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
      // Linux writes at most ~2 GiB per call; loop over partial writes and EINTR.
      ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(ErrorCode::Io, "{}: write failed: {}", target_, std::strerror(errno));
      }
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  void commit(bool sync) {
    if (sync && ::fsync(fd_) != 0) fail(ErrorCode::Io, "{}: fsync failed: {}", target_, std::strerror(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail(ErrorCode::Io, "{}: close failed: {}", target_, std::strerror(errno));
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      fail(ErrorCode::Io, "{}: cannot rename the temporary file into place: {}", target_, std::strerror(errno));
    committed_ = true;
    if (sync) {
      // The rename is durable only once the folder is synced too.
      std::string dir = fs::path(target_).parent_path().string();
      int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        (void)::fsync(dfd);
        ::close(dfd);
      }
    }
  }

 private:
  std::string target_;
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, const WriteOptions& options) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    if (!is_valid_utf8(name))
      fail(ErrorCode::InvalidArgument, "{}: tensor name {} is not valid UTF-8", path, quote_name(name));
    if (name == "__metadata__")
      fail(ErrorCode::InvalidArgument, "{}: \"__metadata__\" is reserved and cannot name a tensor", path);
    if (!seen.insert(name).second)
      fail(ErrorCode::InvalidArgument, "{}: tensor {} is given twice", path, quote_name(name));
    if (!t.defined()) fail(ErrorCode::InvalidArgument, "{}: tensor {} is undefined", path, quote_name(name));
    if (!t.device().is_cpu())
      fail(ErrorCode::InvalidArgument, "{}: tensor {} is on {}; copy it to the host first", path,
           quote_name(name), t.device().str());
  }
  for (const auto& [key, value] : metadata) {
    if (!is_valid_utf8(key) || !is_valid_utf8(value))
      fail(ErrorCode::InvalidArgument, "{}: metadata entry {} is not valid UTF-8", path, quote_name(key));
  }

  // Largest elements first: with the data section 8-byte aligned, every tensor then starts at a
  // multiple of its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    size_t ea = tensors[a].second.element_size(), eb = tensors[b].second.element_size();
    if (ea != eb) return ea > eb;
    return tensors[a].first < tensors[b].first;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    const uint64_t bytes = t.nbytes();
    header[name] = {{"dtype", std::string(dtype_safetensors_name(t.dtype()))},
                    {"shape", t.shape().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Spaces up to a multiple of 8, as the reference writer pads, so the data section is aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  TempFile out(path);
  uint8_t length[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(length, sizeof(length));
  out.write(text.data(), text.size());
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    if (t.numel() == 0) continue;
    Tensor c = t.contiguous();
    out.write(c.raw_data(), c.nbytes());
  }
  out.commit(options.fsync);
}

}  // namespace fluxrt::io
