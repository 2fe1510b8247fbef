// Inpainting vs diffusers on the tiny random models: FLUX.2 klein vs Flux2KleinInpaintPipeline
// (tests/data/klein_inpaint, tools/reference/dump_klein_inpaint.py: an anti-aliased mask on a source
// floored from 100x75, all black, all white, an RGB mask with an extra reference and two images, the
// base variant with CFG) and FLUX.1 vs FluxInpaintPipeline (tests/data/flux1_inpaint,
// dump_flux1_inpaint.py: dev with an anti-aliased mask, the 100x75 source and mask resized to
// 64x64 with two images, schnell with an RGB mask); f32, some also in bf16:
//   Mask          the packed mask (binarised, resized to the token grid, or per latent pixel for
//                 FLUX.1) equals diffusers' exactly
//   Generate      size and steps run, final latents (module-golden row of the dtype) and the
//                 images: f32 every sample within 2/255, bf16 SSIM >= 0.98 (docs/numerics.md)
// (all black: nothing is repainted, the result is the source through the VAE, as diffusers').
// padding_mask_crop (crop_corner, dev_crop_corner, dev_crop_band): a window around an off-centre
// mask repainted at the run's size and pasted back over the 100x75 source by the mask; the band's
// window cannot reach the run's aspect, so its resize fills the rows around it.
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
#include "io/image.h"
#include "io/public_image.h"
#include "io/safetensors.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/img2img.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "support/compare.h"
#include "support/golden_images.h"

namespace fluxrt::pipelines {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kData = FLUXRT_TEST_DATA_DIR;

struct InpaintCase {
  std::string folder, name, model, prompt, source, mask;
  std::optional<std::string> reference;
  DType dtype = DType::F32;
  uint64_t seed = 0;
  int steps = 0, images_per_prompt = 1, width = 0, height = 0, max_sequence_length = 32;
  int run_width = 0, run_height = 0;  // the run's size (with a crop not the output's)
  std::optional<int> padding_mask_crop;
  float strength = 0, guidance = 1;
  std::vector<std::string> outputs;

