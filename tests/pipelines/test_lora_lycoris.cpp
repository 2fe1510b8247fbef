// LyCORIS LoKr / LoHa and DoRA files (issue 46, docs/lora.md) on the tiny FLUX.1-dev and
// FLUX.2-klein pipelines, against the trainers' own math (tests/data/lora_lycoris, made by
// tools/reference/dump_lycoris.py; diffusers' loader is no reference for these):
//   MergedWeights  a file mixing LoRA, LoKr (whole and decomposed halves), LoHa and DoRA (both
//                  axes, on fused BFL layers too) merges to the script's f32 weights within f32
//                  rounding, in kohya and ComfyUI names alike
//   Images         that file merged at load and per request, strengths 1 and 0.7: the image of the
//                  pipeline with the script's merge, f32 within 2/255, bf16 SSIM >= 0.98; the next
//                  request without it is the base again bit for bit
//   PeftDora       diffusers' save of a PEFT use_dora adapter (lora_magnitude_vector) gives PEFT's
//                  own DoRA forward's image, merged and per request
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/image.h"
#include "io/safetensors.h"
#include "models/flux/flux1_names.h"
#include "models/flux/flux2_names.h"
#include "models/flux/flux_lora_names.h"
#include "models/lora/lora_delta.h"
#include "models/weight_binder.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/lora_test_support.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;
using models::LoraSpec;
using test::expect_lora_image_matches;
using test::lora_dtype_dir;
using test::lora_request;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kLycoris = kData / "lora_lycoris";

struct Family {
  std::string name;  // "flux1" / "klein"
  fs::path model;
};

const std::vector<Family> kFamilies = {{"flux1", kData / "models/flux1-dev-tiny"},
                                       {"klein", kData / "models/flux2-klein-tiny"}};

std::unique_ptr<Pipeline> load(const Family& f, DType dtype, std::vector<LoraSpec> loras = {}) {
  PipelineOptions o;
  o.dtype = dtype;
  o.parallel_load = false;
  o.loras = std::move(loras);
  if (f.name == "flux1") return Flux1Pipeline::load(f.model, o);
  return Flux2KleinPipeline::load(f.model, o);
}

LoraSpec spec(const Family& f, const std::string& file, float strength = 1.0f) {
  return {(kLycoris / f.name / (file + ".safetensors")).string(), strength};
}

io::Image reference(const Family& f, const std::string& c, DType dtype) {
  return io::to_rgb(
      io::read_png((kLycoris / (f.name + "_" + c + "_" + lora_dtype_dir(dtype)) / "image_0.png").string()));
}

TEST(LoraLycoris, MergedWeightsAreTheTrainersMath) {
  for (const Family& f : kFamilies) {
    const models::TensorStore raw =
        models::TensorStore::open((f.model / "transformer" / "diffusion_pytorch_model.safetensors").string());
    const bool flux1 = f.name == "flux1";
    const models::TensorStore canonical =
        flux1 ? models::flux1_to_canonical(raw) : models::flux2_to_canonical(raw);
    const models::LoraNameScheme& scheme = flux1 ? models::flux1_lora_scheme() : models::flux2_lora_scheme();
    const models::TensorStore want =
        models::TensorStore::open((kLycoris / f.name / "merged.safetensors").string());
    std::vector<models::TensorStore> got;
    for (const char* file : {"kohya_mixed", "comfy_mixed"}) {
      const models::TensorStore merged = models::merge_loras(canonical, {spec(f, file)}, scheme, DType::F32);
      got.push_back(flux1 ? models::flux1_canonical_to_bfl(merged) : models::flux2_canonical_to_bfl(merged));
    }
    ASSERT_GT(want.size(), 10u);
    for (const std::string& name : want.names()) {
      const std::vector<float> w = want.get(name).to_vector();
      for (size_t k = 0; k < got.size(); ++k) {
        ASSERT_TRUE(got[k].contains(name)) << f.name << " " << name;
        const std::vector<float> g = got[k].get(name).to_vector();
        ASSERT_EQ(g.size(), w.size()) << name;
        double worst = 0;
        for (size_t i = 0; i < w.size(); ++i)
          worst = std::max(worst, std::abs(double(g[i]) - w[i]) / (1e-3 + std::abs(double(w[i]))));
        // f32 rounding of sums over at most a few hundred terms, taken relative to each element.
        EXPECT_LT(worst, 2e-4) << f.name << " " << name << (k ? " (ComfyUI names)" : " (kohya names)");
      }
    }
  }
}

class LoraLycorisByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(LoraLycorisByDtype, MixedFileMergedAndPerRequest) {
  const DType dt = GetParam();
  for (const Family& f : kFamilies) {
    expect_lora_image_matches(load(f, dt, {spec(f, "kohya_mixed")})->generate(lora_request()).images.at(0),
                              reference(f, "mixed_s1", dt), dt, f.name + " kohya mixed merged");
    expect_lora_image_matches(
        load(f, dt, {spec(f, "comfy_mixed", 0.7f)})->generate(lora_request()).images.at(0),
        reference(f, "mixed_s07", dt), dt, f.name + " ComfyUI mixed 0.7 merged");
    const auto pipe = load(f, dt);
    const GenerateResult base = pipe->generate(lora_request());
    expect_lora_image_matches(pipe->generate(lora_request({spec(f, "kohya_mixed")})).images.at(0),
                              reference(f, "mixed_s1", dt), dt, f.name + " kohya mixed per request");
    expect_lora_image_matches(pipe->generate(lora_request({spec(f, "comfy_mixed", 0.7f)})).images.at(0),
                              reference(f, "mixed_s07", dt), dt, f.name + " ComfyUI mixed 0.7 per request");
    const GenerateResult again = pipe->generate(lora_request());
    EXPECT_TRUE(again.images.at(0).pixels == base.images.at(0).pixels)
        << f.name << ": merged copy left attached";
  }
}

TEST_P(LoraLycorisByDtype, PeftDoraIsPeftsOwnForward) {
  const DType dt = GetParam();
  for (const Family& f : kFamilies) {
    expect_lora_image_matches(load(f, dt, {spec(f, "peft_dora")})->generate(lora_request()).images.at(0),
                              reference(f, "peft_dora", dt), dt, f.name + " PEFT DoRA merged");
    expect_lora_image_matches(load(f, dt)->generate(lora_request({spec(f, "peft_dora")})).images.at(0),
                              reference(f, "peft_dora", dt), dt, f.name + " PEFT DoRA per request");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraLycorisByDtype, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return lora_dtype_dir(i.param); });

}  // namespace
}  // namespace fluxrt::pipelines
