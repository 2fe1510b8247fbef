// Where `fluxrt generate` writes (frontend/output_files.h, fluxrt::write_run_images): file names
// from a pattern, names that never overwrite, the output-folder check before a run, and the PNGs
// written with their metadata, a failed write leaving no file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fluxrt/run.h"
#include "frontend/output_files.h"
#include "io/image.h"
#include "run_settings_fixture.h"

namespace fs = std::filesystem;
namespace fe = fluxrt::frontend;
using fluxrt::Error;
using fluxrt::ErrorCode;

namespace {

class OutputFiles : public fluxrt::test::RunSettingsTest {
 protected:
  OutputFiles() : RunSettingsTest("fluxrt_out_") {}
};

fluxrt::GenerateResult two_images() {
  fluxrt::GenerateResult result;
  result.width = 16;
  result.height = 8;
  result.steps = 3;
  for (int i = 0; i < 2; ++i) {
    fluxrt::GeneratedImage g;
    g.image = fluxrt::Image{16, 8, std::vector<uint8_t>(16 * 8 * 3, static_cast<uint8_t>(40 + 100 * i))};
    g.metadata.prompt = i == 0 ? "first" : "second";
    g.metadata.seed = 42;
    g.metadata.index = i;
    g.metadata.count = 2;
    g.metadata.prompt_index = i;
    g.metadata.steps = 3;
    g.metadata.width = 16;
    g.metadata.height = 8;
    result.images.push_back(std::move(g));
  }
  return result;
}

}  // namespace

TEST_F(OutputFiles, OutputNames) {
  fe::OutputNameFields f;
  f.seed = 42;
  f.index = 3;
  f.prompt_index = 1;
  f.image_index = 1;
  f.width = 64;
  f.height = 32;
  f.steps = 4;
  EXPECT_EQ(fe::format_output_name("fluxrt-{seed}-{index}.png", f), "fluxrt-42-3.png");
  EXPECT_EQ(fe::format_output_name("p{prompt_index}_i{image_index}_{width}x{height}_{steps}", f),
            "p1_i1_64x32_4.png");
  EXPECT_EQ(fe::format_output_name(fe::kDefaultFilenamePattern, f), "fluxrt-42-3.png");
  for (const char* bad : {"{nope}", "a/{seed}", "{seed", "seed}", ".hidden", ""})
    EXPECT_THROW(fe::format_output_name(bad, f), Error) << bad;
  try {
    fe::format_output_name("{bogus}", f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("unknown placeholder {bogus}"), std::string::npos) << e.what();
  }
}

TEST_F(OutputFiles, ReserveNeverOverwrites) {
  const fs::path a = fe::reserve_output_path(tmp_, "img.png");
  EXPECT_EQ(a, tmp_ / "img.png");
  const fs::path b = fe::reserve_output_path(tmp_, "img.png");
  EXPECT_EQ(b, tmp_ / "img-1.png");
  const fs::path c = fe::reserve_output_path(tmp_, "img.png");
  EXPECT_EQ(c, tmp_ / "img-2.png");
  EXPECT_TRUE(fs::exists(a) && fs::exists(b) && fs::exists(c));
}

TEST_F(OutputFiles, OutputFolderChecks) {
  EXPECT_NO_THROW(fe::check_output_dir_writable(tmp_));
  EXPECT_NO_THROW(fe::check_output_dir_writable(tmp_ / "new" / "deeper"));  // created later
  EXPECT_FALSE(fs::exists(tmp_ / "new"));
  std::ofstream(tmp_ / "file") << "x";
  EXPECT_THROW(fe::check_output_dir_writable(tmp_ / "file"), Error);
  EXPECT_THROW(fe::check_output_dir_writable(tmp_ / "file" / "sub"), Error);
  EXPECT_THROW(fe::check_output_dir_writable(""), Error);
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(tmp_ / "ro");
    fs::permissions(tmp_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(fe::check_output_dir_writable(tmp_ / "ro"), Error);
  }
}

// Names per image from the pattern and each image's indices; a failed write removes its
// placeholder, keeps what was written before it, and rethrows.
TEST_F(OutputFiles, NumberedPngsKeepEarlierFilesWhenAWriteFails) {
  fe::OutputNameFields run;
  run.seed = 9;
  const fs::path dir = tmp_ / "made" / "here";  // created when missing
  std::vector<size_t> written;
  const std::vector<fs::path> paths = fe::write_numbered_pngs(dir, "s{seed}-p{prompt_index}-i{image_index}",
                                                              run, 2, 4, [&](size_t i, const fs::path& path) {
                                                                written.push_back(i);
                                                                std::ofstream(path) << "image " << i;
                                                              });
  EXPECT_EQ(written, (std::vector<size_t>{0, 1, 2, 3}));
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[0], dir / "s9-p0-i0.png");
  EXPECT_EQ(paths[1], dir / "s9-p0-i1.png");
  EXPECT_EQ(paths[3], dir / "s9-p1-i1.png");

  EXPECT_THROW(fe::write_numbered_pngs(dir, "again-{index}", run, 1, 3,
                                       [&](size_t i, const fs::path& path) {
                                         if (i == 1) throw Error(ErrorCode::Io, "disk full");
                                         std::ofstream(path) << "x";
                                       }),
               Error);
  EXPECT_TRUE(fs::exists(dir / "again-0.png"));
  EXPECT_FALSE(fs::exists(dir / "again-1.png")) << "the failed write's placeholder stayed";
  EXPECT_FALSE(fs::exists(dir / "again-2.png"));
}

// fluxrt::write_run_images: the run's folder and pattern, the result's size and steps in the
// names, each PNG with its metadata as text chunks, and never over an earlier file.
TEST_F(OutputFiles, RunImagesCarryTheirMetadata) {
  fluxrt::Run run;
  run.out_dir = (tmp_ / "out").string();
  run.filename_pattern = "{seed}-{index}-{width}x{height}-{steps}";
  run.request.seed = 42;
  run.request.prompts = {"first", "second"};
  const fluxrt::GenerateResult result = two_images();
  const std::vector<std::string> paths = fluxrt::write_run_images(run, result);
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(fs::path(paths[0]), tmp_ / "out" / "42-0-16x8-3.png");
  EXPECT_EQ(fs::path(paths[1]), tmp_ / "out" / "42-1-16x8-3.png");
  const fluxrt::io::Image second = fluxrt::io::read_png(paths[1]);
  EXPECT_EQ(second.width, 16);
  EXPECT_TRUE(second.pixels == result.images[1].image.rgb);
  const auto text = fluxrt::io::read_png_text(paths[1]);
  EXPECT_EQ(text.at("prompt"), "second");
  EXPECT_EQ(text.at("seed"), "42");
  EXPECT_EQ(text.at("batch_index"), "1 of 2");

  const std::vector<std::string> again = fluxrt::write_run_images(run, result);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(fs::path(again[0]), tmp_ / "out" / "42-0-16x8-3-1.png");
  EXPECT_EQ(fluxrt::io::read_png_text(paths[0]).at("prompt"), "first");

  // A torn image fails naming it; the images before it stay, the torn one leaves no file.
  fluxrt::GenerateResult torn = two_images();
  torn.images[1].image.rgb.resize(10);
  run.filename_pattern = "torn-{index}";
  EXPECT_THROW(fluxrt::write_run_images(run, torn), Error);
  EXPECT_TRUE(fs::exists(tmp_ / "out" / "torn-0.png"));
  EXPECT_FALSE(fs::exists(tmp_ / "out" / "torn-1.png"));
}
