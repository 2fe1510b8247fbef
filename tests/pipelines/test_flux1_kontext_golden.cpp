// FLUX.1 Kontext vs diffusers 0.42.1 FluxKontextPipeline on the tiny random Kontext folder
// (tests/data/models/flux1-kontext-tiny: flux1-dev-tiny's transformer, tests/data/flux1_kontext,
// tools/reference/dump_flux1_kontext.py: a 64x64 image (resized to 1024x1024, the preferred size of
// its aspect) in f32 and bf16, a 100x75 one (to 1248x832) for a 96x64 output with two images and
// true CFG):
//   Size          kontext_image_size picks the size diffusers resized to (from its token ids)
//   Kind          the folder loads as the FLUX.1 Kontext kind; an edit without its image is a
//                 one-line InvalidArgument naming reference_images
//   Generate      the noise, final latents (module-golden row of the dtype) and the images: f32
//                 every sample within 2/255, bf16 SSIM >= 0.98 (docs/numerics.md)
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/image.h"
#include "io/model_discovery.h"
#include "io/public_image.h"
#include "io/safetensors.h"
#include "pipelines/flux1/flux1_kontext.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "support/compare.h"
#include "support/golden_images.h"

namespace fluxrt::pipelines {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kModel = kData / "models" / "flux1-kontext-tiny";

struct KontextCase {
  std::string name, prompt, image;
  std::optional<std::string> negative_prompt;
  std::optional<float> true_cfg;
  DType dtype = DType::F32;
  uint64_t seed = 0;
  int steps = 0, images_per_prompt = 1, width = 0, height = 0, max_sequence_length = 32;
  int reference_width = 0, reference_height = 0;
  std::optional<int> max_area;              // unset: diffusers ran with max_area = width x height
  int output_width = 0, output_height = 0;  // what diffusers made of the size
  float guidance = 3.5f;
  std::vector<std::string> outputs;

  fs::path dir() const { return kData / "flux1_kontext" / name; }
  fs::path input() const { return kData / "flux1_kontext" / "inputs" / image; }
};

void PrintTo(const KontextCase& c, std::ostream* os) { *os << c.name; }

// Read at test registration; a missing manifest gives no cases, which the Manifest test reports.
std::vector<KontextCase> load_cases() {
  std::vector<KontextCase> cases;
  try {
    std::ifstream in(kData / "flux1_kontext" / "manifest.json");
    if (!in) return cases;
    const json manifest = json::parse(in);
    for (const json& j : manifest.at("cases")) {
      KontextCase c;
      c.name = j.at("name");
      c.dtype = j.at("dtype") == "bf16" ? DType::BF16 : DType::F32;
      c.prompt = j.at("prompt");
      if (!j.at("negative_prompt").is_null()) c.negative_prompt = j.at("negative_prompt").get<std::string>();
      if (!j.at("true_cfg").is_null()) c.true_cfg = j.at("true_cfg").get<float>();
      c.seed = j.at("seed");
      c.steps = j.at("steps");
      c.guidance = j.at("guidance");
      c.images_per_prompt = j.at("images_per_prompt");
      c.max_sequence_length = j.at("max_sequence_length");
      c.image = j.at("image");
      c.reference_width = j.at("reference_size").at(0);
      c.reference_height = j.at("reference_size").at(1);
      c.width = j.at("width");
      c.height = j.at("height");
      if (!j.at("max_area").is_null()) c.max_area = j.at("max_area").get<int>();
      c.output_width = j.at("output_size").at(0);
      c.output_height = j.at("output_size").at(1);
      c.outputs = j.at("outputs").get<std::vector<std::string>>();
      cases.push_back(std::move(c));
    }
  } catch (const std::exception&) {
    cases.clear();
  }
  return cases;
}

const std::vector<KontextCase>& all_cases() {
  static const std::vector<KontextCase> cases = load_cases();
  return cases;
}

Tensor intermediate(const KontextCase& c, const std::string& name) {
  const io::Checkpoint file = io::Checkpoint::open((c.dir() / "intermediates.safetensors").string());
  return file.tensor(name).clone();
}

std::shared_ptr<Pipeline> pipeline_for(DType dtype) {
  static std::map<DType, std::shared_ptr<Pipeline>> cache;
  auto& slot = cache[dtype];
  if (!slot) {
    PipelineOptions options;
    options.dtype = dtype;
    slot = Flux1Pipeline::load(kModel, options);
  }
  return slot;
}

GenerateRequest request_for(const KontextCase& c) {
  GenerateRequest r;
  r.prompts = {c.prompt};
  r.negative_prompt = c.negative_prompt;
  r.true_cfg = c.true_cfg;
  r.images_per_prompt = c.images_per_prompt;
  r.steps = c.steps;
  r.guidance = c.guidance;
  r.width = c.width;  // diffusers' width and height with max_area = width x height
  r.height = c.height;
  r.max_area = c.max_area;
  r.max_sequence_length = c.max_sequence_length;
  r.seed = c.seed;
  r.reference_images.push_back(io::to_public(io::to_rgb(io::read_png(c.input().string()))));
  return r;
}

class Flux1KontextGolden : public ::testing::TestWithParam<KontextCase> {};

TEST(Flux1KontextGoldenManifest, EveryCaseHasItsFiles) {
  ASSERT_GE(all_cases().size(), 3u) << "tests/data/flux1_kontext/manifest.json missing or unreadable";
  for (const KontextCase& c : all_cases()) {
    EXPECT_TRUE(fs::exists(c.dir() / "intermediates.safetensors")) << c.name;
    for (const std::string& f : c.outputs) EXPECT_TRUE(fs::exists(c.dir() / f)) << c.name << " " << f;
  }
}

TEST(Flux1Kontext, ImageSizeIsThePreferredResolutionOfItsAspect) {
  int w = 0, h = 0;
  kontext_image_size(64, 64, 16, &w, &h);
  EXPECT_EQ(w, 1024);
  EXPECT_EQ(h, 1024);
  kontext_image_size(100, 75, 16, &w, &h);  // floored to 96x64 first: aspect 1.5
  EXPECT_EQ(w, 1248);
  EXPECT_EQ(h, 832);
  kontext_image_size(600, 1400, 16, &w, &h);
  EXPECT_EQ(w, 672);
  EXPECT_EQ(h, 1568);
  EXPECT_THROW(kontext_image_size(15, 64, 16, &w, &h), Error);
}

TEST(Flux1Kontext, FolderLoadsAsKontextAndNeedsItsImage) {
  const io::ResolvedModel model = io::resolve_model(kModel.string());
  EXPECT_EQ(&check_pipeline_folder(model), &flux1_kontext_kind());
  const auto pipe = pipeline_for(DType::F32);
  EXPECT_EQ(&pipe->kind(), &flux1_kontext_kind());
  EXPECT_EQ(pipe->facts().limits.max_reference_images, 1);
  EXPECT_FALSE(pipe->facts().limits.mask);
  GenerateRequest r = request_for(all_cases().at(0));
  r.reference_images.clear();
  try {
    pipe->plan(r);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.field(), "reference_images") << e.what();
  }
  r = request_for(all_cases().at(0));
  r.reference_images.push_back(r.reference_images.front());
  EXPECT_THROW(pipe->plan(r), Error);  // one image to edit
}

