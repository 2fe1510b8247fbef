// `fluxrt generate` on a FLUX.1 folder picks the FLUX.1 pipeline: the tiny schnell folder
// (tools/reference/dump_flux1_pipeline.py) with the settings of the schnell_64 golden case gives
// diffusers' FluxPipeline image (bf16: SSIM >= 0.98, docs/numerics.md), and a FLUX.1-only misuse
// (reference images) is a one-line error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "io/image.h"
#include "support/image_compare.h"

namespace fs = std::filesystem;

namespace {

const fs::path kBinary = fs::path(FLUXRT_BINARY_DIR) / "fluxrt";
const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kSchnell = kData / "models" / "flux1-schnell-tiny";

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliGenerateFlux1 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBinary)) GTEST_SKIP() << kBinary << " not built (build the fluxrt target)";
    tmp_ = fs::temp_directory_path() / ("fluxrt_gen_flux1_" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  int run(const std::string& args) {
    const std::string cmd = "HF_HUB_CACHE=" + quote((tmp_ / "hub").string()) + " FLUXRT_CONFIG_DIR= " +
                            quote(kBinary.string()) + " generate " + args + " >" + quote((tmp_ / "stdout").string()) +
                            " 2>" + quote((tmp_ / "stderr").string());
    const int status = std::system(cmd.c_str());
    out_ = read_file(tmp_ / "stdout");
    err_ = read_file(tmp_ / "stderr");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  fs::path tmp_;
  std::string out_, err_;
};

TEST_F(CliGenerateFlux1, SchnellFolderRendersTheDiffusersImage) {
  const fs::path out = tmp_ / "out";
  const int code = run("--model " + quote(kSchnell.string()) +
                       " --prompt 'a green field under a grey sky' --size 64x64 --steps 4 --seed 42"
                       " --max-sequence-length 256 --dtype bf16 --threads 1 --quiet --out " +
                       quote(out.string()));
  ASSERT_EQ(code, 0) << err_;
  const fs::path written = out_.substr(0, out_.find('\n'));
  ASSERT_TRUE(fs::exists(written)) << out_;
  const fluxrt::io::Image mine = fluxrt::io::read_png(written.string());
  const fluxrt::io::Image expected =
      fluxrt::io::read_png((kData / "flux1_pipeline" / "schnell_64_bf16" / "image_0.png").string());
  const auto d = fluxrt::test::compare_images(mine, expected);
  EXPECT_GE(d.ssim, 0.98) << d.str();
}

TEST_F(CliGenerateFlux1, ReferenceImagesAreAOneLineError) {
  const fs::path ref = tmp_ / "ref.png";
  fluxrt::io::write_png(ref.string(), fluxrt::io::Image{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3, 90)});
  const int code = run("--model " + quote(kSchnell.string()) + " --prompt x --size 64x64 --steps 1 --image " +
                       quote(ref.string()) + " --quiet --out " + quote((tmp_ / "out").string()));
  EXPECT_NE(code, 0);
  EXPECT_NE(err_.find("reference"), std::string::npos) << err_;
  EXPECT_EQ(err_.find('\n'), err_.size() - 1) << err_;  // one line
  EXPECT_FALSE(fs::exists(tmp_ / "out") && !fs::is_empty(tmp_ / "out"));
}

}  // namespace