  fs::path dir() const { return kData / folder / name; }
  fs::path input(const std::string& file) const { return kData / folder / "inputs" / file; }
  fs::path model_root() const { return kData / "models" / model; }
  bool flux1() const { return folder == "flux1_inpaint"; }
};

void PrintTo(const InpaintCase& c, std::ostream* os) { *os << c.folder << "/" << c.name; }

// Read at test registration; a missing manifest gives no cases, which the Manifest test reports.
std::vector<InpaintCase> load_cases(const std::string& folder) {
  std::vector<InpaintCase> cases;
  try {
    std::ifstream in(kData / folder / "manifest.json");
    if (!in) return cases;
    const json manifest = json::parse(in);
    for (const json& j : manifest.at("cases")) {
      InpaintCase c;
      c.folder = folder;
      c.name = j.at("name");
      c.model = j.at("model");
      c.dtype = j.at("dtype") == "bf16" ? DType::BF16 : DType::F32;
      c.prompt = j.at("prompt");
      c.seed = j.at("seed");
      c.steps = j.at("steps");
      c.strength = j.at("strength");
      c.guidance = j.at("guidance");
      c.images_per_prompt = j.at("images_per_prompt");
      c.max_sequence_length = j.at("max_sequence_length");
      c.source = j.at("source");
      c.mask = j.at("mask");
      if (!j.at("reference").is_null()) c.reference = j.at("reference").get<std::string>();
      c.width = j.at("width");
      c.height = j.at("height");
      c.run_width = j.at("run_width");
      c.run_height = j.at("run_height");
      if (!j.at("padding_mask_crop").is_null()) c.padding_mask_crop = j.at("padding_mask_crop").get<int>();
      c.outputs = j.at("outputs").get<std::vector<std::string>>();
      cases.push_back(std::move(c));
    }
  } catch (const std::exception&) {
    cases.clear();
  }
  return cases;
}

const std::vector<InpaintCase>& all_cases() {
  static const std::vector<InpaintCase> cases = [] {
    std::vector<InpaintCase> all = load_cases("klein_inpaint");
    for (InpaintCase& c : load_cases("flux1_inpaint")) all.push_back(std::move(c));
    return all;
  }();
  return cases;
}

io::Image input(const InpaintCase& c, const std::string& file) {
  return io::to_rgb(io::read_png(c.input(file).string()));
}

Tensor intermediate(const InpaintCase& c, const std::string& name) {
  const io::Checkpoint file = io::Checkpoint::open((c.dir() / "intermediates.safetensors").string());
  return file.tensor(name).clone();
}

std::shared_ptr<Pipeline> pipeline_for(const InpaintCase& c) {
  static std::map<std::pair<std::string, DType>, std::shared_ptr<Pipeline>> cache;
  auto& slot = cache[{c.model, c.dtype}];
  if (!slot) {
    PipelineOptions options;
    options.dtype = c.dtype;
    if (c.flux1())
      slot = Flux1Pipeline::load(c.model_root(), options);
    else
      slot = Flux2KleinPipeline::load(c.model_root(), options);
  }
  return slot;
}

GenerateRequest request_for(const InpaintCase& c) {
  GenerateRequest r;
  r.prompts = {c.prompt};
  r.images_per_prompt = c.images_per_prompt;
  r.steps = c.steps;
  // The distilled klein cases pass diffusers' 1.0 and schnell's its 0: unused either way.
  if (c.guidance != 1.0f && c.model != "flux1-schnell-tiny") r.guidance = c.guidance;
  if (c.flux1()) {  // FluxInpaintPipeline takes the size it is given (1024x1024 by default)
    r.width = c.width;
    r.height = c.height;
  }
  r.max_sequence_length = c.max_sequence_length;
  r.seed = c.seed;
  r.strength = c.strength;
  r.init_image = io::to_public(input(c, c.source));
  r.mask_image = io::to_public(input(c, c.mask));
  if (c.reference) r.reference_images.push_back(io::to_public(input(c, *c.reference)));
  r.padding_mask_crop = c.padding_mask_crop;
  return r;
}

// [B, C, h, w] -> [B, h*w, C], as diffusers' Flux2 _pack_latents.
Tensor pack(const Tensor& latents) {
  const Shape& s = latents.shape();
  return latents.reshape({s[0], s[1], s[2] * s[3]}).permute({0, 2, 1}).contiguous();
}

class InpaintGolden : public ::testing::TestWithParam<InpaintCase> {};

TEST(InpaintGoldenManifest, EveryCaseHasItsFiles) {
  ASSERT_GE(all_cases().size(), 16u)
      << "tests/data/{klein,flux1}_inpaint/manifest.json missing or unreadable";
  for (const InpaintCase& c : all_cases()) {
    EXPECT_TRUE(fs::exists(c.dir() / "intermediates.safetensors")) << c.name;
    for (const std::string& f : c.outputs) EXPECT_TRUE(fs::exists(c.dir() / f)) << c.name << " " << f;
  }
}

TEST_P(InpaintGolden, Mask) {
  const InpaintCase& c = GetParam();
  io::Image source = input(c, c.source), mask_image = input(c, c.mask);
  const int w = c.run_width, h = c.run_height;
  // padding_mask_crop: the window cut out and resized to the run's size stands in for both.
  if (const auto crop =
          PreparedMaskCrop::prepare(c.padding_mask_crop, source, mask_image, w, h, MaskCrop::Fit::Cover)) {
    source = crop->cropped_image;
    mask_image = crop->cropped_mask;
  }
  const Tensor packed = intermediate(c, "mask").to(DType::F32);  // [B, N, 1] klein, [B, N, 64] FLUX.1
  const InpaintMask mask =
      c.flux1() ? prepare_latent_patch_mask(mask_image, source.width, source.height, w, h, h / 8, w / 8)
                : prepare_inpaint_mask(mask_image, source.width, source.height, w, h, h / 16, w / 16);
  const int64_t tokens = mask.grid_h * mask.grid_w, channels = packed.size(2);
  ASSERT_EQ(packed.size(0), c.images_per_prompt);
  ASSERT_EQ(packed.size(1), tokens);
  const std::vector<float> expected = packed.to_vector();
  for (size_t i = 0; i < expected.size(); ++i) {
    const int64_t t = static_cast<int64_t>(i) / channels % tokens, ch = static_cast<int64_t>(i) % channels;
    ASSERT_EQ(mask.weights[static_cast<size_t>(t * mask.period + ch % mask.period)], expected[i])
        << "token " << t << " channel " << ch;
  }
}

TEST_P(InpaintGolden, Generate) {
  const InpaintCase& c = GetParam();
  const GenerateRequest request = request_for(c);
  const auto pipe = pipeline_for(c);
  const fluxrt::RequestPlan plan = pipe->plan(request);
  EXPECT_EQ(plan.width, c.run_width);
  EXPECT_EQ(plan.height, c.run_height);
  EXPECT_EQ(plan.steps_run, c.steps - img2img_start_index(c.steps, c.strength));
  const GenerateResult out = pipe->generate(request);
  ASSERT_EQ(out.images.size(), static_cast<size_t>(c.images_per_prompt));

  const Tensor final_ref = intermediate(c, "final_latents");  // packed: [B, N, 128] / [B, N, 64]
  const Tensor final_ours = c.flux1() ? flux1_pack_latents(out.final_latents) : pack(out.final_latents);
  const auto stats = test::compare(final_ours.to(DType::F32), final_ref.to(DType::F32));
  EXPECT_TRUE(test::all_close(final_ours.to(DType::F32), final_ref.to(DType::F32),
                              test::tolerance_for(test::TolClass::ModuleGolden, c.dtype), c.dtype))
      << "final latents";
  const test::GoldenImagesWorst worst = test::expect_golden_images(out.images, c.dir(), c.outputs, c.dtype);
  std::printf("%s/%s: final latents rel-L2 %.3e; images max |diff| %d, min SSIM %.5f\n", c.folder.c_str(),
              c.name.c_str(), stats.rel_l2, worst.max_abs, worst.min_ssim);
}

INSTANTIATE_TEST_SUITE_P(Diffusers, InpaintGolden, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return (info.param.flux1() ? std::string("flux1_") : std::string("klein_")) + info.param.name;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(InpaintGolden);

}  // namespace
}  // namespace fluxrt::pipelines
