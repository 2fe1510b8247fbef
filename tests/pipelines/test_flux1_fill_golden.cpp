// FLUX.1 Fill vs diffusers 0.42.1 FluxFillPipeline on the tiny random Fill folder
// (tests/data/models/flux1-fill-tiny, tests/data/flux1_fill, tools/reference/dump_flux1_fill.py:
// an anti-aliased mask at the defaults, the 100x75 source and mask resized to 96x64 with two images
// at strength 0.8, all white, all black, an RGB mask; f32, some also in bf16):
//   Kind          the folder loads as the FLUX.1 Fill kind, with FluxFillPipeline's defaults
//   Mask          the packed mask [B, N, 256] equals prepare_mask_latents' exactly
//   Generate      steps run, final latents (module-golden row of the dtype) and the images: f32
//                 every sample within 2/255, bf16 SSIM >= 0.98 (docs/numerics.md)
//   BadInput      no mask, a mask of another size: one-line InvalidArgument naming "mask"
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/image.h"
#include "io/model_discovery.h"
#include "io/public_image.h"
#include "io/safetensors.h"
#include "pipelines/flux1/flux1_fill.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/img2img.h"
#include "pipelines/variant.h"
#include "support/compare.h"
#include "support/golden_images.h"

namespace fluxrt::pipelines {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kModel = kData / "models" / "flux1-fill-tiny";

struct FillCase {
  std::string name, prompt, source, mask;
  DType dtype = DType::F32;
  uint64_t seed = 0;
  int steps = 0, images_per_prompt = 1, width = 0, height = 0, max_sequence_length = 32;
  float strength = 1, guidance = 30;
  std::vector<std::string> outputs;