TEST_P(Flux1KontextGolden, Generate) {
  const KontextCase& c = GetParam();
  int w = 0, h = 0;
  const io::Image image = io::to_rgb(io::read_png(c.input().string()));
  kontext_image_size(image.width, image.height, 16, &w, &h);
  EXPECT_EQ(w, c.reference_width);
  EXPECT_EQ(h, c.reference_height);

  const GenerateRequest request = request_for(c);
  const auto pipe = pipeline_for(c.dtype);
  const GenerateResult out = pipe->generate(request);
  ASSERT_EQ(out.images.size(), static_cast<size_t>(c.images_per_prompt));
  EXPECT_EQ(out.width, c.output_width);
  EXPECT_EQ(out.height, c.output_height);

  const Tensor final_ref = intermediate(c, "final_latents").to(DType::F32);  // [B, N, 64]
  const Tensor final_ours = flux1_pack_latents(out.final_latents).to(DType::F32);
  const auto stats = test::compare(final_ours, final_ref);
  EXPECT_TRUE(test::all_close(final_ours, final_ref,
                              test::tolerance_for(test::TolClass::ModuleGolden, c.dtype), c.dtype))
      << "final latents";
  const test::GoldenImagesWorst worst = test::expect_golden_images(out.images, c.dir(), c.outputs, c.dtype);
  std::printf("flux1_kontext/%s: final latents rel-L2 %.3e; images max |diff| %d, min SSIM %.5f\n",
              c.name.c_str(), stats.rel_l2, worst.max_abs, worst.min_ssim);
}

// FluxKontextPipeline's max_area rescale: the aspect ratio kept, rounded, floored to 16; and a max_area too
// small for an extreme aspect ratio names the field.
TEST(Flux1Kontext, OutputSizeForMaxAreaIsDiffusers) {
  int w = 0, h = 0;
  kontext_output_size(96, 64, 4096, 16, &w, &h);  // sqrt(6144) = 78.4, sqrt(2730.7) = 52.3
  EXPECT_EQ(w, 64);
  EXPECT_EQ(h, 48);
  kontext_output_size(512, 512, 1024 * 1024, 16, &w, &h);  // diffusers' default area
  EXPECT_EQ(w, 1024);
  EXPECT_EQ(h, 1024);
  kontext_output_size(1920, 1080, 1024 * 1024, 16, &w, &h);  // 1365.3 x 768.0
  EXPECT_EQ(w, 1360);
  EXPECT_EQ(h, 768);
  kontext_output_size(64, 16, 81 * 81, 16, &w, &h);  // 162 x 40.5: a tie, then floored
  EXPECT_EQ(w, 160);
  EXPECT_EQ(h, 32);
  try {
    kontext_output_size(1024, 16, 256, 16, &w, &h);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "max_area");
  }
}

INSTANTIATE_TEST_SUITE_P(Diffusers, Flux1KontextGolden, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Flux1KontextGolden);

}  // namespace
}  // namespace fluxrt::pipelines
