#pragma once
// Model folders and files for the discovery, detection and inspection tests: a per-test temporary
// folder, small text files, and safetensors files of any size that hold only a header (sparse:
// real-size shapes such as a 3072 x 4096 txt_in cost no disk space or time).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace fluxrt::test {

// A fresh folder under the system's temporary folder, named after the running test, removed with
// everything in it when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void write_text(const std::filesystem::path& path, const std::string& text);

using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// A valid safetensors file whose tensors are all bf16 zeros, written sparse (header + truncate).
void write_header_only(const std::filesystem::path& path, const TensorList& tensors);

// The tensors variant detection looks at, for a BFL-layout file of the given size.
TensorList bfl_skeleton(const std::string& prefix, bool flux2, int64_t hidden, int64_t in, int64_t ctx,
                        int64_t n_double, int64_t n_single, bool guidance);

// Copies `source` into a hub cache as huggingface_hub lays it out: each file's bytes under
// blobs/<name>, snapshots/<rev>/<path> a relative symlink to it, refs/main naming the revision.
std::filesystem::path make_hub_repo(const std::filesystem::path& hub, const std::string& repo_folder,
                                    const std::filesystem::path& source, const std::string& revision,
                                    bool write_ref_main);

// The message of the fluxrt::Error `fn` throws (its code into *code), or "(no error)".
std::string message_of(const std::function<void()>& fn, ErrorCode* code = nullptr);

}  // namespace fluxrt::test
