// `fluxrt generate` smoke tests: runs the built binary on the tiny FLUX.2 klein pipeline folder at
// 64x64 with 2 steps. Checks the PNGs and their text chunks, --profile JSON, names that never
// overwrite, prompts files, presets, progress/quiet output, Ctrl-C, and that every bad input is
// one "fluxrt: error: ..." line with a non-zero exit code and no file in --out.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/image.h"

extern char** environ;

namespace fs = std::filesystem;

namespace {

const fs::path kBinary = fs::path(FLUXRT_BINARY_DIR) / "fluxrt";
const fs::path kTiny = fs::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny";

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

class CliGenerate : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBinary)) GTEST_SKIP() << kBinary << " not built (build the fluxrt target)";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tmp_ = fs::temp_directory_path() / (std::string("fluxrt_gen_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    out_ = tmp_ / "out";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  // `fluxrt generate <tiny model, 64x64, 2 steps, seed 7, bf16, --out out_> <args>`; an empty hub
  // cache and no preset folder of the user's. bf16 because the f32 path is ~30x slower on this
  // model at the moment (oneDNN f32 matmul with the gated-residual post-op) and these are
  // default-suite tests.
  RunResult generate(const std::string& args, bool tiny_defaults = true) {
    return run("generate " + args, tiny_defaults);
  }
  RunResult run(const std::string& args_after_command, bool tiny_defaults) {
    const std::string command = args_after_command.substr(0, args_after_command.find(' '));
    const std::string args = args_after_command.substr(command.size());
    std::string cmd = "HF_HUB_CACHE=" + quote((tmp_ / "hub").string()) + " FLUXRT_CONFIG_DIR= " + quote(kBinary.string()) +
                      " " + command + " ";
    if (tiny_defaults)
      cmd += "--model " + quote(kTiny.string()) + " --size 64x64 --steps 2 --seed 7 --dtype bf16 --threads 1 --out " +
             quote(out_.string()) + " ";
    cmd += args + " >" + quote((tmp_ / "stdout").string()) + " 2>" + quote((tmp_ / "stderr").string());
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(tmp_ / "stdout");
    r.err = read_file(tmp_ / "stderr");
    return r;
  }

  static void expect_one_line_error(const RunResult& r, const std::string& must_contain) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.rfind("fluxrt: error: ", 0), 0u) << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(must_contain), std::string::npos) << r.err;
  }

  size_t files_in_out() const {
    if (!fs::exists(out_)) return 0;
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(out_)) ++n;
    return n;
  }

  // A small valid PNG to use as a reference image.
  fs::path write_reference_png() const {
    fluxrt::io::Image img;
    img.width = 80;
    img.height = 64;
    img.channels = 3;
    img.pixels.resize(img.row_bytes() * img.height);
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7);
    const fs::path p = tmp_ / "ref.png";
    fluxrt::io::write_png(p.string(), img);
    return p;
  }

  fs::path tmp_, out_;
};

}  // namespace

