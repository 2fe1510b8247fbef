#include "support/model_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace fluxrt::test {

namespace fs = std::filesystem;

TempDir::TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  path_ = fs::temp_directory_path() /
          (std::string("fluxrt_discovery_") + info->name() + "_" + std::to_string(::getpid()));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

void write_header_only(const fs::path& path, const TensorList& tensors) {
  nlohmann::ordered_json header;
  uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 2;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    header[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  fs::create_directories(path.parent_path());
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t len = text.size();
    char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    out.write(bytes, 8);
    out << text;
  }
  fs::resize_file(path, 8 + text.size() + offset);
}

TensorList bfl_skeleton(const std::string& prefix, bool flux2, int64_t hidden, int64_t in, int64_t ctx,
                        int64_t n_double, int64_t n_single, bool guidance) {
  TensorList t;
  t.push_back({prefix + "img_in.weight", {hidden, in}});
  t.push_back({prefix + "txt_in.weight", {hidden, ctx}});
  t.push_back({prefix + "time_in.in_layer.weight", {hidden, 256}});
  if (flux2) {
    t.push_back({prefix + "single_stream_modulation.lin.weight", {3, hidden}});  // shape irrelevant here
  } else {
    t.push_back({prefix + "vector_in.in_layer.weight", {hidden, 768}});
  }
  if (guidance) t.push_back({prefix + "guidance_in.in_layer.weight", {hidden, 256}});
  for (int64_t i = 0; i < n_double; ++i)
    t.push_back({prefix + "double_blocks." + std::to_string(i) + ".img_attn.norm.query_norm.scale", {128}});
  for (int64_t i = 0; i < n_single; ++i)
    t.push_back({prefix + "single_blocks." + std::to_string(i) + ".norm.query_norm.scale", {128}});
  return t;
}

fs::path make_hub_repo(const fs::path& hub, const std::string& repo_folder, const fs::path& source,
                       const std::string& revision, bool write_ref_main) {
  const fs::path repo = hub / repo_folder;
  const fs::path snapshot = repo / "snapshots" / revision;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  int counter = 0;
  for (const auto& entry : fs::recursive_directory_iterator(source)) {
    if (!entry.is_regular_file()) continue;
    const fs::path rel = fs::relative(entry.path(), source);
    const std::string blob = revision + "-blob" + std::to_string(counter++);
    fs::copy_file(entry.path(), repo / "blobs" / blob);
    fs::create_directories((snapshot / rel).parent_path());
    fs::path up;
    for (size_t i = 0; i < static_cast<size_t>(std::distance(rel.begin(), rel.end())) + 1; ++i) up /= "..";
    fs::create_symlink(up / "blobs" / blob, snapshot / rel);
  }
  if (write_ref_main) write_text(repo / "refs" / "main", revision + "\n");
  return snapshot;
}

std::string message_of(const std::function<void()>& fn, ErrorCode* code) {
  try {
    fn();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "(no error)";
}

}  // namespace fluxrt::test
