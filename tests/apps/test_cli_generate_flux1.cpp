// `fluxrt generate` on a FLUX.1 folder picks the FLUX.1 pipeline: the tiny schnell folder
// (tools/reference/dump_flux1_pipeline.py) with the settings of the schnell_64 golden case gives
// diffusers' FluxPipeline image (bf16: SSIM >= 0.98, docs/numerics.md), and a FLUX.1-only misuse
// (reference images) is a one-line error. --init-image / --strength (img2img) and --true-cfg with
// --negative-prompt on the tiny dev folder give the image Flux1Pipeline renders for the same
// request, bit for bit, and diffusers' (f32: every pixel within 2/255); bad values and flags that
// do not fit the model family are one-line errors that write nothing; the PNGs record those settings
// only when they ran. The timing table splits text encoding into CLIP and T5. `bench pipeline`
// runs the FLUX.1 path on the flux.1-tiny shapes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/threads.h"
#include "io/image.h"
#include "io/public_image.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "support/image_compare.h"

namespace fs = std::filesystem;

namespace {

const fs::path kBinary = fs::path(FLUXRT_BINARY_DIR) / "fluxrt";
const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kSchnell = kData / "models" / "flux1-schnell-tiny";
const fs::path kDev = kData / "models" / "flux1-dev-tiny";
const fs::path kKlein = kData / "models" / "flux2-klein-tiny";
const fs::path kGoldens = kData / "flux1_pipeline";
const fs::path kInitImage = kGoldens / "inputs" / "init_64.png";

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
  // Runs `fluxrt <args>` (not generate), for the bench.
  int run_command(const std::string& args) {
    const std::string cmd = quote(kBinary.string()) + " " + args + " >" + quote((tmp_ / "stdout").string()) + " 2>" +
                            quote((tmp_ / "stderr").string());
    const int status = std::system(cmd.c_str());
    out_ = read_file(tmp_ / "stdout");
    err_ = read_file(tmp_ / "stderr");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // The first written path, read back.
  fluxrt::io::Image written_image() const {
    const fs::path written = out_.substr(0, out_.find('\n'));
    EXPECT_TRUE(fs::exists(written)) << out_ << err_;
    return fluxrt::io::read_png(written.string());
  }
  // The text chunks of the first written PNG.
  std::map<std::string, std::string> written_text() const {
    return fluxrt::io::read_png_text(out_.substr(0, out_.find('\n')));
  }
  void expect_one_line_error(int code, const std::string& needle) {
    EXPECT_NE(code, 0) << out_;
    EXPECT_NE(err_.find(needle), std::string::npos) << err_;
    EXPECT_EQ(err_.find('\n'), err_.size() - 1) << err_;  // one line
    EXPECT_EQ(err_.rfind("fluxrt: error: ", 0), 0u) << err_;
    EXPECT_TRUE(out_.empty()) << out_;
    EXPECT_FALSE(fs::exists(tmp_ / "out") && !fs::is_empty(tmp_ / "out"));
  }
  fs::path tmp_;
  std::string out_, err_;
};

// In this process, with the CLI runs' single thread (f32 sums in the same order: bit-identical).
fluxrt::pipelines::GenerateResult render_directly(const fluxrt::GenerateRequest& request, bool img2img) {
  fluxrt::set_num_threads(1);
  fluxrt::pipelines::PipelineOptions options;
  options.dtype = fluxrt::DType::F32;
  options.load_vae_encoder = img2img;
  return fluxrt::pipelines::Flux1Pipeline::load(kDev, options)->generate(request);
}

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

// `--init-image SRC --mask M` on the tiny klein folder: diffusers' Flux2KleinInpaintPipeline image
// (the soft_disc_f32 case of tests/data/klein_inpaint: f32, every pixel within 2/255), the size
// taken from the 100x75 source (floored to 96x64), the mask recorded in the PNG.
TEST_F(CliGenerateFlux1, KleinInpaintingRendersTheDiffusersImage) {
  const fs::path golden = kData / "klein_inpaint";
  const int code = run("--model " + quote(kKlein.string()) +
                       " --prompt 'a red apple' --steps 4 --strength 0.6"
                       " --seed 3 --max-sequence-length 32 --dtype f32 --quiet --init-image " +
                       quote((golden / "inputs" / "source_100x75.png").string()) + " --mask " +
                       quote((golden / "inputs" / "mask_soft_disc_100x75.png").string()) + " --out " +
                       quote((tmp_ / "out").string()));
  ASSERT_EQ(code, 0) << err_;
  const fluxrt::io::Image mine = written_image();
  const fluxrt::io::Image expected =
      fluxrt::io::read_png((golden / "soft_disc_f32" / "image_0.png").string());
  const auto d = fluxrt::test::compare_images(mine, fluxrt::io::to_rgb(expected));
  EXPECT_LE(d.max_abs, 2) << d.str();
  const auto text = written_text();
  EXPECT_EQ(text.at("mask"), "mask_soft_disc_100x75.png");
  EXPECT_EQ(text.at("init_image"), "source_100x75.png");
  EXPECT_EQ(text.at("strength"), "0.6");
  EXPECT_EQ(text.at("size"), "96x64");
}

// `--padding-mask-crop N` on the tiny klein folder: diffusers' padding_mask_crop image (the
// crop_corner_f32 case: a window around an off-centre mask repainted at 96x64 and pasted back, so
// the PNG has the source's 100x75); without a mask, and on a Fill model, one-line errors naming it.
TEST_F(CliGenerateFlux1, KleinPaddingMaskCropRendersTheDiffusersImage) {
  const fs::path golden = kData / "klein_inpaint";
  const std::string common =
      " --prompt 'a red apple' --steps 4 --strength 0.9 --seed 17 --max-sequence-length 32"
      " --dtype f32 --quiet --padding-mask-crop 8 --init-image " +
      quote((golden / "inputs" / "source_100x75.png").string()) + " --out " + quote((tmp_ / "out").string());
  const std::string mask = " --mask " + quote((golden / "inputs" / "mask_corner_100x75.png").string());
  expect_one_line_error(run("--model " + quote(kKlein.string()) + common), "padding_mask_crop");
  const fs::path fill = kData / "flux1_fill" / "inputs";
  expect_one_line_error(
      run("--model " + quote((kData / "models" / "flux1-fill-tiny").string()) +
          " --prompt x --size 64x64 --steps 1 --quiet --padding-mask-crop 8 --init-image " +
          quote((fill / "source_64.png").string()) + " --mask " +
          quote((fill / "mask_white_64.png").string()) + " --out " + quote((tmp_ / "out").string())),
      "padding_mask_crop is not for FLUX.1 Fill models");
  ASSERT_EQ(run("--model " + quote(kKlein.string()) + common + mask), 0) << err_;
  const fluxrt::io::Image mine = written_image();
  ASSERT_EQ(mine.width, 100);
  ASSERT_EQ(mine.height, 75);
  const auto d = fluxrt::test::compare_images(
      mine, fluxrt::io::to_rgb(fluxrt::io::read_png((golden / "crop_corner_f32" / "image_0.png").string())));
  EXPECT_LE(d.max_abs, 2) << d.str();
  const auto text = written_text();
  EXPECT_EQ(text.at("padding_mask_crop"), "8");
  EXPECT_EQ(text.at("size"), "96x64");  // the run's size; the image is the source's
}

// A FluxFillPipeline folder: `--init-image SRC --mask M` renders diffusers' FluxFillPipeline image
// (tests/data/flux1_fill soft_disc_f32: f32, every pixel within 2/255) with Fill's own defaults
// (guidance 30, strength 1); without the mask it is a one-line error.
TEST_F(CliGenerateFlux1, FillRendersTheDiffusersImage) {
  const fs::path golden = kData / "flux1_fill";
  const std::string fill = "--model " + quote((kData / "models" / "flux1-fill-tiny").string()) +
                           " --prompt 'a red apple' --size 64x64 --steps 4 --seed 3 --max-sequence-length 32"
                           " --dtype f32 --quiet --init-image " +
                           quote((golden / "inputs" / "source_64.png").string()) + " --out " +
                           quote((tmp_ / "out").string());
  expect_one_line_error(run(fill), "FLUX.1 Fill models repaint a masked image");
  ASSERT_EQ(run(fill + " --mask " + quote((golden / "inputs" / "mask_soft_disc_64.png").string())), 0)
      << err_;
  const fluxrt::io::Image expected =
      fluxrt::io::to_rgb(fluxrt::io::read_png((golden / "soft_disc_f32" / "image_0.png").string()));
  const auto d = fluxrt::test::compare_images(written_image(), expected);
  EXPECT_LE(d.max_abs, 2) << d.str();
  EXPECT_EQ(written_text().at("guidance"), "30");
  // Its transformer as a single file: the widened input names it Fill, as the folder does.
  const fs::path folder = kData / "models" / "flux1-fill-tiny";
  fs::remove_all(tmp_ / "out");
  ASSERT_EQ(
      run("--model " + quote((folder / "transformer" / "diffusion_pytorch_model.safetensors").string()) +
          " --components " + quote(folder.string()) + fill.substr(fill.find(" --prompt")) + " --mask " +
          quote((golden / "inputs" / "mask_soft_disc_64.png").string())),
      0)
      << err_;
  const auto from_file = fluxrt::test::compare_images(written_image(), expected);
  EXPECT_LE(from_file.max_abs, 2) << from_file.str();
}

// A FluxKontextPipeline folder: `--image SRC` is the image to edit (diffusers' FluxKontextPipeline
// image, tests/data/flux1_kontext square_f32); it needs one, and takes no mask.
TEST_F(CliGenerateFlux1, KontextRendersTheDiffusersImage) {
  const fs::path golden = kData / "flux1_kontext";
  const std::string kontext = "--model " + quote((kData / "models" / "flux1-kontext-tiny").string()) +
                              " --prompt 'make it red' --size 64x64 --steps 3 --guidance 2.5 --seed 3"
                              " --max-sequence-length 32 --dtype f32 --quiet --out " +
                              quote((tmp_ / "out").string());
  const std::string image = " --image " + quote((golden / "inputs" / "source_64.png").string());
  expect_one_line_error(run(kontext), "FLUX.1 Kontext models edit an image");
  expect_one_line_error(
      run(kontext + image + " --init-image " + quote((golden / "inputs" / "source_64.png").string()) +
          " --mask " + quote((kData / "flux1_fill" / "inputs" / "mask_white_64.png").string())),
      "a mask (inpainting) is not for FLUX.1 Kontext models");
  const fluxrt::io::Image expected =
      fluxrt::io::to_rgb(fluxrt::io::read_png((golden / "square_f32" / "image_0.png").string()));
  ASSERT_EQ(run(kontext + image), 0) << err_;
  const auto d = fluxrt::test::compare_images(written_image(), expected);
  EXPECT_LE(d.max_abs, 2) << d.str();
  // Its transformer as a single file (dev's shapes, named FLUX.1's) runs with the Kontext folder.
  const fs::path folder = kData / "models" / "flux1-kontext-tiny";
  fs::remove_all(tmp_ / "out");
  ASSERT_EQ(
      run("--model " + quote((folder / "transformer" / "diffusion_pytorch_model.safetensors").string()) +
          " --components " + quote(folder.string()) + kontext.substr(kontext.find(" --prompt")) + image),
      0)
      << err_;
  const auto from_file = fluxrt::test::compare_images(written_image(), expected);
  EXPECT_LE(from_file.max_abs, 2) << from_file.str();
}

// What people download of Fill and Kontext is a single file: BFL's layout (FLUX.1-Fill-dev's own
// file) or a GGUF (city96's), with the rest from a folder. A bf16 GGUF of these bf16 weights is
// lossless, so both give the folder's (diffusers') image; a q8_0 GGUF still runs as its kind.
TEST_F(CliGenerateFlux1, FillAndKontextSingleFilesRenderTheFoldersImage) {
  const fs::path fill_golden = kData / "flux1_fill", fill_folder = kData / "models" / "flux1-fill-tiny";
  const fs::path bfl = kData / "models" / "flux1-fill-tiny-bfl.safetensors";
  const std::string fill_request =
      " --components " + quote(fill_folder.string()) +
      " --prompt 'a red apple' --size 64x64 --steps 4 --seed 3 --max-sequence-length 32"
      " --dtype f32 --quiet --init-image " +
      quote((fill_golden / "inputs" / "source_64.png").string()) + " --mask " +
      quote((fill_golden / "inputs" / "mask_soft_disc_64.png").string()) + " --out " +
      quote((tmp_ / "out").string());
  const fluxrt::io::Image fill_expected =
      fluxrt::io::to_rgb(fluxrt::io::read_png((fill_golden / "soft_disc_f32" / "image_0.png").string()));
  const fs::path fill_gguf = tmp_ / "fill-bf16.gguf", fill_q8 = tmp_ / "fill-q8_0.gguf";
  ASSERT_EQ(run_command("quantize --model " + quote(bfl.string()) + " --type bf16 --out " +
                        quote(fill_gguf.string())),
            0)
      << err_;
  ASSERT_EQ(run_command("quantize --model " + quote(bfl.string()) + " --type q8_0 --out " +
                        quote(fill_q8.string())),
            0)
      << err_;
  for (const fs::path& file : {bfl, fill_gguf}) {
    fs::remove_all(tmp_ / "out");
    ASSERT_EQ(run("--model " + quote(file.string()) + fill_request), 0) << file << ": " << err_;
    const auto d = fluxrt::test::compare_images(written_image(), fill_expected);
    EXPECT_LE(d.max_abs, 2) << file << ": " << d.str();
  }
  // The q8_0 file: Fill's defaults and its mask rule hold (it is told by its 384 input channels).
  fs::remove_all(tmp_ / "out");
  ASSERT_EQ(run("--model " + quote(fill_q8.string()) + fill_request), 0) << err_;
  EXPECT_EQ(written_text().at("guidance"), "30");
  const std::string without_mask =
      fill_request.substr(0, fill_request.find(" --mask ")) + " --out " + quote((tmp_ / "out").string());
  fs::remove_all(tmp_ / "out");
  expect_one_line_error(run("--model " + quote(fill_q8.string()) + without_mask),
                        "FLUX.1 Fill models repaint a masked image");

  // Kontext-dev's file has dev's shapes: the folder it runs with makes it Kontext.
  const fs::path kontext_golden = kData / "flux1_kontext",
                 kontext_folder = kData / "models" / "flux1-kontext-tiny";
  const fs::path kontext_gguf = tmp_ / "kontext-bf16.gguf";
  ASSERT_EQ(run_command("quantize --model " + quote(kontext_folder.string()) + " --type bf16 --out " +
                        quote(kontext_gguf.string())),
            0)
      << err_;
  fs::remove_all(tmp_ / "out");
  ASSERT_EQ(
      run("--model " + quote(kontext_gguf.string()) + " --components " + quote(kontext_folder.string()) +
          " --prompt 'make it red' --size 64x64 --steps 3 --guidance 2.5 --seed 3 --max-sequence-length 32"
          " --dtype f32 --quiet --image " +
          quote((kontext_golden / "inputs" / "source_64.png").string()) + " --out " +
          quote((tmp_ / "out").string())),
      0)
      << err_;
  const auto k = fluxrt::test::compare_images(
      written_image(),
      fluxrt::io::to_rgb(fluxrt::io::read_png((kontext_golden / "square_f32" / "image_0.png").string())));
  EXPECT_LE(k.max_abs, 2) << k.str();
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

// Golden case dev_img2img_s06 (manifest.json): FluxImg2ImgPipeline, strength 0.6 of 5 steps.
TEST_F(CliGenerateFlux1, InitImageRendersTheImg2ImgImage) {
  const int code = run("--model " + quote(kDev.string()) + " --prompt 'make it blue' --size 64x64 --steps 5 --seed 21"
                       " --max-sequence-length 32 --dtype f32 --threads 1 --init-image " + quote(kInitImage.string()) +
                       " --strength 0.6 --out " + quote((tmp_ / "out").string()));
  ASSERT_EQ(code, 0) << err_;
  EXPECT_NE(err_.find("strength 0.6, 3 of 5 steps run"), std::string::npos) << err_;
  for (const char* needle : {"denoising loop", "CLIP ", ", T5 "})
    EXPECT_NE(out_.find(needle), std::string::npos) << needle << "\n" << out_;
  const fluxrt::io::Image mine = written_image();
  // The PNG says how to get it again: the init image, the strength and the untrimmed step count.
  const auto text = written_text();
  EXPECT_EQ(text.at("init_image"), "init_64.png");
  EXPECT_EQ(text.at("strength"), "0.6");
  EXPECT_EQ(text.at("steps"), "3");
  EXPECT_EQ(text.at("scheduled_steps"), "5");
  EXPECT_EQ(text.count("true_cfg"), 0u);

  fluxrt::GenerateRequest request;
  request.prompts = {"make it blue"};
  request.width = request.height = 64;
  request.steps = 5;
  request.seed = 21;
  request.max_sequence_length = 32;
  request.init_image = fluxrt::io::to_public(fluxrt::io::read_png(kInitImage.string()));
  request.strength = 0.6f;
  const fluxrt::pipelines::GenerateResult direct = render_directly(request, true);
  EXPECT_EQ(direct.num_steps, 3);
  const auto same = fluxrt::test::compare_images(mine, direct.images.at(0));
  EXPECT_EQ(same.max_abs, 0) << same.str();

  const auto golden = fluxrt::test::compare_images(
      mine, fluxrt::io::read_png((kGoldens / "dev_img2img_s06_f32" / "image_0.png").string()));
  EXPECT_LE(golden.max_abs, 2) << golden.str();
}

// A FluxImg2ImgPipeline folder is FLUX.1 to every part of the command (the pipeline registry);
// the options check once took it for klein and refused --init-image.
TEST_F(CliGenerateFlux1, Img2ImgPipelineFolderIsFlux1) {
  const fs::path folder = tmp_ / "flux1-img2img";
  fs::create_directories(folder);
  for (const fs::directory_entry& e : fs::directory_iterator(kDev)) {
    if (e.path().filename() == "model_index.json") continue;
    fs::create_symlink(fs::absolute(e.path()), folder / e.path().filename());
  }
  std::string index = read_file(kDev / "model_index.json");
  const size_t at = index.find("\"FluxPipeline\"");
  ASSERT_NE(at, std::string::npos) << index;
  index.replace(at, std::string("\"FluxPipeline\"").size(), "\"FluxImg2ImgPipeline\"");
  std::ofstream(folder / "model_index.json") << index;
  auto image_for = [&](const fs::path& model, const std::string& out) {
    const int code = run("--model " + quote(model.string()) +
                         " --prompt 'make it blue' --size 64x64 --steps 2 --seed 21 --max-sequence-length 16"
                         " --init-image " +
                         quote(kInitImage.string()) + " --strength 0.6 --out " +
                         quote((tmp_ / out).string()) + " --filename x");
    EXPECT_EQ(code, 0) << err_;
    return fluxrt::io::read_png((tmp_ / out / "x.png").string());
  };
  const fluxrt::io::Image from_img2img = image_for(folder, "a");
  const fluxrt::io::Image from_flux = image_for(kDev, "b");
  EXPECT_TRUE(from_img2img.pixels == from_flux.pixels);
}

// Golden case dev_true_cfg: true_cfg_scale 4 with a negative prompt (two forwards per step).
TEST_F(CliGenerateFlux1, TrueCfgWithNegativePromptRendersTheDiffusersImage) {
  const int code = run("--model " + quote(kDev.string()) +
                       " --prompt 'a lighthouse at dusk' --negative-prompt 'blurry, dark' --true-cfg 4 --size 64x64"
                       " --steps 3 --seed 5 --max-sequence-length 48 --dtype f32 --threads 1 --quiet --out " +
                       quote((tmp_ / "out").string()));
  ASSERT_EQ(code, 0) << err_;
  const fluxrt::io::Image mine = written_image();
  const auto text = written_text();
  EXPECT_EQ(text.at("true_cfg"), "4");
  EXPECT_EQ(text.at("negative_prompt"), "blurry, dark");
  for (const char* unused : {"init_image", "strength", "scheduled_steps"})
    EXPECT_EQ(text.count(unused), 0u) << unused;
  const auto golden =
      fluxrt::test::compare_images(mine, fluxrt::io::read_png((kGoldens / "dev_true_cfg_f32" / "image_0.png").string()));
  EXPECT_LE(golden.max_abs, 2) << golden.str();

  fluxrt::GenerateRequest request;
  request.prompts = {"a lighthouse at dusk"};
  request.negative_prompt = "blurry, dark";
  request.true_cfg = 4.0f;
  request.width = request.height = 64;
  request.steps = 3;
  request.seed = 5;
  request.max_sequence_length = 48;
  const auto same = fluxrt::test::compare_images(mine, render_directly(request, false).images.at(0));
  EXPECT_EQ(same.max_abs, 0) << same.str();
}

// diffusers' do_true_cfg needs a negative prompt: --true-cfg alone changes nothing (a note says
// so), and --vae-tiling on gives a result as well.
TEST_F(CliGenerateFlux1, TrueCfgWithoutNegativePromptIsIgnoredAsInDiffusers) {
  const std::string common = "--model " + quote(kDev.string()) +
                             " --prompt 'a lighthouse at dusk' --size 64x64 --steps 2 --seed 5 --max-sequence-length 16"
                             " --dtype f32 --threads 1 --out " + quote((tmp_ / "out").string());
  ASSERT_EQ(run(common + " --true-cfg 4"), 0) << err_;
  EXPECT_NE(err_.find("note: true_cfg 4 has no effect without a negative prompt"), std::string::npos) << err_;
  EXPECT_EQ(written_text().count("true_cfg"), 0u);  // recorded only when it ran
  const fluxrt::io::Image with_flag = written_image();
  ASSERT_EQ(run(common + " --vae-tiling off --quiet"), 0) << err_;
  const auto d = fluxrt::test::compare_images(with_flag, written_image());
  EXPECT_EQ(d.max_abs, 0) << d.str();
}

TEST_F(CliGenerateFlux1, BadFlux1FlagsAreOneLineErrorsBeforeLoading) {
  const std::string dev = "--model " + quote(kDev.string()) + " --prompt x --size 64x64 --steps 4 --quiet --out " +
                          quote((tmp_ / "out").string());
  const std::string init = " --init-image " + quote(kInitImage.string());
  expect_one_line_error(run(dev + init + " --strength 0"), "--strength 0 must be a number in (0, 1]");
  expect_one_line_error(run(dev + init + " --strength 1.5"), "--strength 1.5 must be a number in (0, 1]");
  expect_one_line_error(run(dev + " --strength 0.5"), "strength is for img2img and needs init_image");
  expect_one_line_error(run(dev + " --init-image " + quote((tmp_ / "missing.png").string())), "missing.png");
  std::ofstream(tmp_ / "not.png") << "not a png";
  expect_one_line_error(run(dev + " --init-image " + quote((tmp_ / "not.png").string())), "--init-image");
  expect_one_line_error(run(dev + " --true-cfg -1"), "--true-cfg -1 must be a number from 0 to 100");
  expect_one_line_error(run(dev + " --vae-tiling sometimes"), "--vae-tiling");

  const std::string klein = "--model " + quote(kKlein.string()) + " --prompt x --size 64x64 --steps 1 --quiet --out " +
                            quote((tmp_ / "out").string());
  expect_one_line_error(run(klein + init), "init_image (img2img) is not for FLUX.2 klein models");
  // klein takes strength for inpainting, with the image it edits.
  expect_one_line_error(run(klein + " --strength 0.5"), "strength is for img2img and needs init_image");
  expect_one_line_error(run(klein + " --true-cfg 3"), "true_cfg is not for FLUX.2 klein models");

  // Inpainting's mask: the image's size, an image, with the image it masks (both families).
  const fs::path inputs = kData / "klein_inpaint" / "inputs";
  const std::string source = " --init-image " + quote((inputs / "source_64.png").string());
  const std::string mask = " --mask " + quote((inputs / "mask_white_64.png").string());
  expect_one_line_error(run(dev + init + " --mask " + quote((inputs / "mask_soft_disc_100x75.png").string())),
                        "the mask is 100x75, the image being edited 64x64: they must match");
  expect_one_line_error(run(klein + mask), "a mask needs the image being edited (init_image)");
  expect_one_line_error(run(klein + " --init-image " + quote((inputs / "source_100x75.png").string()) + mask),
                        "the mask is 64x64, the image being edited 100x75: they must match");
  expect_one_line_error(run(klein + source + " --mask " + quote((tmp_ / "not.png").string())), "--mask");
  expect_one_line_error(run(klein + source + mask + " --strength 0"),
                        "--strength 0 must be a number in (0, 1]");

  // A preset's key is checked the same way.
  std::ofstream(tmp_ / "p.yaml") << "strength: 0.5\n";
  expect_one_line_error(run(dev + " --config " + quote((tmp_ / "p.yaml").string())), "needs init_image");
}

// `fluxrt bench pipeline` on the FLUX.1 path (flux.1-tiny shapes, low-memory order): the whole
// table, loads inside the run.
TEST_F(CliGenerateFlux1, BenchPipelineFlux1TinySynthetic) {
  const fs::path json = tmp_ / "bench.json";
  ASSERT_EQ(run_command("bench pipeline --variant flux.1-tiny --synthetic --size 64x64 --steps 2 --skip-peak "
                        "--dtype f32 --json " + quote(json.string())),
            0)
      << err_;
  for (const char* needle : {"load (in run)", "text encoding", "CLIP ", ", T5 ", "denoising loop", "it/s",
                             "loop throughput", "VAE decode", "run total", "peak RSS"})
    EXPECT_NE(out_.find(needle), std::string::npos) << needle << "\n" << out_;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  EXPECT_EQ(j["run"]["steps"], 2);
  // The text-encoding split: both encoders recorded, inside the span that holds them.
  ASSERT_TRUE(j["run"]["clip_encoding_s"].is_number()) << j["run"];
  ASSERT_TRUE(j["run"]["t5_encoding_s"].is_number()) << j["run"];
  const double clip = j["run"]["clip_encoding_s"], t5 = j["run"]["t5_encoding_s"];
  EXPECT_GE(clip, 0.0);
  EXPECT_GE(t5, 0.0);
  EXPECT_LE(clip + t5, j["run"]["text_encoding_s"].get<double>());
  EXPECT_GT(j["run"]["load_s"].get<double>(), 0);
  EXPECT_GT(j["run"]["load_detail"]["transformer_s"].get<double>(), 0);
  EXPECT_GT(j["throughput"]["gflops"].get<double>(), 0);
  EXPECT_NE(run_command("bench pipeline --variant flux.1-pro --synthetic --size 64x64"), 0);
  EXPECT_NE(err_.find("flux.1-pro"), std::string::npos) << err_;
  EXPECT_NE(run_command("bench pipeline --variant flux.1-tiny --synthetic --size 64x64 --weights q8_0"), 0);
  EXPECT_NE(err_.find("is for FLUX.2 klein"), std::string::npos) << err_;
}

// With a step cache, the loop's FLOP and rates are over the steps run fully: a cached step runs a
// part of the model the count cannot tell (counting every step at full cost read above the peak).
TEST_F(CliGenerateFlux1, BenchPipelineWithACacheCountsTheFullSteps) {
  const fs::path plain = tmp_ / "plain.json", cached = tmp_ / "cached.json";
  const std::string base =
      "bench pipeline --variant flux.1-tiny --synthetic --size 64x64 --steps 12 --skip-peak ";
  ASSERT_EQ(run_command(base + "--json " + quote(plain.string())), 0) << err_;
  ASSERT_EQ(run_command(base + "--cache taylorseer --json " + quote(cached.string())), 0) << err_;
  EXPECT_NE(out_.find("run fully (cached steps not counted)"), std::string::npos) << out_;
  const nlohmann::json p = nlohmann::json::parse(read_file(plain)),
                       c = nlohmann::json::parse(read_file(cached));
  EXPECT_EQ(p["throughput"]["steps_counted"], 0);  // every step
  const std::string decisions = c["run"]["cache_steps"];
  ASSERT_EQ(decisions.size(), 12u);
  const auto full = std::count(decisions.begin(), decisions.end(), 'F');
  ASSERT_GT(full, 0);
  ASSERT_LT(full, 12) << decisions;  // TaylorSeer's defaults reuse the cache within 12 steps
  EXPECT_EQ(c["throughput"]["steps_counted"], full);
  // The same per-step FLOP: the counted total is the plain run's, scaled to the full steps.
  EXPECT_NEAR(c["throughput"]["loop_tflop"].get<double>(),
              p["throughput"]["loop_tflop"].get<double>() * full / 12.0, 1e-9);
  EXPECT_GT(c["throughput"]["gflops"].get<double>(), 0);
}

}  // namespace

// --text-encoder FILE: the folder's T5 as a BF16 GGUF in llama.cpp's names
// (tools/reference/make_tiny_encoder_gguf.py) renders the folder's image bit for bit; a missing
// file is a one-line error before anything loads.
TEST_F(CliGenerateFlux1, TextEncoderFileRendersTheFoldersImage) {
  const std::string args =
      "--model " + quote(kDev.string()) +
      " --prompt 'a red circle' --size 64x64 --steps 2 --seed 3 --threads 1 --quiet --out ";
  ASSERT_EQ(run(args + quote((tmp_ / "folder").string())), 0) << err_;
  const fluxrt::io::Image folder = written_image();
  const fs::path gguf = kData / "gguf" / "flux1-tiny-t5-bf16.gguf";
  ASSERT_EQ(run(args + quote((tmp_ / "gguf").string()) + " --text-encoder " + quote(gguf.string())), 0)
      << err_;
  EXPECT_EQ(written_image().pixels, folder.pixels);
  expect_one_line_error(
      run(args + quote((tmp_ / "out").string()) + " --text-encoder " + quote((tmp_ / "none.gguf").string())),
      "--text-encoder");
}

// --lora FILE:STRENGTH merges the LoRA at load: diffusers' image of the PEFT file at 0.5
// (tests/data/lora), and the PNG records the file name, strength and SHA-256 prefix.
TEST_F(CliGenerateFlux1, LoraFlagRendersTheDiffusersImage) {
  const fs::path lora = kData / "lora";
  const int code = run("--model " + quote(kDev.string()) + " --lora " +
                       quote((lora / "flux1" / "kohya.safetensors").string() + ":0.5") +
                       " --prompt 'a red circle on a blue background' --size 64x64 --steps 2 --seed 3"
                       " --max-sequence-length 32 --dtype f32 --threads 1 --quiet --out " +
                       quote((tmp_ / "out").string()));
  ASSERT_EQ(code, 0) << err_;
  const auto d = fluxrt::test::compare_images(
      written_image(), fluxrt::io::read_png((lora / "flux1_half_f32" / "image_0.png").string()));
  EXPECT_LE(d.max_abs, 2) << d.str();
  const std::string sha = nlohmann::json::parse(
      read_file(lora / "manifest.json"))["families"]["flux1"]["formats"]["kohya"]["sha256"];
  EXPECT_EQ(written_text()["loras"], "kohya.safetensors:0.5:" + sha.substr(0, 12));
  fs::remove_all(tmp_ / "out");  // the refusals below must write nothing there
  expect_one_line_error(
      run("--model " + quote(kDev.string()) + " --lora " +
          quote((lora / "klein" / "peft.safetensors").string()) +
          " --prompt x --size 64x64 --steps 1 --quiet --out " + quote((tmp_ / "out").string())),
      "FLUX.2 LoRA");
  expect_one_line_error(
      run("--model " + quote(kDev.string()) + " --lora " + quote((tmp_ / "none.safetensors").string()) +
          " --prompt x --quiet --out " + quote((tmp_ / "out").string())),
      "not found");
}

// --lora repeated merges every file given, in order: diffusers' image of two adapters with
// set_adapters weights [1.0, 0.7], and both are recorded.
TEST_F(CliGenerateFlux1, RepeatedLoraFlagsMergeEveryFile) {
  const fs::path lora = kData / "lora";
  const int code = run("--model " + quote(kDev.string()) + " --lora " +
                       quote((lora / "flux1" / "peft.safetensors").string()) + " --lora " +
                       quote((lora / "flux1" / "second.safetensors").string() + ":0.7") +
                       " --prompt 'a red circle on a blue background' --size 64x64 --steps 2 --seed 3"
                       " --max-sequence-length 32 --dtype f32 --threads 1 --quiet --out " +
                       quote((tmp_ / "out").string()));
  ASSERT_EQ(code, 0) << err_;
  const auto d = fluxrt::test::compare_images(
      written_image(), fluxrt::io::read_png((lora / "flux1_two_f32" / "image_0.png").string()));
  EXPECT_LE(d.max_abs, 2) << d.str();
  const std::string loras = written_text()["loras"];
  EXPECT_EQ(loras.find("peft.safetensors:1:"), 0u) << loras;
  EXPECT_NE(loras.find("second.safetensors:0.7:"), std::string::npos) << loras;
}
