#pragma once
// Where `fluxrt generate` writes: the output folder checked before a run, file names from a
// pattern, and PNGs written without ever overwriting a file (fluxrt::write_run_images).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace fluxrt::frontend {

// Last-resort defaults, used when neither the flags nor the preset say (configs/default.yaml
// normally does).
inline constexpr const char* kDefaultOutDir = "outputs";
inline constexpr const char* kDefaultFilenamePattern = "fluxrt-{seed}-{index}.png";

// The folder exists and is writable, or can be created under a writable ancestor; Io otherwise.
void check_output_dir_writable(const std::filesystem::path& dir);

// File-name patterns: {seed}, {index} (image in the request, 0-based), {prompt_index},
// {image_index} (repetition of its prompt), {width}, {height}, {steps}. ".png" is appended when
// missing. InvalidArgument for an unknown placeholder, a '/' or an empty name.
struct OutputNameFields {
  uint64_t seed = 0;
  int index = 0, prompt_index = 0, image_index = 0;
  int width = 0, height = 0, steps = 0;
};
std::string format_output_name(const std::string& pattern, const OutputNameFields& fields);

// Creates `dir/name` exclusively (an empty placeholder), or `stem-1.png`, `stem-2.png`, ... when
// taken, so concurrent writers and earlier runs are never overwritten; returns the reserved path.
std::filesystem::path reserve_output_path(const std::filesystem::path& dir, const std::string& name);

// Reserves a name per image in `dir` (created when missing) from `pattern` with `run`'s seed, size
// and steps and each image's indices, and calls write(index, path) for it; a failed write removes
// its placeholder and rethrows. Returns the paths in order.
std::vector<std::filesystem::path> write_numbered_pngs(
    const std::filesystem::path& dir, const std::string& pattern, const OutputNameFields& run,
    int images_per_prompt, size_t count,
    const std::function<void(size_t index, const std::filesystem::path& path)>& write);

}  // namespace fluxrt::frontend