  fs::path dir() const { return kData / "flux1_fill" / name; }
  fs::path input(const std::string& file) const { return kData / "flux1_fill" / "inputs" / file; }
};

void PrintTo(const FillCase& c, std::ostream* os) { *os << c.name; }

// Read at test registration; a missing manifest gives no cases, which the Manifest test reports.
std::vector<FillCase> load_cases() {
  std::vector<FillCase> cases;
  try {
    std::ifstream in(kData / "flux1_fill" / "manifest.json");
    if (!in) return cases;
    const json manifest = json::parse(in);
    for (const json& j : manifest.at("cases")) {
      FillCase c;
      c.name = j.at("name");
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
      c.width = j.at("width");
      c.height = j.at("height");
      c.outputs = j.at("outputs").get<std::vector<std::string>>();
      cases.push_back(std::move(c));
    }
  } catch (const std::exception&) {
    cases.clear();
  }
  return cases;
}

const std::vector<FillCase>& all_cases() {
  static const std::vector<FillCase> cases = load_cases();
  return cases;
}

io::Image input(const FillCase& c, const std::string& file) {
  return io::to_rgb(io::read_png(c.input(file).string()));
}

Tensor intermediate(const FillCase& c, const std::string& name) {
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

GenerateRequest request_for(const FillCase& c) {
  GenerateRequest r;
  r.prompts = {c.prompt};
  r.images_per_prompt = c.images_per_prompt;
  r.steps = c.steps;
  if (c.guidance != kFlux1FillGuidance) r.guidance = c.guidance;  // else: the model's default
  if (c.strength != kFlux1FillStrength) r.strength = c.strength;
  r.width = c.width;  // FluxFillPipeline takes the size it is given (1024x1024 by default)
  r.height = c.height;
  r.max_sequence_length = c.max_sequence_length;
  r.seed = c.seed;
  r.init_image = io::to_public(input(c, c.source));
  r.mask_image = io::to_public(input(c, c.mask));
  return r;
}

class Flux1FillGolden : public ::testing::TestWithParam<FillCase> {};

TEST(Flux1FillGoldenManifest, EveryCaseHasItsFiles) {
  ASSERT_GE(all_cases().size(), 7u) << "tests/data/flux1_fill/manifest.json missing or unreadable";
  for (const FillCase& c : all_cases()) {
    EXPECT_TRUE(fs::exists(c.dir() / "intermediates.safetensors")) << c.name;
    for (const std::string& f : c.outputs) EXPECT_TRUE(fs::exists(c.dir() / f)) << c.name << " " << f;
  }
}

TEST(Flux1FillKind, FolderLoadsAsFillWithItsDefaults) {
  const io::ResolvedModel model = io::resolve_model(kModel.string());
  EXPECT_EQ(&check_pipeline_folder(model), &flux1_fill_kind());
  const VariantInfo v = detect_variant(model);
  EXPECT_EQ(v.kind, &flux1_fill_kind());
  EXPECT_EQ(v.shape.in_channels, kFlux1FillInChannels);
  // From the tensors alone (a single file): the widened input names the kind too.
  EXPECT_EQ(detect_variant_from_shapes(io::tensor_shapes(model.transformer()->weights)).kind,
            &flux1_fill_kind());
  EXPECT_EQ(detect_variant(io::resolve_model((kData / "models" / "flux1-dev-tiny").string())).kind,
            &flux1_kind());
  const auto pipe = pipeline_for(DType::F32);
  EXPECT_EQ(&pipe->kind(), &flux1_fill_kind());
  EXPECT_EQ(pipe->facts().defaults.steps, kFlux1FillSteps);
  EXPECT_TRUE(pipe->facts().limits.mask_required);
  EXPECT_FALSE(pipe->facts().limits.true_cfg);
  const FillCase& c = all_cases().at(0);
  GenerateRequest r = request_for(c);
  r.guidance.reset();
  r.strength.reset();
  const fluxrt::RequestPlan plan = pipe->plan(r);
  EXPECT_EQ(plan.guidance, kFlux1FillGuidance);
  EXPECT_EQ(plan.strength, kFlux1FillStrength);
  EXPECT_EQ(plan.steps_run, c.steps);
}

TEST(Flux1FillKind, BadInputNamesTheMask) {
  const auto pipe = pipeline_for(DType::F32);
  const FillCase& c = all_cases().at(0);
  auto field_of = [&](const GenerateRequest& r) {
    try {
      pipe->plan(r);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.field();
    }
    return std::string("(accepted)");
  };
  GenerateRequest no_mask = request_for(c);
  no_mask.mask_image.reset();
  EXPECT_EQ(field_of(no_mask), "mask");
  GenerateRequest nothing = request_for(c);
  nothing.mask_image.reset();
  nothing.init_image.reset();
  EXPECT_EQ(field_of(nothing), "mask");
  GenerateRequest other_size = request_for(c);
  other_size.mask_image = io::to_public(input(c, "mask_soft_disc_100x75.png"));
  EXPECT_EQ(field_of(other_size), "mask");
  GenerateRequest cfg = request_for(c);
  cfg.true_cfg = 4.0f;
  cfg.negative_prompt = "blurry";
  EXPECT_EQ(field_of(cfg), "true_cfg");
}

TEST_P(Flux1FillGolden, Mask) {
  const FillCase& c = GetParam();
  const io::Image source = input(c, c.source);
  const Tensor expected = intermediate(c, "mask").to(DType::F32);  // [B, N, 256]
  const Tensor ours = flux1_fill_mask_tokens(
      binarise_inpaint_mask(input(c, c.mask), source.width, source.height, c.width, c.height), c.width,
      c.height, 8);
  ASSERT_EQ(expected.size(0), c.images_per_prompt);
  ASSERT_EQ(ours.size(1), expected.size(1));
  ASSERT_EQ(ours.size(2), expected.size(2));
  const std::vector<float> want = expected.to_vector(), got = ours.to_vector();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i % got.size()], want[i]) << "value " << i;
}

TEST_P(Flux1FillGolden, Generate) {
  const FillCase& c = GetParam();
  const GenerateRequest request = request_for(c);
  const auto pipe = pipeline_for(c.dtype);
  const fluxrt::RequestPlan plan = pipe->plan(request);
  EXPECT_EQ(plan.width, c.width);
  EXPECT_EQ(plan.height, c.height);
  EXPECT_EQ(plan.steps_run, c.steps - img2img_start_index(c.steps, c.strength));
  const GenerateResult out = pipe->generate(request);
  ASSERT_EQ(out.images.size(), static_cast<size_t>(c.images_per_prompt));

  const Tensor final_ref = intermediate(c, "final_latents").to(DType::F32);  // [B, N, 64]
  const Tensor final_ours = flux1_pack_latents(out.final_latents).to(DType::F32);
  const auto stats = test::compare(final_ours, final_ref);
  EXPECT_TRUE(test::all_close(final_ours, final_ref,
                              test::tolerance_for(test::TolClass::ModuleGolden, c.dtype), c.dtype))
      << "final latents";
  const test::GoldenImagesWorst worst = test::expect_golden_images(out.images, c.dir(), c.outputs, c.dtype);
  std::printf("flux1_fill/%s: final latents rel-L2 %.3e; images max |diff| %d, min SSIM %.5f\n",
              c.name.c_str(), stats.rel_l2, worst.max_abs, worst.min_ssim);
}

INSTANTIATE_TEST_SUITE_P(Diffusers, Flux1FillGolden, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Flux1FillGolden);

}  // namespace
}  // namespace fluxrt::pipelines
