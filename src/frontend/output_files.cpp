// Output files of `fluxrt generate` (frontend/output_files.h, fluxrt::write_run_images).
#include "frontend/output_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/error.h"
#include "fluxrt/run.h"
#include "runtime/timing_report.h"

namespace fluxrt::frontend {
namespace fs = std::filesystem;

namespace {

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

}  // namespace

void check_output_dir_writable(const fs::path& dir) {
  FLUXRT_CHECK(!dir.empty(), ErrorCode::InvalidArgument, "--out: empty folder name");
  std::error_code ec;
  fs::path probe = fs::absolute(dir, ec);
  if (ec) probe = dir;
  // The folder itself, or the nearest ancestor that exists (the folder is created at write time).
  while (!path_exists(probe) && probe.has_parent_path() && probe.parent_path() != probe)
    probe = probe.parent_path();
  FLUXRT_CHECK(fs::is_directory(probe, ec), ErrorCode::Io, "output folder {}: {} is not a folder",
               dir.string(), probe.string());
  FLUXRT_CHECK(::access(probe.c_str(), W_OK | X_OK) == 0, ErrorCode::Io,
               "output folder {}: {} is not writable ({})", dir.string(), probe.string(),
               std::strerror(errno));
}

std::string format_output_name(const std::string& pattern, const OutputNameFields& f) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') {
      FLUXRT_CHECK(pattern[i] != '}', ErrorCode::InvalidArgument, "file name pattern '{}': unmatched '}}'",
                   pattern);
      out += pattern[i];
      continue;
    }
    const size_t close = pattern.find('}', i);
    FLUXRT_CHECK(close != std::string::npos, ErrorCode::InvalidArgument,
                 "file name pattern '{}': unclosed '{{'", pattern);
    const std::string key = pattern.substr(i + 1, close - i - 1);
    if (key == "seed")
      out += std::to_string(f.seed);
    else if (key == "index")
      out += std::to_string(f.index);
    else if (key == "prompt_index")
      out += std::to_string(f.prompt_index);
    else if (key == "image_index")
      out += std::to_string(f.image_index);
    else if (key == "width")
      out += std::to_string(f.width);
    else if (key == "height")
      out += std::to_string(f.height);
    else if (key == "steps")
      out += std::to_string(f.steps);
    else
      fail(ErrorCode::InvalidArgument,
           "file name pattern '{}': unknown placeholder {{{}}} (known: seed, index, prompt_index, "
           "image_index, width, "
           "height, steps)",
           pattern, key);
    i = close;
  }
  FLUXRT_CHECK(out.find('/') == std::string::npos && out.find('\0') == std::string::npos,
               ErrorCode::InvalidArgument,
               "file name pattern '{}' must be a file name, not a path (use --out for the folder)", pattern);
  if (out.size() < 4 || out.compare(out.size() - 4, 4, ".png") != 0) out += ".png";
  FLUXRT_CHECK(out != ".png" && out[0] != '.', ErrorCode::InvalidArgument,
               "file name pattern '{}' gives a hidden or empty name '{}'", pattern, out);
  return out;
}

fs::path reserve_output_path(const fs::path& dir, const std::string& name) {
  const std::string stem = name.substr(0, name.size() - 4), ext = ".png";
  for (int attempt = 0; attempt < 100000; ++attempt) {
    const fs::path candidate = dir / (attempt == 0 ? name : fmt::format("{}-{}{}", stem, attempt, ext));
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return candidate;
    }
    FLUXRT_CHECK(errno == EEXIST, ErrorCode::Io, "cannot create {}: {}", candidate.string(),
                 std::strerror(errno));
  }
  fail(ErrorCode::Io, "no free file name for {} in {}", name, dir.string());
}

std::vector<fs::path> write_numbered_pngs(
    const fs::path& dir, const std::string& pattern, const OutputNameFields& run, int images_per_prompt,
    size_t count, const std::function<void(size_t index, const fs::path& path)>& write) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  FLUXRT_CHECK(!ec && fs::is_directory(dir, ec), ErrorCode::Io, "cannot create output folder {}: {}",
               dir.string(), ec.message());
  std::vector<fs::path> written;
  for (size_t i = 0; i < count; ++i) {
    OutputNameFields f = run;
    f.index = static_cast<int>(i);
    f.prompt_index = f.index / images_per_prompt;
    f.image_index = f.index % images_per_prompt;
    const fs::path path = reserve_output_path(dir, format_output_name(pattern, f));
    try {
      write(i, path);
    } catch (...) {
      fs::remove(path, ec);  // the empty placeholder
      throw;
    }
    written.push_back(path);
  }
  return written;
}

}  // namespace fluxrt::frontend

namespace fluxrt {
namespace fs = std::filesystem;

std::vector<std::string> write_run_images(const Run& run, const GenerateResult& result) {
  frontend::OutputNameFields fields;
  fields.seed = run.request.seed;
  fields.width = result.width;
  fields.height = result.height;
  fields.steps = result.steps;
  const std::vector<fs::path> paths = frontend::write_numbered_pngs(
      run.out_dir, run.filename_pattern, fields, run.request.images_per_prompt, result.images.size(),
      [&](size_t i, const fs::path& path) {
        write_png(path.string(), result.images[i].image, metadata_text(result.images[i].metadata));
      });
  std::vector<std::string> out;
  for (const fs::path& p : paths) out.push_back(p.string());
  return out;
}

void write_text_file(const std::string& path, const std::string& contents) {
  runtime::write_file_atomically(path, contents);
}

}  // namespace fluxrt
