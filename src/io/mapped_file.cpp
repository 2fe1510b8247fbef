#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/safetensors.h"

namespace fluxrt::io {

namespace {

// Closes the descriptor on every path out of open(); the mapping outlives it.
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  FdGuard guard;
  do {
    guard.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (guard.fd < 0 && errno == EINTR);
  if (guard.fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      fail(ErrorCode::NotFound, "{}: no such file", path);
    fail(ErrorCode::Io, "{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) fail(ErrorCode::Io, "{}: cannot stat: {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(ErrorCode::Io, "{}: is a directory, expected a file", path);
  if (!S_ISREG(st.st_mode)) fail(ErrorCode::Io, "{}: not a regular file", path);

  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ == 0) return file;  // mmap rejects length 0; callers see an empty file

  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    file->size_ = 0;
    fail(err == ENOMEM ? ErrorCode::OutOfMemory : ErrorCode::Io, "{}: cannot map {} bytes: {}", path,
         static_cast<uint64_t>(st.st_size), std::strerror(err));
  }
  file->data_ = static_cast<const uint8_t*>(p);
  // Weights are read in whatever order the model binds them, and each tensor in one pass; the
  // kernel's default readahead suits that, so no global advice here (see prefetch()).
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::prefetch(size_t offset, size_t bytes) const {
  if (data_ == nullptr || offset >= size_ || bytes == 0) return;
  if (bytes > size_ - offset) bytes = size_ - offset;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;  // madvise needs a page-aligned start
  (void)::madvise(const_cast<uint8_t*>(data_) + begin, offset + bytes - begin, MADV_WILLNEED);
}

}  // namespace fluxrt::io