TEST_F(CliGenerate, WritesPngsWithTextChunksAndProfile) {
  const fs::path profile = tmp_ / "profile.json";
  const RunResult r = generate("--prompt 'a red circle' --batch 2 --negative-prompt 'dull' --profile " +
                               quote(profile.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> out = lines_of(r.out);
  ASSERT_GE(out.size(), 2u);
  EXPECT_EQ(fs::path(out[0]), out_ / "fluxrt-7-0.png");
  EXPECT_EQ(fs::path(out[1]), out_ / "fluxrt-7-1.png");
  EXPECT_NE(r.out.find("denoising loop"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak RSS"), std::string::npos) << r.out;
  EXPECT_EQ(files_in_out(), 2u);  // no temporaries left

  for (int i = 0; i < 2; ++i) {
    const std::string path = (out_ / ("fluxrt-7-" + std::to_string(i) + ".png")).string();
    const fluxrt::io::Image img = fluxrt::io::read_png(path);
    EXPECT_EQ(img.width, 64);
    EXPECT_EQ(img.height, 64);
    EXPECT_EQ(img.channels, 3);
    const auto text = fluxrt::io::read_png_text(path);
    EXPECT_EQ(text.at("prompt"), "a red circle");
    EXPECT_EQ(text.at("negative_prompt"), "dull");
    EXPECT_EQ(text.at("seed"), "7");
    EXPECT_EQ(text.at("steps"), "2");
    EXPECT_EQ(text.at("size"), "64x64");
    EXPECT_EQ(text.at("dtype"), "bf16");
    EXPECT_EQ(text.at("model"), kTiny.string());
    EXPECT_EQ(text.at("max_sequence_length"), "512");
    EXPECT_EQ(text.at("batch_index"), std::to_string(i) + " of 2");
    for (const char* key : {"guidance", "variant", "fluxrt_version"}) EXPECT_FALSE(text.at(key).empty()) << key;
  }

  const nlohmann::json j = nlohmann::json::parse(read_file(profile));
  for (const char* key : {"fluxrt_version", "model", "variant", "dtype", "device", "width", "height", "images",
                          "threads", "cold_load", "warm_load", "warmup", "run", "total_s", "peak_rss_bytes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["images"], 2);
  EXPECT_EQ(j["width"], 64);
  // One request: the components load inside it, the text encoder first (freed before the rest).
  EXPECT_TRUE(j["cold_load"].is_null());
  const nlohmann::json& run = j["run"];
  EXPECT_EQ(run["steps"], 2);
  for (const char* key : {"load_s", "text_encoding_s", "denoise_total_s", "ms_per_step", "it_per_s",
                          "vae_decode_s", "image_write_s", "total_s"})
    EXPECT_GT(run.at(key).get<double>(), 0) << key;
  EXPECT_TRUE(run["reference_encode_s"].is_null());
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0);
}

TEST_F(CliGenerate, NeverOverwritesAndIsDeterministic) {
  ASSERT_EQ(generate("--prompt 'a blue square' --quiet").exit_code, 0);
  const RunResult second = generate("--prompt 'a blue square' --quiet");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.out, (out_ / "fluxrt-7-0-1.png").string() + "\n");
  EXPECT_TRUE(second.err.empty()) << second.err;  // --quiet: no progress
  // Same seed, same settings: the same pixels.
  EXPECT_EQ(fluxrt::io::read_png((out_ / "fluxrt-7-0.png").string()).pixels,
            fluxrt::io::read_png((out_ / "fluxrt-7-0-1.png").string()).pixels);
}

// --dtype int8: the transformer's linears W8A8 (docs/quantization.md). The image is another one
// than bf16's for the same seed and says int8 in its text chunks and the profile; a CUDA device is
// refused in one line; `bench pipeline` runs and reports it.
TEST_F(CliGenerate, DtypeInt8) {
  const std::string common =
      "--model " + quote(kTiny.string()) +
      " --size 64x64 --steps 2 --seed 7 --threads 1 --quiet --prompt 'a red circle' --out " +
      quote(out_.string());
  const fs::path profile = tmp_ / "profile.json";
  RunResult r = generate(common + " --dtype int8 --profile " + quote(profile.string()), false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(generate(common + " --dtype bf16", false).exit_code, 0);
  const std::string int8 = (out_ / "fluxrt-7-0.png").string(), bf16 = (out_ / "fluxrt-7-0-1.png").string();
  EXPECT_EQ(fluxrt::io::read_png_text(int8).at("dtype"), "int8");
  EXPECT_EQ(fluxrt::io::read_png_text(bf16).at("dtype"), "bf16");
  EXPECT_NE(fluxrt::io::read_png(int8).pixels, fluxrt::io::read_png(bf16).pixels) << "int8 did not run";
  EXPECT_EQ(nlohmann::json::parse(read_file(profile))["dtype"], "int8");

  expect_one_line_error(generate(common + " --dtype int8 --device cuda", false), "int8 runs on the CPU only");
  EXPECT_EQ(generate(common + " --dtype int4", false).exit_code, 2);

  const fs::path json = tmp_ / "bench.json";
  r =
      run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --steps 1 --skip-peak --dtype "
          "int8 "
          "--json " +
              quote(json.string()),
          false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(json))["dtype"], "int8");
  expect_one_line_error(run("bench vae --dtype int8 --size 64x64", false), "--dtype int8 is for transformer");
}

TEST_F(CliGenerate, EmptyPromptWorks) {
  const RunResult r = generate("--prompt '' --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(fluxrt::io::read_png_text((out_ / "fluxrt-7-0.png").string()).at("prompt"), "");
}

TEST_F(CliGenerate, PromptsFileAndPlainProgressLines) {
  std::ofstream(tmp_ / "prompts.txt") << "a red circle\n\na green star\n";
  const RunResult r = generate("--prompts-file " + quote((tmp_ / "prompts.txt").string()) +
                               " --filename 'p{prompt_index}-{image_index}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(fluxrt::io::read_png_text((out_ / "p0-0.png").string()).at("prompt"), "a red circle");
  EXPECT_EQ(fluxrt::io::read_png_text((out_ / "p1-0.png").string()).at("prompt"), "a green star");
  // stderr is a file here, so progress is one plain line per step.
  EXPECT_NE(r.err.find("step 1/2 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 2/2 "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
}

TEST_F(CliGenerate, PresetFileFlagsOverride) {
  std::ofstream(tmp_ / "p.yaml") << "steps: 1\nseed: 11\nfilename: \"preset-{seed}-{steps}\"\n"
                                 << "prompts: [from the preset]\n";
  const RunResult r = generate("--model " + quote(kTiny.string()) + " --size 64x64 --threads 1 --out " +
                                   quote(out_.string()) + " --config " + quote((tmp_ / "p.yaml").string()) +
                                   " --steps 2 --quiet",
                               false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path png = out_ / "preset-11-2.png";  // seed from the preset, steps from the flag
  ASSERT_TRUE(fs::exists(png)) << r.out;
  EXPECT_EQ(fluxrt::io::read_png_text(png.string()).at("prompt"), "from the preset");
}

TEST_F(CliGenerate, ReferenceImage) {
  const fs::path ref = write_reference_png();
  const fs::path profile = tmp_ / "p.json";
  const RunResult r = generate("--prompt 'make it red' --image " + quote(ref.string()) + " --quiet --profile " +
                               quote(profile.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto text = fluxrt::io::read_png_text((out_ / "fluxrt-7-0.png").string());
  EXPECT_EQ(text.at("reference_images"), "ref.png");
  const nlohmann::json j = nlohmann::json::parse(read_file(profile));
  EXPECT_GT(j["run"]["reference_encode_s"].get<double>(), 0);
}

// --image reads JPEG and WebP too, by content: a JPEG named .png is still a JPEG. A truncated
// one is a one-line error naming the file.
TEST_F(CliGenerate, ReferenceImagesInJpegAndWebp) {
  const fluxrt::io::Image ref = fluxrt::io::read_png(write_reference_png().string());
  const auto save = [&](const char* name, const std::vector<uint8_t>& bytes, size_t keep) {
    std::ofstream(tmp_ / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), long(keep));
    return quote((tmp_ / name).string());
  };
  const std::vector<uint8_t> jpeg = fluxrt::io::encode_jpeg(ref, 90), webp = fluxrt::io::encode_webp(ref, 80);
  const RunResult r =
      generate("--prompt 'make it red' --quiet --image " + save("photo.png", jpeg, jpeg.size()) +
               " --image " + save("ref.webp", webp, webp.size()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto text = fluxrt::io::read_png_text((out_ / "fluxrt-7-0.png").string());
  EXPECT_EQ(text.at("reference_images"), "photo.png, ref.webp");
  expect_one_line_error(generate("--prompt x --image " + save("cut.jpg", jpeg, jpeg.size() / 2)), "cut.jpg");
}

TEST_F(CliGenerate, BadInputsAreOneLineAndWriteNothing) {
  expect_one_line_error(generate("--prompt x --size 100x64"), "16");
  expect_one_line_error(generate("--prompt x --size 64"), "--size '64' must be WIDTHxHEIGHT");
  expect_one_line_error(generate("--prompt x --model " + quote((tmp_ / "nope").string())), "nope");
  std::ofstream(tmp_ / "broken.png") << "not a png at all";
  expect_one_line_error(generate("--prompt x --image " + quote((tmp_ / "broken.png").string())), "broken.png");
  expect_one_line_error(generate("--prompt x --image " + quote((tmp_ / "missing.png").string())), "missing.png");
  std::ofstream(tmp_ / "bad.yaml") << "steps: 2\nstepz: 3\n";
  expect_one_line_error(generate("--prompt x --config " + quote((tmp_ / "bad.yaml").string())),
                        "bad.yaml:2: 'stepz' is not a preset key");
  std::ofstream(tmp_ / "bad2.yaml") << "steps: [1\n";
  expect_one_line_error(generate("--prompt x --config " + quote((tmp_ / "bad2.yaml").string())), "invalid YAML");
  expect_one_line_error(generate("--prompt x --config no-such-preset"), "no-such-preset");
  expect_one_line_error(generate(""), "no prompt");
  std::ofstream(tmp_ / "a-file") << "x";
  expect_one_line_error(generate("--prompt x --out " + quote((tmp_ / "a-file").string())), "a-file");
  expect_one_line_error(generate("--prompt x --filename '{nope}'"), "unknown placeholder");
  // A lone transformer file cannot generate.
  expect_one_line_error(
      generate("--prompt x --model " + quote((fs::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny-bfl.safetensors").string())),
      "Flux2KleinPipeline folder");
  EXPECT_EQ(files_in_out(), 0u);
  EXPECT_FALSE(fs::exists(out_));

  // Usage errors: one line, exit code 2.
  const RunResult usage = generate("--prompt x --no-such-flag");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.err.find('\n'), usage.err.size() - 1) << usage.err;
  EXPECT_EQ(generate("--prompt x --dtype f16").exit_code, 2);
}

// Ctrl-C between steps: exit 130, one line, nothing written.
TEST_F(CliGenerate, InterruptWritesNothing) {
  const fs::path err_path = tmp_ / "stderr";
  const std::vector<std::string> args = {kBinary.string(), "generate", "--model", kTiny.string(), "--size", "64x64",
                                         "--steps", "1000", "--seed", "1", "--dtype", "bf16", "--threads", "1",
                                         "--out", out_.string(), "--prompt", "x"};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, (tmp_ / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  // Wait until the loop runs (a progress line), then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_file(err_path).find("step 2/1000") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::vector<std::string> err_lines = lines_of(read_file(err_path));
  ASSERT_FALSE(err_lines.empty());
  EXPECT_EQ(err_lines.back().rfind("fluxrt: error: ", 0), 0u) << err_lines.back();
  EXPECT_NE(err_lines.back().find("interrupted"), std::string::npos) << err_lines.back();
  EXPECT_TRUE(read_file(tmp_ / "stdout").empty());
  EXPECT_EQ(files_in_out(), 0u);
}

// `fluxrt bench pipeline` on the tiny synthetic variant: the timing table with the loop's
// throughput, and the JSON figures.
TEST_F(CliGenerate, BenchPipelineTinySynthetic) {
  const fs::path json = tmp_ / "bench.json";
  const RunResult r = run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --steps 2 "
                          "--skip-peak --json " + quote(json.string()), false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* needle : {"denoising loop", "loop throughput", "GFLOP/s", "VAE decode", "peak RSS"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  EXPECT_EQ(j["run"]["steps"], 2);
  EXPECT_GT(j["throughput"]["gflops"].get<double>(), 0);
  EXPECT_GT(j["throughput"]["loop_tflop"].get<double>(), 0);
  EXPECT_TRUE(j["run"]["image_write_s"].is_null());

  expect_one_line_error(run("bench pipeline --variant flux.2-klein-tiny --size 64x64", false), "--synthetic");
  expect_one_line_error(run("bench pipeline --synthetic --variant flux.2-klein-tiny --size 60x64", false), "16");
}

// Without --skip-peak: the GEMM and register peaks read before the run's work and after it (a few
// seconds in all; when the weights are made before the request, also after making them), the best
// of them in the report with the spread and the probe's unit. Only that they were read and
// reported is checked: the figures are the machine's.
TEST_F(CliGenerate, BenchPipelinePeakReadings) {
  const fs::path json = tmp_ / "bench.json";
  const RunResult r =
      run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --steps 1 --json " +
              quote(json.string()),
          false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  const nlohmann::json& p = j["throughput"];
  const int readings = p["gemm_peak_readings"].get<int>();
  EXPECT_GE(readings, 2);
  for (int i = 1; i <= readings; ++i)
    EXPECT_NE(r.out.find("peak reading " + std::to_string(i) + " ("), std::string::npos) << i << "\n"
                                                                                         << r.out;
  EXPECT_EQ(r.out.find("peak reading " + std::to_string(readings + 1) + " ("), std::string::npos) << r.out;
  const std::string taken = p["gemm_peak_taken"].get<std::string>();
  EXPECT_EQ(taken.rfind("before ", 0), 0u) << taken;
  EXPECT_EQ(taken.substr(taken.rfind('/') + 1), "after the run") << taken;
  for (const std::string& needle :
       {std::string("of the GEMM peak"), "best of " + std::to_string(readings) + " readings",
        "taken " + taken, std::string("register peak")})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  EXPECT_GT(p["gemm_peak_gflops"].get<double>(), 0);
  EXPECT_LE(p["gemm_peak_min_gflops"].get<double>(), p["gemm_peak_gflops"].get<double>());
  EXPECT_FALSE(p["register_peak_unit"].get<std::string>().empty());
}

// --references: an editing request of random reference images; on the KV recipe they become the
// request's cached keys and values (its own report line), with a warm-up the timed run takes the
// encoded references from the model's cache.
TEST_F(CliGenerate, BenchPipelineReferencesAndKv) {
  const fs::path json = tmp_ / "bench.json";
  RunResult r =
      run("bench pipeline --variant flux.2-klein-tiny-kv --synthetic --size 64x64 --steps 2 "
          "--skip-peak --warmup --references 2 --json " +
              quote(json.string()),
          false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("reference K/V"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 images, 2 from the reference cache"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  EXPECT_GT(j["run"]["reference_kv_bytes"].get<size_t>(), 0u);
  EXPECT_EQ(j["run"]["reference_images_cached"], 2);
  r =
      run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --steps 1 --skip-peak "
          "--references 1",
          false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("reference K/V"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 image, 0 from the reference cache"), std::string::npos) << r.out;
}

// --low-memory: the components are made when used (their loads land inside the run, not before it).
TEST_F(CliGenerate, BenchPipelineTinySyntheticLowMemory) {
  const RunResult r = run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --steps 1 "
                          "--skip-peak --low-memory", false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("components loaded by the request"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("denoising loop"), std::string::npos) << r.out;
}

// --weights: the transformer's and the Qwen3's synthetic linears in that type, kept quantized
// (fp8 here: the tiny shapes' rows are not whole GGUF blocks, which is a one-line error).
TEST_F(CliGenerate, BenchPipelineQuantizedWeights) {
  RunResult r =
      run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --steps 1 "
          "--skip-peak --low-memory --weights fp8",
          false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("synthetic F8_E4M3 weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak RSS"), std::string::npos) << r.out;
  r =
      run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --steps 1 --skip-peak "
          "--weights q8_0",
          false);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not whole blocks"), std::string::npos) << r.err;
  expect_one_line_error(
      run("bench pipeline --variant flux.2-klein-tiny --synthetic --size 64x64 --weights q9", false),
      "--weights q9");
}

// --reload and --warmup: a warm load and a warm-up run reported next to the timed run; the
// warm-up writes nothing. --low-memory loads inside the request instead.
TEST_F(CliGenerate, WarmLoadWarmupAndLowMemory) {
  const fs::path profile = tmp_ / "p.json";
  RunResult r = generate("--prompt x --reload --warmup --profile " + quote(profile.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(files_in_out(), 1u);
  for (const char* needle : {"cold load", "warm load", "warm-up run"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  nlohmann::json j = nlohmann::json::parse(read_file(profile));
  EXPECT_GT(j["warm_load"]["total_s"].get<double>(), 0);
  EXPECT_EQ(j["warmup"]["steps"], 2);
  EXPECT_EQ(j["run"]["steps"], 2);

  r = generate("--prompt x --low-memory --quiet --profile " + quote(profile.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(read_file(profile));
  EXPECT_TRUE(j["cold_load"].is_null());
  EXPECT_GT(j["run"]["load_s"].get<double>(), 0);
  // Same seed and settings as the first run: the same image, whatever the loading mode.
  EXPECT_EQ(fluxrt::io::read_png((out_ / "fluxrt-7-0.png").string()).pixels,
            fluxrt::io::read_png((out_ / "fluxrt-7-0-1.png").string()).pixels);

  // --keep-text-encoder: every component at open (a cold load, none in the run), the same image;
  // the default frees the text encoder and loads in the run.
  r = generate("--prompt x --keep-text-encoder --quiet --profile " + quote(profile.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(read_file(profile));
  EXPECT_GT(j["cold_load"]["total_s"].get<double>(), 0);
  EXPECT_EQ(j["run"]["load_s"].get<double>(), 0);
  r = generate("--prompt x --quiet --profile " + quote(profile.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(read_file(profile));
  EXPECT_TRUE(j["cold_load"].is_null());
  EXPECT_GT(j["run"]["load_detail"]["text_encoder_s"].get<double>(), 0);
  for (const char* copy : {"fluxrt-7-0-2.png", "fluxrt-7-0-3.png"})
    EXPECT_EQ(fluxrt::io::read_png((out_ / "fluxrt-7-0.png").string()).pixels,
              fluxrt::io::read_png((out_ / copy).string()).pixels)
        << copy;
}

// Without --model: the bundled demo model (models/demo) with configs/demo.yaml applied. Skipped
// until the demo model is in the tree.
TEST_F(CliGenerate, BundledDemoModelByDefault) {
  const fs::path demo = fs::path(FLUXRT_TEST_DATA_DIR).parent_path().parent_path() / "models" / "demo";
  if (!fs::exists(demo / "model_index.json")) GTEST_SKIP() << "no bundled demo model at " << demo;
  const RunResult r = run("generate --prompt 'a red circle on a blue background' --steps 2 --dtype bf16 --threads 1 --quiet --out " +
                              quote(out_.string()),
                          false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path png = out_ / "demo-0-0.png";  // demo.yaml: seed 0, its file-name pattern
  ASSERT_TRUE(fs::exists(png)) << r.out;
  const fluxrt::io::Image img = fluxrt::io::read_png(png.string());
  EXPECT_EQ(img.width, 64);
  EXPECT_EQ(img.height, 64);
  EXPECT_EQ(fs::path(fluxrt::io::read_png_text(png.string()).at("model")).filename(), "demo");
}
